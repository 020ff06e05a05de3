// Package audit is the offline payout auditor: anyone holding a payout batch's audit bundle
// and a Solana RPC endpoint recomputes every amount and checks every transaction, with no
// daemon. docs/settlement.md, "Audit".
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/protocol"
)

// Options configure Batch.
type Options struct {
	// RPC is the Solana JSON-RPC endpoint the transactions are read from.
	RPC string
	// Trust are the coordinators whose batches are accepted; empty accepts any signer and
	// the report names it.
	Trust []peer.ID
	// Known are signed PayoutBatch records of other batches: a receipt paid in one of them
	// and in the audited batch is a double payment.
	Known [][]byte
	// KnownJobs maps the jobs of batches audited before to their batch: a job paid there and
	// again here (under another receipt) is a double payment.
	KnownJobs map[string]string
}

// Report is the auditor's verdict on one batch.
type Report struct {
	Batch        string `json:"batch"`
	Coordinator  string `json:"coordinator"`
	Trusted      bool   `json:"trusted"`
	State        string `json:"state"`
	Payouts      int    `json:"payouts"`
	Receipts     int    `json:"receipts"`
	Transactions int    `json:"transactions"`
	TotalUSDC    string `json:"total_usdc"`
	KnownBatches int    `json:"known_batches"`
	// Countersigned counts the receipts the renter countersigned too; the others rest on
	// the provider's signature and the lease both signed.
	Countersigned int      `json:"countersigned_receipts"`
	OK            bool     `json:"ok"`
	Discrepancies []string `json:"discrepancies"`
	// Unverifiable names what no auditor can check: bank payouts, whose method and account
	// are private to the provider and the coordinator (only the provider can confirm them).
	Unverifiable []string `json:"unverifiable,omitempty"`
	// Jobs are the jobs the batch pays, for the next audits' double-payment check.
	Jobs []string `json:"jobs"`
}

// Audit recomputes every payout of a batch from the signed receipts, checks each Solana
// transaction that paid it (signature, amounts, recipients, mint, memo, cluster), and
// checks that no receipt is paid twice across the batches it knows. Every discrepancy is
// named; the report is OK only when there is none.
func Batch(ctx context.Context, bundle protocol.AuditBundle, o Options) (rep Report) {
	rep.Discrepancies = []string{}
	bad := func(format string, args ...any) {
		rep.Discrepancies = append(rep.Discrepancies, fmt.Sprintf(format, args...))
	}
	defer func() { rep.OK = len(rep.Discrepancies) == 0 }()

	var trust protocol.Trust
	if len(o.Trust) > 0 {
		trust = protocol.NewTrust(o.Trust...)
	}
	b, err := protocol.CheckBatch(bundle.Batch, trust)
	if err != nil {
		bad("the batch record does not verify: %v", err)
		return rep
	}
	rep.Batch, rep.Coordinator, rep.Trusted, rep.State, rep.Payouts = b.Batch, b.Coordinator, trust != nil, b.State, len(b.Payouts)

	shares := receiptShares(bundle, b, o, &rep, bad)
	checkPayouts(bundle, b, shares, &rep, bad)
	checkKnownBatches(b, o, trust, &rep, bad)
	// The chain: each USDC payout's transaction moved exactly that amount to that
	// recipient's token account, from the treasury, in the batch's mint, with its memo.
	var usdc []protocol.Payout
	for _, p := range b.Payouts {
		if p.Method == protocol.PayoutUSDC && p.Paid {
			usdc = append(usdc, p)
		}
	}
	if len(usdc) == 0 {
		return rep
	}
	if o.RPC == "" {
		bad("no Solana RPC endpoint given: the %d USDC payouts were not checked on chain", len(usdc))
		return rep
	}
	auditChain(ctx, chain.Dial(o.RPC), b, usdc, bad, &rep)
	return rep
}

// share is what one receipt pays its provider, recomputed from the records.
type share struct {
	provider string
	net      protocol.MicroUSDC
}

// receiptShares recomputes each receipt's share from the records both sides signed, by the
// receipt's digest, naming a job paid twice (in this batch, or in a batch known before).
func receiptShares(bundle protocol.AuditBundle, b *protocol.SignedBatch, o Options, rep *Report, bad func(string, ...any)) map[string]share {
	shares := map[string]share{}
	jobs := map[string]string{} // job -> receipt
	for i, r := range bundle.Receipts {
		sha := protocol.RecordSHA256(r.Receipt)
		net, provider, job, err := auditReceipt(r, b)
		if err != nil {
			bad("receipt %d (%s): %v", i+1, sha, err)
			continue
		}
		// One job, one hold, one charge: two receipts of a job would charge its hold twice.
		if other, ok := jobs[job]; ok && other != sha {
			bad("job %s is paid by two receipts, %s and %s", job, other, sha)
			continue
		}
		if prev, ok := o.KnownJobs[job]; ok && prev != b.Batch {
			bad("job %s was paid in batch %s already", job, prev)
		}
		jobs[job] = sha
		rep.Jobs = append(rep.Jobs, job)
		if r.Rule == protocol.RuleCountersignedReceipt {
			rep.Countersigned++ // checked by auditReceipt
		}
		shares[sha] = share{provider, net}
	}
	return shares
}

// checkPayouts checks each payout against its receipts' shares and the provider's signed
// settings.
func checkPayouts(bundle protocol.AuditBundle, b *protocol.SignedBatch, shares map[string]share, rep *Report, bad func(string, ...any)) {
	// Each provider's settings are its latest signed before the batch: settings signed
	// later cannot explain where the batch sent the money.
	settings := map[string]*protocol.PayoutSettings{}
	for _, raw := range bundle.Settings {
		s, signer, err := protocol.CheckPayoutSettings(raw, b.IssuedAt)
		if err != nil {
			bad("payout settings: %v", err)
			continue
		}
		if prev := settings[signer.String()]; prev == nil || s.Seq > prev.Seq {
			settings[signer.String()] = s
		}
	}
	var total protocol.MicroUSDC
	for _, p := range b.Payouts {
		var sum protocol.MicroUSDC
		if p.Amount < 0 || p.Rounding < 0 || !addChecked(&total, p.Amount) {
			bad("payout to %s: amount %d (rounding %d) is negative or overflows the batch's total", p.Provider, p.Amount, p.Rounding)
			continue
		}
		for _, r := range p.Receipts {
			sh, ok := shares[r]
			switch {
			case !ok:
				bad("payout to %s: receipt %s is not in the bundle or does not verify", p.Provider, r)
			case sh.provider != p.Provider:
				bad("payout to %s: receipt %s belongs to provider %s", p.Provider, r, sh.provider)
			case !addChecked(&sum, sh.net):
				bad("payout to %s: its receipts' sum overflows", p.Provider)
			}
		}
		rep.Receipts += len(p.Receipts)
		if expected := p.Amount; !addChecked(&expected, p.Rounding) || sum != expected {
			bad("payout to %s: batch says %s USDC (+%s rounding), its receipts add up to %s USDC", p.Provider, p.Amount, p.Rounding, sum)
		}
		if s := settings[p.Provider]; s == nil {
			if p.Method != protocol.PayoutBank {
				bad("payout to %s: no payout settings signed by the provider", p.Provider)
			} else { // bank settings are not published
				rep.Unverifiable = append(rep.Unverifiable, fmt.Sprintf("payout to %s of %s USDC by bank to %s (reference %s): bank payouts are private; only the provider can confirm the method and the account",
					p.Provider, p.Amount, protocol.MaskIBAN(p.Destination), p.Transaction))
			}
		} else if s.Method != p.Method || (s.Destination() != p.Destination && s.Destination() != protocol.MaskIBAN(p.Destination)) {
			bad("payout to %s: paid by %s to %s, but the provider's signed settings say %s to %s", p.Provider, p.Method, p.Destination, s.Method, s.Destination())
		}
		if !p.Paid {
			bad("payout to %s of %s USDC is not paid yet", p.Provider, p.Amount)
		}
	}
	rep.TotalUSDC = total.String()

}

// checkKnownBatches checks that no receipt and no transaction of the batch is claimed by
// another batch known.
func checkKnownBatches(b *protocol.SignedBatch, o Options, trust protocol.Trust, rep *Report, bad func(string, ...any)) {
	seen := map[string]bool{b.Batch: true}
	for _, raw := range o.Known {
		other, err := protocol.CheckBatch(raw, trust)
		if err != nil || other.Coordinator != b.Coordinator {
			continue
		}
		if !seen[other.Batch] {
			seen[other.Batch] = true
			rep.KnownBatches++
		}
		if other.Batch == b.Batch {
			continue
		}
		for _, op := range other.Payouts {
			for _, p := range b.Payouts {
				for _, r := range p.Receipts {
					if slices.Contains(op.Receipts, r) {
						bad("receipt %s is paid in batch %s and again in batch %s", r, other.Batch, b.Batch)
					}
				}
				if op.Transaction != "" && op.Transaction == p.Transaction {
					bad("transaction %s is claimed by batch %s and by batch %s", p.Transaction, other.Batch, b.Batch)
				}
			}
		}
	}

}

// addChecked adds v (non-negative) to *sum unless that would overflow.
func addChecked(sum *protocol.MicroUSDC, v protocol.MicroUSDC) bool {
	if v < 0 || *sum > math.MaxInt64-v {
		return false
	}
	*sum += v
	return true
}

// auditReceipt checks one receipt's records and returns the provider's share of it: the
// charge its rule allows (at most the hold), less the hold's commission.
func auditReceipt(r protocol.AuditReceipt, b *protocol.SignedBatch) (net protocol.MicroUSDC, provider, job string, err error) {
	// Every record was received before the batch was signed: none may be dated later.
	now := b.IssuedAt
	l, signer, err := protocol.OpenLease(r.Lease)
	if err != nil {
		return 0, "", "", fmt.Errorf("lease: %w", err)
	}
	if l.Provider != signer.String() {
		return 0, "", "", fmt.Errorf("lease names provider %s but is signed by %s", l.Provider, signer)
	}
	if err := protocol.CheckLeaseTerms(l, now); err != nil {
		return 0, "", "", err
	}
	renter, err := peer.Decode(l.Renter)
	if err != nil {
		return 0, "", "", fmt.Errorf("lease renter: %w", err)
	}
	if _, err := protocol.CheckCountersignature(r.LeaseCountersig, r.Lease, protocol.KindLease, renter, now); err != nil {
		return 0, "", "", fmt.Errorf("the renter's countersignature of the lease: %w", err)
	}
	rec, err := protocol.CheckReceipt(r.Receipt, r.Lease, l, now)
	if err != nil {
		return 0, "", "", err
	}
	// The hold was valid when issued; its expiry has no bearing on an audit afterwards.
	h, err := protocol.CheckHold(r.Hold, holdIssuedAt(r.Hold), protocol.NewTrust(b.Signer))
	if err != nil {
		return 0, "", "", fmt.Errorf("escrow hold: %w", err)
	}
	if h.Job != rec.Job || h.Provider != rec.Provider || h.Renter != rec.Renter {
		return 0, "", "", fmt.Errorf("escrow hold is for job %s (%s -> %s), not this receipt", h.Job, h.Renter, h.Provider)
	}
	var amount protocol.MicroUSDC
	switch r.Rule {
	case protocol.RuleCountersignedReceipt:
		if _, err := protocol.CheckCountersignature(r.ReceiptCountersig, r.Receipt, protocol.KindReceipt, renter, now); err != nil {
			return 0, "", "", fmt.Errorf("charged as countersigned, but the renter's countersignature: %w", err)
		}
		amount = rec.Amount
	case protocol.RuleCheckpoint:
		var secs int64
		if len(r.Checkpoint) > 0 {
			cp, err := protocol.CheckCheckpoint(r.Checkpoint, r.Lease, l, now)
			if err != nil {
				return 0, "", "", fmt.Errorf("checkpoint: %w", err)
			}
			if _, err := protocol.CheckCountersignature(r.CheckpointCountersig, r.Checkpoint, protocol.KindCheckpoint, renter, now); err != nil {
				return 0, "", "", fmt.Errorf("the renter's countersignature of the checkpoint: %w", err)
			}
			secs = cp.Seconds
		}
		amount = protocol.CheckpointCharge(rec, secs)
	case protocol.RuleDecision:
		d, err := protocol.CheckDecision(r.Decision, r.Receipt, rec, b.Signer)
		if err != nil {
			return 0, "", "", fmt.Errorf("decision: %w", err)
		}
		amount = d.Amount
	default:
		return 0, "", "", fmt.Errorf("charge rule %q unknown", r.Rule)
	}
	charge := protocol.Charge(amount, h.Amount)
	return charge - protocol.Commission(charge, h.CommissionBPS), rec.Provider, rec.Job, nil
}

// holdIssuedAt reads a hold's issue time without checking it (the check follows).
func holdIssuedAt(raw []byte) time.Time {
	env, err := protocol.Open(raw)
	if err != nil {
		return time.Now()
	}
	var h protocol.EscrowHold
	if err := json.Unmarshal(env.Payload, &h); err != nil {
		return time.Now()
	}
	return h.IssuedAt
}

func auditChain(ctx context.Context, c *chain.Client, b *protocol.SignedBatch, usdc []protocol.Payout, bad func(string, ...any), rep *Report) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if genesis, err := c.GenesisHash(ctx); err != nil {
		bad("RPC %s: %v", c.URL(), err)
		return
	} else if b.Cluster != "" && genesis != b.Cluster {
		bad("the RPC endpoint is on cluster %s, the batch was paid on %s", genesis, b.Cluster)
		return
	}
	mint, err1 := chain.ParsePublicKey(b.Mint)
	treasury, err2 := chain.ParsePublicKey(b.Treasury)
	if err := errors.Join(err1, err2); err != nil {
		bad("batch mint or treasury: %v", err)
		return
	}
	from := chain.ATA(treasury, mint)
	byTx := map[string][]protocol.Payout{}
	var order []string
	for _, p := range usdc {
		if p.Transaction == "" {
			bad("payout to %s is marked paid without a transaction", p.Provider)
			continue
		}
		if _, ok := byTx[p.Transaction]; !ok {
			order = append(order, p.Transaction)
		}
		byTx[p.Transaction] = append(byTx[p.Transaction], p)
	}
	rep.Transactions = len(order)
	for _, sigText := range order {
		sig, err := chain.ParseSignature(sigText)
		if err != nil {
			bad("transaction %q: %v", sigText, err)
			continue
		}
		tx, err := c.Transaction(ctx, sig)
		if err != nil {
			bad("transaction %s: %v", sigText, err)
			continue
		}
		if tx.Failed != "" {
			bad("transaction %s failed on chain: %s", sigText, tx.Failed)
			continue
		}
		if !slices.Contains(tx.Memos, protocol.PayoutMemo(b.Batch)) {
			bad("transaction %s does not carry the memo %q (memos: %q)", sigText, protocol.PayoutMemo(b.Batch), tx.Memos)
		}
		if !slices.Contains(tx.Signers, treasury) {
			bad("transaction %s is not signed by the treasury %s", sigText, treasury)
		}
		used := make([]bool, len(tx.Transfers))
		for _, p := range byTx[sigText] {
			owner, err := chain.ParsePublicKey(p.Destination)
			if err != nil {
				bad("payout to %s: destination %q: %v", p.Provider, p.Destination, err)
				continue
			}
			to := chain.ATA(owner, mint)
			found := false
			for i, t := range tx.Transfers {
				if used[i] || t.Destination != to {
					continue
				}
				used[i], found = true, true
				switch {
				case !t.Checked || t.Mint != mint || t.Decimals != protocol.USDCDecimals:
					bad("payout to %s: transfer is not a TransferChecked of mint %s with 6 decimals", p.Provider, mint)
				case t.Source != from || t.Authority != treasury:
					bad("payout to %s: transfer comes from %s, not the treasury's account %s", p.Provider, t.Source, from)
				case t.Amount != uint64(p.Amount):
					bad("payout to %s: transaction %s moved %s USDC, the batch says %s USDC", p.Provider, sigText, protocol.MicroUSDC(t.Amount), p.Amount)
				}
				break
			}
			if !found {
				bad("payout to %s: transaction %s has no transfer to its token account %s", p.Provider, sigText, to)
			}
		}
		for i, t := range tx.Transfers {
			if !used[i] {
				bad("transaction %s moves %s USDC to %s, which no payout of the batch explains", sigText, protocol.MicroUSDC(t.Amount), t.Destination)
			}
		}
	}
}
