package money

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpunex/gpunex/protocol"
)

// The settlement audit: anyone holding a payout batch, the receipts it pays and a Solana
// RPC endpoint recomputes every amount and checks every transaction. docs/settlement.md,
// "Audit".

// WalletPageBytes bounds the records one batches or bundle answer carries (the reader
// takes up to 16 MiB): a longer listing comes in pages.
var WalletPageBytes = 8 << 20

// auditBundles assembles the audit bundles of the coordinator's batches.
type auditBundles struct {
	ledger Stores
}

// BundlePage assembles part of a batch's audit bundle from the coordinator's ledger: the
// batch and the USDC payout settings it relied on (first page only), then the records of its receipts
// from index offset on, in the batch's order, about budget bytes of them (at least one).
// more says receipts are left.
func (s *auditBundles) BundlePage(id string, offset, budget int) (*protocol.AuditBundle, bool, error) {
	l := s.ledger
	b, err := l.Payouts.GetBatch(id)
	if err != nil {
		return nil, false, fmt.Errorf("batch %s: %w", id, err)
	}
	if offset < 0 {
		return nil, false, fmt.Errorf("offset %d", offset)
	}
	out := &protocol.AuditBundle{Receipts: []protocol.AuditReceipt{}}
	size := 0
	if offset == 0 {
		out.Batch = b.Record
		size += len(b.Record)
		for _, p := range b.Payouts {
			// Bank settings carry the provider's IBAN and name: they stay with the
			// coordinator, and the batch names only the masked IBAN.
			if raw := b.Settings[p.Provider]; raw != nil && p.Method == protocol.PayoutUSDC {
				out.Settings = append(out.Settings, raw)
				size += len(raw)
			}
		}
	}
	i := 0
	for _, p := range b.Payouts {
		if i+len(p.Receipts) <= offset {
			i += len(p.Receipts)
			continue
		}
		for _, r := range p.Receipts {
			if i++; i <= offset {
				continue
			}
			if size >= budget && len(out.Receipts) > 0 {
				return out, true, nil
			}
			e, err := l.Payouts.GetEarning(p.Provider, r)
			if err != nil {
				return nil, false, fmt.Errorf("batch %s: receipt %s: earning: %w", id, r, err)
			}
			rep, err := l.Escrow.GetJobReport(e.Job, e.Provider)
			if err != nil {
				return nil, false, fmt.Errorf("job %s: report: %w", e.Job, err)
			}
			h, err := l.Escrow.GetHold(e.Job)
			if err != nil {
				return nil, false, fmt.Errorf("job %s: hold: %w", e.Job, err)
			}
			ar := protocol.AuditReceipt{Receipt: rep.Receipt, Lease: rep.Lease, LeaseCountersig: rep.LeaseCountersig, Hold: h.Raw,
				ReceiptCountersig: rep.ReceiptCountersig, Rule: h.Rule}
			switch h.Rule {
			case protocol.RuleCheckpoint:
				ar.Checkpoint, ar.CheckpointCountersig = rep.Checkpoint, rep.CheckpointCountersig
			case protocol.RuleDecision:
				d, err := l.Escrow.GetDispute(e.Job)
				if err != nil {
					return nil, false, fmt.Errorf("job %s: dispute: %w", e.Job, err)
				}
				ar.Decision = d.Decision
			}
			out.Receipts = append(out.Receipts, ar)
			// Records travel base64-encoded: 4/3 of their size.
			size += (len(ar.Receipt) + len(ar.Lease) + len(ar.LeaseCountersig) + len(ar.Hold) + len(ar.ReceiptCountersig) +
				len(ar.Checkpoint) + len(ar.CheckpointCountersig) + len(ar.Decision)) * 4 / 3
		}
	}
	return out, false, nil
}

// PayoutBundle returns a batch's audit bundle: from the ledger on a coordinator, from the
// trusted coordinator otherwise. Known are the signed records of every batch the
// coordinator lists, for the double-payment check.
func (w *Wallet) PayoutBundle(ctx context.Context, id string) (*protocol.AuditBundle, [][]byte, error) {
	bundle := &protocol.AuditBundle{}
	for {
		resp, err := w.walletCall(ctx, protocol.WalletRequest{Op: "bundle", Batch: id, Offset: len(bundle.Receipts)})
		if err != nil {
			return nil, nil, err
		}
		if resp.Bundle == nil || (resp.More && len(resp.Bundle.Receipts) == 0) {
			return nil, nil, fmt.Errorf("batch %s: the coordinator's bundle stops at receipt %d", id, len(bundle.Receipts))
		}
		if len(bundle.Receipts) == 0 {
			bundle.Batch, bundle.Settings = resp.Bundle.Batch, resp.Bundle.Settings
		}
		bundle.Receipts = append(bundle.Receipts, resp.Bundle.Receipts...)
		if !resp.More {
			break
		}
	}
	var known [][]byte
	after := ""
	for {
		resp, err := w.walletCall(ctx, protocol.WalletRequest{Op: "batches", After: after})
		if err != nil {
			return nil, nil, err
		}
		known = append(known, resp.Batches...)
		if !resp.More {
			break
		}
		if len(resp.Batches) == 0 {
			return nil, nil, errors.New("the coordinator's batch listing has an empty page")
		}
		last, err := protocol.CheckBatch(resp.Batches[len(resp.Batches)-1], nil)
		if err != nil {
			return nil, nil, fmt.Errorf("batch listing: %w", err)
		}
		after = last.Batch
	}
	return bundle, known, nil
}
