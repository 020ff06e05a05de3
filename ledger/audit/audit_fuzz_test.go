package audit

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// keys of the fixture: coordinator, provider, renter.
type parties struct {
	coord, prov, renter       crypto.PrivKey
	coordID, provID, renterID peer.ID
}

func newParties(tb testing.TB) parties {
	var p parties
	for _, k := range []*crypto.PrivKey{&p.coord, &p.prov, &p.renter} {
		*k, _, _ = crypto.GenerateEd25519Key(rand.Reader)
	}
	p.coordID, _ = peer.IDFromPrivateKey(p.coord)
	p.provID, _ = peer.IDFromPrivateKey(p.prov)
	p.renterID, _ = peer.IDFromPrivateKey(p.renter)
	return p
}

func seal(tb testing.TB, kind protocol.Kind, v any, k crypto.PrivKey) []byte {
	tb.Helper()
	raw, err := protocol.Seal(kind, v, k)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// jobRecords are one job's records, paid under the countersigned-receipt rule, and what
// the provider earns from them.
func jobRecords(tb testing.TB, p parties, job string, secs int64) (protocol.AuditReceipt, protocol.MicroUSDC) {
	l := protocol.Lease{Version: 1, Job: job, Proposal: strings.Repeat("0", 64), Renter: p.renterID.String(), Provider: p.provID.String(),
		Model: "L4-24GB", GPUs: 2, Price: 1_800_000, IssuedAt: t0, EndsAt: t0.Add(2 * time.Hour), Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	lraw := seal(tb, protocol.KindLease, l, p.prov)
	lcs := seal(tb, protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindLease, SHA256: protocol.RecordSHA256(lraw), Job: job, Signer: p.renterID.String(), SignedAt: t0}, p.renter)
	r := protocol.Receipt{Version: 1, Job: job, Lease: protocol.RecordSHA256(lraw), Provider: l.Provider, Renter: l.Renter, Model: l.Model, GPUs: 2,
		StartedAt: t0, EndedAt: t0.Add(time.Duration(secs) * time.Second), Seconds: secs, Price: l.Price, Amount: protocol.Cost(l.Price, 2, secs), Reason: "exited"}
	rraw := seal(tb, protocol.KindReceipt, r, p.prov)
	rcs := seal(tb, protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindReceipt, SHA256: protocol.RecordSHA256(rraw), Job: job, Signer: p.renterID.String(), SignedAt: r.EndedAt}, p.renter)
	h := protocol.EscrowHold{Version: 1, Coordinator: p.coordID.String(), Renter: l.Renter, Provider: l.Provider, Job: job,
		Amount: protocol.HoldAmount(l.Price, 2, 7200), CommissionBPS: 1000, IssuedAt: t0, ExpiresAt: t0.Add(26 * time.Hour)}
	hraw := seal(tb, protocol.KindEscrowHold, h, p.coord)
	charge := protocol.Charge(r.Amount, h.Amount)
	return protocol.AuditReceipt{Receipt: rraw, Lease: lraw, LeaseCountersig: lcs, Hold: hraw, ReceiptCountersig: rcs, Rule: protocol.RuleCountersignedReceipt},
		charge - protocol.Commission(charge, 1000)
}

// genuineBundle is a settled batch paying one provider, by bank, for two jobs.
func genuineBundle(tb testing.TB, p parties) (protocol.AuditBundle, protocol.PayoutBatch) {
	r1, n1 := jobRecords(tb, p, "00000000000000a1", 1800)
	r2, n2 := jobRecords(tb, p, "00000000000000a2", 3599)
	receipts := []string{protocol.RecordSHA256(r1.Receipt), protocol.RecordSHA256(r2.Receipt)}
	if receipts[0] > receipts[1] {
		receipts[0], receipts[1] = receipts[1], receipts[0]
	}
	root, _ := protocol.MerkleRoot(receipts)
	total := n1 + n2
	b := protocol.PayoutBatch{Version: 1, Batch: "20261204-001", Coordinator: p.coordID.String(), Seq: 3, IssuedAt: t0.Add(72 * time.Hour),
		State: protocol.BatchSettled, CommissionBPS: 1000, MerkleRoot: root,
		Payouts: []protocol.Payout{{Provider: p.provID.String(), Method: protocol.PayoutBank, Destination: "FR14 **** 2606",
			Amount: total - total%protocol.BankCent, Rounding: total % protocol.BankCent, Receipts: receipts, MerkleRoot: root, Transaction: "BANKREF1", Paid: true}}}
	return protocol.AuditBundle{Batch: seal(tb, protocol.KindPayoutBatch, b, p.coord), Receipts: []protocol.AuditReceipt{r1, r2}}, b
}

// TestAuditFixture: the genuine bundle passes; the fuzz test mutates it.
func TestAuditFixture(t *testing.T) {
	p := newParties(t)
	bundle, _ := genuineBundle(t, p)
	if rep := Batch(context.Background(), bundle, Options{Trust: []peer.ID{p.coordID}}); !rep.OK {
		t.Fatalf("the genuine bundle fails: %v", rep.Discrepancies)
	}
}

// FuzzAuditAmounts: a coordinator (or a provider, for its receipts) changes what a batch
// pays and signs again what it can sign: the payout's amount or rounding, a receipt's
// seconds and amount (still consistent with each other), the rule a receipt was charged
// under, a hold's amount (below the charge) or commission. The audit never passes a
// change.
func FuzzAuditAmounts(f *testing.F) {
	p := newParties(f)
	f.Add(uint8(0), int64(1))
	f.Add(uint8(1), int64(-1))
	f.Add(uint8(2), int64(600))
	f.Add(uint8(3), int64(0))
	f.Add(uint8(4), int64(-1000))
	f.Add(uint8(5), int64(1))
	f.Fuzz(func(t *testing.T, what uint8, delta int64) {
		bundle, b := genuineBundle(t, p)
		if delta == 0 && what%6 != 3 {
			return // no change at all
		}
		switch what % 6 {
		case 0: // the payout's amount
			b.Payouts[0].Amount += protocol.MicroUSDC(delta)
		case 1: // its rounding
			b.Payouts[0].Rounding += protocol.MicroUSDC(delta)
		case 2: // a receipt, re-signed by the provider with other seconds (and its amount)
			env, _ := protocol.Open(bundle.Receipts[0].Receipt)
			r, _, _ := protocol.OpenReceipt(env.Raw)
			r.Seconds += delta
			r.EndedAt = r.EndedAt.Add(time.Duration(delta) * time.Second)
			r.Amount = protocol.Cost(r.Price, r.GPUs, r.Seconds)
			bundle.Receipts[0].Receipt = seal(t, protocol.KindReceipt, r, p.prov)
		case 3: // the rule: charged as if under the checkpoint rule, without the checkpoint
			bundle.Receipts[0].Rule = protocol.RuleCheckpoint
		case 4: // the hold's amount, re-signed by the coordinator, below the receipt's (a
			// hold above the charge changes nothing paid)
			env, _ := protocol.Open(bundle.Receipts[1].Hold)
			h, _ := protocol.CheckHold(env.Raw, t0, protocol.NewTrust(p.coordID))
			r, _, _ := protocol.OpenReceipt(bundle.Receipts[1].Receipt)
			h.Amount = max(1, r.Amount-1-protocol.MicroUSDC(uint64(delta)%1000))
			net := func(held protocol.MicroUSDC) protocol.MicroUSDC {
				c := protocol.Charge(r.Amount, held)
				return c - protocol.Commission(c, h.CommissionBPS)
			}
			if net(h.Amount) == net(r.Amount) {
				return // the commission absorbed it: the provider is paid the same
			}
			bundle.Receipts[1].Hold = seal(t, protocol.KindEscrowHold, h.EscrowHold, p.coord)
		case 5: // the hold's commission
			env, _ := protocol.Open(bundle.Receipts[1].Hold)
			h, _ := protocol.CheckHold(env.Raw, t0, protocol.NewTrust(p.coordID))
			h.CommissionBPS = int(uint64(delta) % (protocol.MaxCommissionBPS + 1))
			if h.CommissionBPS == 1000 {
				return
			}
			bundle.Receipts[1].Hold = seal(t, protocol.KindEscrowHold, h.EscrowHold, p.coord)
		}
		b.Seq++
		raw, err := protocol.Seal(protocol.KindPayoutBatch, b, p.coord)
		if err != nil {
			return
		}
		bundle.Batch = raw
		if rep := Batch(context.Background(), bundle, Options{Trust: []peer.ID{p.coordID}}); rep.OK {
			t.Fatalf("change %d by %d passed the audit", what%6, delta)
		}
	})
}
