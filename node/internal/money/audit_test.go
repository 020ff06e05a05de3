package money

import (
	"context"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// Audit bundles (docs/settlement.md, section 7): what an auditor gets of a batch.

// TestAuditBundle: a batch's bundle holds its signed record, the USDC payout settings it
// relied on, and for each receipt paid the records its charge
// follows from under its rule; a wallet reads it page after page, and the batch records
// for the double-payment check, to the same result.
func TestAuditBundle(t *testing.T) {
	d := newJobDesk(t)
	prov := newProvider(t)
	d.settings(t, d.provider, protocol.PayoutSettings{Method: protocol.PayoutUSDC, Schedule: protocol.PayoutWeekly, SolanaAddress: prov.wallet.PublicKey().String()})

	countersigned := d.job(t, 1800, 1790)
	countersigned.countersignReceipt(t)
	d.net.report(t, d.provHost, countersigned.report())
	byCheckpoint := d.job(t, 1800, 600)
	d.net.report(t, d.provHost, byCheckpoint.report())
	byDecision := disputed(t, d)
	if _, err := d.ResolveDispute(byDecision.id, api.ResolveRequest{For: "renter"}); err != nil {
		t.Fatal(err)
	}
	d.clock.Advance(25 * time.Hour)
	d.chargeDue()
	v, err := d.RunPayouts(context.Background(), runNow)
	if err != nil {
		t.Fatal(err)
	}

	b, more, err := d.BundlePage(v.BatchID, 0, WalletPageBytes)
	if err != nil || more {
		t.Fatalf("bundle: more %v, %v", more, err)
	}
	rec, err := protocol.CheckBatch(b.Batch, protocol.NewTrust(d.id))
	if err != nil || rec.Batch != v.BatchID {
		t.Fatalf("the bundle's batch: %v", err)
	}
	if len(b.Settings) != 1 {
		t.Fatalf("%d payout settings in the bundle, want the provider's", len(b.Settings))
	}
	if ps, signer, err := protocol.CheckPayoutSettings(b.Settings[0], d.clock.Now()); err != nil || signer != d.provider.id || ps.Method != protocol.PayoutUSDC {
		t.Fatalf("settings: %+v %v", ps, err)
	}
	rules := map[string]protocol.AuditReceipt{}
	for _, ar := range b.Receipts {
		l, _, err := protocol.OpenLease(ar.Lease)
		if err != nil {
			t.Fatal(err)
		}
		r, err := protocol.CheckReceipt(ar.Receipt, ar.Lease, l, d.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		// The hold was valid when issued (it has expired since).
		if h, err := protocol.CheckHold(ar.Hold, start, protocol.NewTrust(d.id)); err != nil || h.Job != r.Job {
			t.Fatalf("the receipt's hold: %v", err)
		}
		rules[ar.Rule] = ar
	}
	if len(b.Receipts) != 3 || len(rules) != 3 {
		t.Fatalf("%d receipts under %d rules", len(b.Receipts), len(rules))
	}
	if ar := rules[protocol.RuleCountersignedReceipt]; ar.ReceiptCountersig == nil {
		t.Fatal("a countersigned receipt comes without its countersignature")
	}
	if ar := rules[protocol.RuleCheckpoint]; string(ar.Checkpoint) != string(byCheckpoint.checkpoint) || ar.CheckpointCountersig == nil {
		t.Fatal("a receipt charged by the checkpoint rule comes without its checkpoint")
	}
	if ar := rules[protocol.RuleDecision]; ar.Decision == nil {
		t.Fatal("a receipt charged by a decision comes without it")
	}

	// Page by page, as a node reads it from its coordinator.
	pageBytes := WalletPageBytes
	t.Cleanup(func() { WalletPageBytes = pageBytes })
	WalletPageBytes = 1
	if _, more, _ := d.BundlePage(v.BatchID, 0, WalletPageBytes); !more {
		t.Fatal("a one-byte page holds the whole bundle")
	}
	second, _ := d.RunPayouts(context.Background(), runNow) // nothing new: no second batch
	w := NewWallet(Deps{Base: subsystem.Base{Peer: &p2p.Peer{ID: d.id, Key: d.key}, Clock: d.clock, Log: quiet(), Metrics: d.metrics}, Ledger: storesOf(d.ledger),
		Config: d.deps.Config}, d.Settlement)
	paged, known, err := w.PayoutBundle(context.Background(), v.BatchID)
	if err != nil || len(paged.Receipts) != 3 || string(paged.Batch) != string(b.Batch) || len(paged.Settings) != 1 {
		t.Fatalf("paged bundle: %d receipts, %v", len(paged.Receipts), err)
	}
	for i := range paged.Receipts {
		if string(paged.Receipts[i].Receipt) != string(b.Receipts[i].Receipt) {
			t.Fatalf("receipt %d differs between the pages and the whole", i)
		}
	}
	if len(known) != 1 || string(known[0]) != string(rec.Raw) || second.State != "empty" {
		t.Fatalf("%d batch records known", len(known))
	}

	if _, _, err := d.BundlePage(v.BatchID, -1, 1); err == nil {
		t.Fatal("a negative offset")
	}
	if _, err := w.walletCall(context.Background(), protocol.WalletRequest{Op: "bundle", Batch: "20991231-001"}); err == nil {
		t.Fatal("the bundle of a batch that does not exist")
	}
}
