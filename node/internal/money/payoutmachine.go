package money

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
)

// The payout state machine: each USDC transaction of a batch goes TxPlanned -> TxSigned ->
// TxConfirmed, each step recorded in the ledger before the next, so that after a crash or
// an RPC failure it resumes from the ledger and the chain and never pays twice.
// docs/settlement.md, "Payout state machine".

// Steps of the state machine at which an observer is told (and may stop the run).
const (
	StepPlanned   = "planned"   // the batch is stored, before its transactions are signed
	StepSigned    = "signed"    // a transaction is signed and recorded, not sent
	StepSent      = "sent"      // a transaction is broadcast, its confirmation not recorded
	StepConfirmed = "confirmed" // a transaction's confirmation and payouts are recorded
)

// payoutMachine settles payout batches on the chain.
type payoutMachine struct {
	key      crypto.PrivKey // signs the batch records
	ledger   Stores
	clock    clock.Clock
	log      *slog.Logger
	treasury *treasury
	// observe, when set (tests only: production never sets it), is told each step; an
	// error it returns stops the run there, as a crash would.
	observe func(step string) error
}

// chain is what the machine asks of the chain.
func (m *payoutMachine) chain() PayoutChain { return m.treasury.client }

// MaxTxFailures is how many times a transaction may fail on chain before replan splits it
// into one transaction per payout, or takes a lone payout out of the batch.
const MaxTxFailures = 3

// ErrNoHistory: the RPC endpoint cannot prove that an expired transaction never landed.
var ErrNoHistory = errors.New("the RPC endpoint has no history back to the transaction")

// errReplan says a transaction's payouts must be planned again before it is signed.
var errReplan = errors.New("a payout must be planned again")

// sign signs the batch's current state as a new PayoutBatch record and stores it.
func (m *payoutMachine) sign(b *ledger.Batch) error {
	b.Seq++
	b.IssuedAt = m.clock.Now().UTC()
	b.Transactions = b.Transactions[:0]
	for _, t := range b.Txs {
		if t.State == ledger.TxConfirmed {
			b.Transactions = append(b.Transactions, t.Signature)
		}
	}
	raw, err := protocol.Seal(protocol.KindPayoutBatch, b.PayoutBatch, m.key)
	if err != nil {
		return err
	}
	b.Record = raw
	return m.ledger.Payouts.PutBatch(*b)
}

// step marks a point of the state machine: the observer (tests) may stop the run there,
// as a crash would.
func (m *payoutMachine) step(name string) error {
	if m.observe != nil {
		return m.observe(name)
	}
	return nil
}

// settle drives every transaction of the batch to confirmed, then signs the settled batch.
func (m *payoutMachine) settle(ctx context.Context, b *ledger.Batch) error {
	if len(b.Txs) > 0 {
		if err := m.treasury.ready(); err != nil {
			return err
		}
	}
	if err := m.step(StepPlanned); err != nil {
		return err
	}
	if b.State == protocol.BatchPlanned {
		b.State = protocol.BatchSettling
		if err := m.ledger.Payouts.PutBatch(*b); err != nil {
			return err
		}
	}
	if err := m.replan(ctx, b, nil, "", false); err != nil {
		return err
	}
	for i := 0; i < len(b.Txs); i++ {
		err := m.settleTx(ctx, b, i)
		if errors.Is(err, errReplan) {
			// A payout of this transaction cannot be paid as planned: take it out and
			// go over the batch again.
			if err := m.replan(ctx, b, nil, "", true); err != nil {
				return err
			}
			i = -1
			continue
		}
		if err != nil {
			b.Error = err.Error()
			m.ledger.Payouts.PutBatch(*b)
			return fmt.Errorf("batch %s, transaction %d of %d: %w", b.Batch, i+1, len(b.Txs), err)
		}
	}
	b.Error = ""
	paidAll := true
	for i := range b.Payouts {
		if !b.Payouts[i].Paid {
			paidAll = false
		}
	}
	if paidAll {
		b.State = protocol.BatchSettled
	}
	if err := m.sign(b); err != nil {
		return err
	}
	m.log.Info("payout batch settled", "batch", b.Batch, "state", b.State, "transactions", len(b.Txs))
	return nil
}

// settleTx drives one transaction: planned -> signed (signature and bytes recorded) ->
// sent -> confirmed (settleSigned). After any failure it asks the chain first: a confirmed transaction is
// recorded, an unexpired one is sent again as is (same signature: it cannot land twice),
// and only one whose blockhash expired unseen is signed anew.
func (m *payoutMachine) settleTx(ctx context.Context, b *ledger.Batch, i int) error {
	tx := &b.Txs[i]
	for attempt := 0; tx.State != ledger.TxConfirmed; attempt++ {
		if attempt > 20 {
			return errors.New("gave up after 20 attempts")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch tx.State {
		case ledger.TxPlanned:
			if err := m.signTx(ctx, b, i); err != nil {
				return err
			}
			if err := m.step(StepSigned); err != nil {
				return err
			}
		case ledger.TxSigned:
			if err := m.settleSigned(ctx, b, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// settleSigned drives a signed transaction one round on, asking the chain first: found
// and failed, it goes back to planned; found and confirmed, it is recorded; expired unseen
// (with the history to prove it), it goes back to planned to be signed anew; not found
// and still valid, its same bytes are sent again and its confirmation awaited.
func (m *payoutMachine) settleSigned(ctx context.Context, b *ledger.Batch, i int) error {
	tx := &b.Txs[i]
	sig, err := chain.ParseSignature(tx.Signature)
	if err != nil {
		return err
	}
	// Block height first, then status: if the height had passed the blockhash's
	// last valid height before the status said "not found", it never landed.
	height, err := m.chain().BlockHeight(ctx)
	if err != nil {
		return err
	}
	st, err := m.chain().Status(ctx, sig)
	if err != nil {
		return err
	}
	switch {
	case st.Found && st.Err != "" && st.Confirmed:
		// Failed on chain, confirmed: nothing moved. Sign it again on the next run;
		// after MaxTxFailures, replan splits or defers its payouts.
		tx.State = ledger.TxPlanned
		tx.Failures++
		m.ledger.Payouts.PutBatch(*b)
		return fmt.Errorf("transaction %s failed on chain (%d of %d tries): %s", tx.Signature, tx.Failures, MaxTxFailures, st.Err)
	case st.Found && st.Confirmed && st.Err == "":
		return m.confirmTx(ctx, b, i)
	case !st.Found && height > tx.LastValid:
		// "Not found" is proof only if the node keeps history back to the slot the
		// transaction was signed at: a pruned node says "not found" of a
		// transaction that landed, and signing it again would pay twice.
		first, err := m.chain().FirstAvailableSlot(ctx)
		if err != nil {
			return fmt.Errorf("transaction %s expired unseen, and the RPC endpoint cannot say how far back its history goes (%w): not signed again", tx.Signature, err)
		}
		if first > tx.Slot {
			return fmt.Errorf("%w: transaction %s was signed at slot %d, and settlement.rpc %s keeps history only from slot %d: it may have landed unseen. Finish this batch with an archival RPC endpoint (settlement.rpc); nothing was signed again",
				ErrNoHistory, tx.Signature, tx.Slot, m.treasury.rpc, first)
		}
		m.log.Info("payout transaction expired unseen: signing it again", "batch", b.Batch, "signature", tx.Signature)
		tx.State = ledger.TxPlanned
		return m.ledger.Payouts.PutBatch(*b)
	}
	if !st.Found {
		if err := m.chain().Send(ctx, tx.Raw); err != nil {
			m.log.Warn("payout transaction send failed; the chain is asked again before any retry", "batch", b.Batch, "err", err)
			<-m.clock.After(200 * time.Millisecond)
			return nil
		}
		if err := m.step(StepSent); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	_, err = m.chain().WaitConfirmed(wctx, sig, tx.LastValid)
	cancel()
	if err != nil && !errors.Is(err, chain.ErrExpired) {
		m.log.Warn("payout transaction not confirmed yet", "batch", b.Batch, "err", err)
	}
	return nil
}

// signTx signs a planned transaction with a fresh blockhash and records its signature and
// bytes durably before anything is sent.
func (m *payoutMachine) signTx(ctx context.Context, b *ledger.Batch, i int) error {
	tx := &b.Txs[i]
	treasury, err := m.treasury.key()
	if err != nil {
		return err
	}
	var pays []chain.Payment
	for _, pi := range tx.Payouts {
		p := b.Payouts[pi]
		owner, err := chain.ParsePublicKey(p.Destination)
		if err != nil {
			return err
		}
		create := slices.Contains(tx.CreateATA, pi)
		if !create {
			// Checked again at every signature: a provider that closed its token account
			// after planning would make the whole transaction fail, again and again.
			ok, err := m.chain().IsTokenAccount(ctx, chain.ATA(owner, m.treasury.mint), m.treasury.mint)
			if err != nil {
				return err
			}
			if !ok {
				return errReplan
			}
		}
		pays = append(pays, chain.Payment{Owner: owner, Amount: uint64(p.Amount), CreateATA: create})
	}
	hash, lastValid, slot, err := m.chain().LatestBlockhashAt(ctx)
	if err != nil {
		return err
	}
	raw, sig, err := chain.PayoutTransaction(hash, treasury, m.treasury.mint, protocol.USDCDecimals, protocol.PayoutMemo(b.Batch), pays)
	if err != nil {
		return err
	}
	tx.Raw, tx.Signature, tx.LastValid, tx.Slot, tx.State = raw, sig.String(), lastValid, slot, ledger.TxSigned
	tx.Attempts++
	return m.ledger.Payouts.PutBatch(*b)
}

// confirmTx records a confirmed transaction and the payouts it paid.
func (m *payoutMachine) confirmTx(ctx context.Context, b *ledger.Batch, i int) error {
	tx := &b.Txs[i]
	if sig, err := chain.ParseSignature(tx.Signature); err == nil {
		if facts, err := m.chain().Transaction(ctx, sig); err == nil {
			tx.Fee = facts.FeeLamports
		}
	}
	tx.State = ledger.TxConfirmed
	tx.Raw = nil
	for _, pi := range tx.Payouts {
		b.Payouts[pi].Transaction, b.Payouts[pi].Paid = tx.Signature, true
	}
	if err := m.ledger.Payouts.PutBatch(*b); err != nil {
		return err
	}
	return m.step(StepConfirmed)
}

// replan fixes the batch's transactions not signed yet, before they are: a payout whose
// token account is gone since planning (closed by its owner; looked for when
// checkAccounts is set, after signTx found one) is taken out of the batch; a
// transaction that failed MaxTxFailures times is split into one per payout, and a lone
// payout that did is taken out. Payouts named in force (by the operator) are taken out too.
// A payout taken out leaves the batch with its receipts, which the next batch pays; the
// other payouts settle. Payouts in signed or confirmed transactions are never touched.
func (m *payoutMachine) replan(ctx context.Context, b *ledger.Batch, force map[string]bool, why string, checkAccounts bool) error {
	out := map[int]string{} // payout index -> reason
	var txs []ledger.BatchTx
	for _, tx := range b.Txs {
		if tx.State != ledger.TxPlanned {
			txs = append(txs, tx)
			continue
		}
		for _, pi := range tx.Payouts {
			p := b.Payouts[pi]
			if force[p.Provider] {
				out[pi] = why
				continue
			}
			if !checkAccounts || slices.Contains(tx.CreateATA, pi) {
				continue
			}
			owner, err := chain.ParsePublicKey(p.Destination)
			if err != nil {
				return err
			}
			ok, err := m.chain().IsTokenAccount(ctx, chain.ATA(owner, m.treasury.mint), m.treasury.mint)
			if err != nil {
				return err
			}
			if !ok {
				out[pi] = "its USDC token account was closed after the batch was planned"
			}
		}
		switch {
		case tx.Failures >= MaxTxFailures && len(tx.Payouts) > 1:
			for _, pi := range tx.Payouts {
				single := ledger.BatchTx{State: ledger.TxPlanned, Payouts: []int{pi}}
				if slices.Contains(tx.CreateATA, pi) {
					single.CreateATA = []int{pi}
				}
				txs = append(txs, single)
			}
			m.log.Warn("payout transaction failed repeatedly: split into one per payout", "batch", b.Batch, "payouts", len(tx.Payouts))
		case tx.Failures >= MaxTxFailures:
			out[tx.Payouts[0]] = fmt.Sprintf("its transaction failed %d times on chain", tx.Failures)
			txs = append(txs, tx)
		default:
			txs = append(txs, tx)
		}
	}
	if len(out) == 0 {
		if len(txs) != len(b.Txs) {
			b.Txs = txs
			return m.ledger.Payouts.PutBatch(*b)
		}
		return nil
	}
	// Take the payouts out and renumber the rest.
	now := m.clock.Now().UTC()
	renumber := map[int]int{}
	var payouts []protocol.Payout
	var deferred []ledger.DeferredPayout
	for i, p := range b.Payouts {
		if reason, ok := out[i]; ok {
			deferred = append(deferred, ledger.DeferredPayout{Provider: p.Provider, Amount: p.Amount + p.Rounding, Receipts: p.Receipts, Reason: reason, At: now})
			m.log.Warn("payout moved to the next batch", "batch", b.Batch, "provider", p.Provider, "usdc", p.Amount.String(), "why", reason)
			continue
		}
		renumber[i] = len(payouts)
		payouts = append(payouts, p)
	}
	b.Txs = b.Txs[:0]
	for _, tx := range txs {
		var keep, create []int
		for _, pi := range tx.Payouts {
			if n, ok := renumber[pi]; ok {
				keep = append(keep, n)
				if slices.Contains(tx.CreateATA, pi) {
					create = append(create, n)
				}
			}
		}
		if len(keep) == 0 {
			continue
		}
		tx.Payouts, tx.CreateATA = keep, create
		b.Txs = append(b.Txs, tx)
	}
	b.Payouts = payouts
	var all []string
	for _, p := range b.Payouts {
		all = append(all, p.Receipts...)
	}
	slices.Sort(all)
	b.MerkleRoot, _ = protocol.MerkleRoot(all)
	for _, d := range deferred {
		delete(b.Settings, d.Provider)
	}
	b.Deferred = append(b.Deferred, deferred...)
	if err := m.ledger.Payouts.DeferPayouts(*b, deferred); err != nil {
		return err
	}
	return m.sign(b)
}
