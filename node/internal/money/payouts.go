package money

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Payouts: a batch pays every due provider its pending earnings, in USDC on Solana (SPL
// TransferChecked from the treasury, many per transaction, one memo naming the batch) or
// by bank transfer (a file for the operator's bank). The state machine records each
// transaction's signature before broadcasting it and, after a crash or an RPC failure,
// asks the chain before sending anything again: a retry never pays twice.
// docs/settlement.md, "Payout state machine".

// runOptions are a payout run's options: the operator's, and for the scheduled run the
// schedules it pays (a due day the coordinator missed included); nil pays the schedules
// due today.
type runOptions struct {
	api.PayoutRunOptions
	schedules map[string]bool
}

// pays reports whether a run pays providers of a schedule at time now.
func (o runOptions) pays(schedule string, now time.Time) bool {
	if o.Now {
		return true
	}
	if o.schedules != nil {
		return o.schedules[schedule]
	}
	return due(schedule, now)
}

func (s *Settlement) view(b ledger.Batch) api.BatchView {
	v := api.BatchView{BatchID: b.Batch, State: b.State, DryRun: b.DryRun, CreatedAt: b.CreatedAt, MerkleRoot: b.MerkleRoot, Error: b.Error,
		Transactions: []string{}, Payouts: []api.PayoutView{}}
	var total protocol.MicroUSDC
	for _, p := range b.Payouts {
		pv := api.PayoutView{Provider: p.Provider, Method: p.Method, Destination: p.Destination, Amount: p.Amount, AmountUSDC: p.Amount.String(),
			Receipts: len(p.Receipts), MerkleRoot: p.MerkleRoot, Transaction: p.Transaction, Paid: p.Paid}
		if p.Method == protocol.PayoutUSDC && p.Transaction != "" {
			if sig, err := chain.ParseSignature(p.Transaction); err == nil {
				pv.Explorer = chain.ExplorerURL(sig, s.cfg.Settlement.RPC)
			}
		}
		total += p.Amount
		v.Payouts = append(v.Payouts, pv)
	}
	for _, t := range b.Txs {
		if t.Signature != "" {
			v.Transactions = append(v.Transactions, t.Signature)
		}
		v.FeesLamports += t.Fee
	}
	v.Total, v.TotalUSDC = int64(total), total.String()
	for _, d := range b.Deferred {
		v.Deferred = append(v.Deferred, api.DeferredView{Provider: d.Provider, AmountUSDC: d.Amount.String(), Receipts: len(d.Receipts), Reason: d.Reason, At: d.At})
	}
	return v
}

// due reports whether a provider's schedule pays it at time now: weekly on Mondays,
// monthly on the first business day (Monday to Friday) of the month, in UTC.
func due(schedule string, now time.Time) bool {
	now = now.UTC()
	if schedule == protocol.PayoutWeekly {
		return now.Weekday() == time.Monday
	}
	d := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	for d.Weekday() == time.Saturday || d.Weekday() == time.Sunday {
		d = d.AddDate(0, 0, 1)
	}
	return now.Day() == d.Day()
}

// lastDue is the latest day, up to now's, on which a schedule pays (UTC midnight).
func lastDue(schedule string, now time.Time) time.Time {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	for i := 0; i < 40; i++ {
		if due(schedule, day) {
			return day
		}
		day = day.AddDate(0, 0, -1)
	}
	return day
}

// RunPayouts plans a payout batch of every due provider and settles it; it first finishes
// any batch a crash left unfinished.
func (s *Settlement) RunPayouts(ctx context.Context, o api.PayoutRunOptions) (api.BatchView, error) {
	return s.run(ctx, runOptions{PayoutRunOptions: o})
}

func (s *Settlement) run(ctx context.Context, o runOptions) (api.BatchView, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	var stuck error
	if !o.DryRun {
		// A batch that cannot settle (its error is kept on it) does not hold up new
		// batches: their receipts are not in it.
		if stuck = s.resumeLocked(ctx); stuck != nil {
			s.log.Warn("an unfinished payout batch did not settle; planning the next one anyway", "err", stuck)
		}
	}
	b, skipped, err := s.plan(ctx, o)
	if err != nil {
		return api.BatchView{}, errors.Join(err, stuck)
	}
	if stuck != nil {
		skipped = append(skipped, "an earlier batch is unfinished: "+stuck.Error())
	}
	if len(b.Payouts) == 0 {
		v := s.view(b)
		v.State, v.Skipped = "empty", skipped
		return v, nil
	}
	if o.DryRun {
		v := s.view(b)
		v.Skipped = skipped
		return v, nil
	}
	if err := s.ledger.CreateBatch(b); err != nil {
		return api.BatchView{}, err
	}
	if err := s.sign(&b); err != nil {
		return api.BatchView{}, err
	}
	s.log.Info("payout batch planned", "batch", b.Batch, "payouts", len(b.Payouts), "transactions", len(b.Txs))
	err = s.settle(ctx, &b)
	v := s.view(b)
	v.Skipped = skipped
	return v, err
}

// plan builds a batch from the pending earnings of due providers and checks that it can
// be paid: right cluster, right mint, a treasury that holds the USDC and the fees.
func (s *Settlement) plan(ctx context.Context, o runOptions) (ledger.Batch, []string, error) {
	l := s.ledger
	now := s.clock.Now().UTC()
	min, _ := protocol.ParseUSDC(s.cfg.Settlement.MinPayoutUSDC)
	if o.Min != nil {
		min = *o.Min
	}
	earnings, err := l.Earnings("")
	if err != nil {
		return ledger.Batch{}, nil, err
	}
	pending := ledger.PendingByProvider(earnings)
	providers := make([]string, 0, len(pending))
	for p := range pending {
		providers = append(providers, p)
	}
	slices.Sort(providers)
	b := ledger.Batch{PayoutBatch: protocol.PayoutBatch{Version: protocol.SettlementVersion, Coordinator: s.id.String(),
		IssuedAt: now, State: protocol.BatchPlanned, CommissionBPS: s.cfg.Settlement.CommissionBPS, Cluster: s.cfg.Settlement.Cluster},
		CreatedAt: now, Settings: map[string][]byte{}, DryRun: o.DryRun}
	var skipped []string
	var usdcTotal protocol.MicroUSDC
	for _, p := range providers {
		pp := pending[p]
		settings, err := l.GetPayoutSettings(p)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			skipped = append(skipped, fmt.Sprintf("%s: %s USDC pending but no payout settings received", p, pp.Amount))
			continue
		case err != nil:
			return ledger.Batch{}, nil, err
		case pp.Amount < min:
			skipped = append(skipped, fmt.Sprintf("%s: %s USDC pending, below the minimum of %s", p, pp.Amount, min))
			continue
		case !o.pays(settings.Schedule, now):
			skipped = append(skipped, fmt.Sprintf("%s: %s payouts are not due today", p, settings.Schedule))
			continue
		}
		root, _ := protocol.MerkleRoot(pp.Receipts)
		payout := protocol.Payout{Provider: p, Method: settings.Method, Destination: settings.Destination(),
			Amount: pp.Amount, Receipts: pp.Receipts, MerkleRoot: root}
		if settings.Method == protocol.PayoutBank {
			// Banks pay whole cents: the sub-cent rest is recorded and stays with the treasury.
			payout.Rounding = pp.Amount % protocol.BankCent
			payout.Amount -= payout.Rounding
		}
		b.Payouts = append(b.Payouts, payout)
		b.Settings[p] = settings.Raw
		if settings.Method == protocol.PayoutUSDC {
			usdcTotal += pp.Amount
		}
	}
	var all []string
	for _, p := range b.Payouts {
		all = append(all, p.Receipts...)
	}
	if len(all) == 0 {
		return b, skipped, nil
	}
	slices.Sort(all)
	b.MerkleRoot, _ = protocol.MerkleRoot(all)
	// The ID first: the transactions are sized with the memo that names it.
	b.Batch = "dry-run"
	if !o.DryRun {
		if b.Batch, err = l.NextBatchID(now); err != nil {
			return ledger.Batch{}, nil, err
		}
	}
	if usdcTotal > 0 {
		if err := s.planTransactions(ctx, &b, usdcTotal); err != nil {
			return ledger.Batch{}, nil, err
		}
	}
	return b, skipped, nil
}

// ataRent is the rent-exempt minimum of a token account (165 bytes), in lamports.
const ataRent = 2_039_280

// planTransactions checks the chain and groups the USDC payouts into transactions.
func (s *Settlement) planTransactions(ctx context.Context, b *ledger.Batch, total protocol.MicroUSDC) error {
	if err := s.ready(); err != nil {
		return err
	}
	treasury, err := s.treasury()
	if err != nil {
		return err
	}
	b.Mint, b.Treasury = s.mint.String(), treasury.PublicKey().String()
	if b.Cluster == "" {
		if b.Cluster, err = s.client.GenesisHash(ctx); err != nil {
			return fmt.Errorf("settlement.rpc %s: %w", s.cfg.Settlement.RPC, err)
		}
	}
	var pays []chain.Payment
	var index []int
	missing := 0
	for i, p := range b.Payouts {
		if p.Method != protocol.PayoutUSDC {
			continue
		}
		owner, err := chain.ParsePublicKey(p.Destination)
		if err != nil {
			return fmt.Errorf("provider %s: payout address %q: %w", p.Provider, p.Destination, err)
		}
		// A token account of the mint, not merely an address someone sent lamports to
		// (the idempotent create handles a pre-funded address; a transfer to it fails).
		exists, err := s.client.IsTokenAccount(ctx, chain.ATA(owner, s.mint), s.mint)
		if err != nil {
			return err
		}
		if !exists {
			missing++
		}
		pays = append(pays, chain.Payment{Owner: owner, Amount: uint64(p.Amount), CreateATA: !exists})
		index = append(index, i)
	}
	groups := chain.SplitPayments(protocol.PayoutMemo(b.Batch), pays)
	next := 0
	for _, g := range groups {
		tx := ledger.BatchTx{State: ledger.TxPlanned}
		for k, p := range g {
			tx.Payouts = append(tx.Payouts, index[next+k])
			if p.CreateATA {
				tx.CreateATA = append(tx.CreateATA, index[next+k])
			}
		}
		next += len(g)
		b.Txs = append(b.Txs, tx)
	}
	err = s.client.Check(ctx, chain.Setup{GenesisHash: s.cfg.Settlement.Cluster, Mint: s.mint, Decimals: protocol.USDCDecimals,
		Treasury: treasury.PublicKey(), NeedMicro: uint64(total), NeedLamports: uint64(len(b.Txs))*10_000 + uint64(missing)*ataRent})
	if err != nil {
		return fmt.Errorf("payout batch not sent: %w", err)
	}
	return nil
}

// sign signs the batch's current state as a new PayoutBatch record and stores it.
func (s *Settlement) sign(b *ledger.Batch) error {
	b.Seq++
	b.IssuedAt = s.clock.Now().UTC()
	b.Transactions = b.Transactions[:0]
	for _, t := range b.Txs {
		if t.State == ledger.TxConfirmed {
			b.Transactions = append(b.Transactions, t.Signature)
		}
	}
	raw, err := protocol.Seal(protocol.KindPayoutBatch, b.PayoutBatch, s.peer.Key)
	if err != nil {
		return err
	}
	b.Record = raw
	return s.ledger.PutBatch(*b)
}

// step marks a point of the state machine: tests stop the run there (hook) or kill the
// process (GPUNEX_TEST_CRASH_AT).
func (s *Settlement) step(name string) error {
	if s.crashAt == name {
		s.log.Warn("test crash point reached: killing the process", "step", name)
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			p.Kill() // SIGKILL on Unix: no deferred function, no flush
		}
		select {}
	}
	if s.hook != nil {
		return s.hook(name)
	}
	return nil
}

// resume settles every batch a crash or an error left unfinished.
func (s *Settlement) resume(ctx context.Context) error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return s.resumeLocked(ctx)
}

func (s *Settlement) resumeLocked(ctx context.Context) error {
	if err := s.ledger.FinishMarking(); err != nil {
		return err
	}
	batches, err := s.ledger.Batches()
	if err != nil {
		return err
	}
	for i := len(batches) - 1; i >= 0; i-- {
		b := batches[i]
		if b.State == protocol.BatchSettled || b.State == ledger.BatchFailed || (!b.UnsettledUSDC() && b.Signed()) {
			continue
		}
		s.log.Info("resuming payout batch", "batch", b.Batch)
		if err := s.settle(ctx, &b); err != nil {
			return err
		}
	}
	return nil
}

// settle drives every transaction of the batch to confirmed, then signs the settled batch.
func (s *Settlement) settle(ctx context.Context, b *ledger.Batch) error {
	if len(b.Txs) > 0 {
		if err := s.ready(); err != nil {
			return err
		}
	}
	if err := s.step("planned"); err != nil {
		return err
	}
	if b.State == protocol.BatchPlanned {
		b.State = protocol.BatchSettling
		if err := s.ledger.PutBatch(*b); err != nil {
			return err
		}
	}
	if err := s.replan(ctx, b, nil, "", false); err != nil {
		return err
	}
	for i := 0; i < len(b.Txs); i++ {
		err := s.settleTx(ctx, b, i)
		if errors.Is(err, errReplan) {
			// A payout of this transaction cannot be paid as planned: take it out and
			// go over the batch again.
			if err := s.replan(ctx, b, nil, "", true); err != nil {
				return err
			}
			i = -1
			continue
		}
		if err != nil {
			b.Error = err.Error()
			s.ledger.PutBatch(*b)
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
	if err := s.sign(b); err != nil {
		return err
	}
	s.log.Info("payout batch settled", "batch", b.Batch, "state", b.State, "transactions", len(b.Txs))
	return nil
}

// settleTx drives one transaction: planned -> signed (signature and bytes recorded) ->
// sent -> confirmed. After any failure it asks the chain first: a confirmed transaction is
// recorded, an unexpired one is sent again as is (same signature: it cannot land twice),
// and only one whose blockhash expired unseen is signed anew.
func (s *Settlement) settleTx(ctx context.Context, b *ledger.Batch, i int) error {
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
			if err := s.signTx(ctx, b, i); err != nil {
				return err
			}
			if err := s.step("signed"); err != nil {
				return err
			}
		case ledger.TxSigned:
			sig, err := chain.ParseSignature(tx.Signature)
			if err != nil {
				return err
			}
			// Block height first, then status: if the height had passed the blockhash's
			// last valid height before the status said "not found", it never landed.
			height, err := s.client.BlockHeight(ctx)
			if err != nil {
				return err
			}
			st, err := s.client.Status(ctx, sig)
			if err != nil {
				return err
			}
			switch {
			case st.Found && st.Err != "" && st.Confirmed:
				// Failed on chain, confirmed: nothing moved. Sign it again on the next run;
				// after MaxTxFailures, replan splits or defers its payouts.
				tx.State = ledger.TxPlanned
				tx.Failures++
				s.ledger.PutBatch(*b)
				return fmt.Errorf("transaction %s failed on chain (%d of %d tries): %s", tx.Signature, tx.Failures, MaxTxFailures, st.Err)
			case st.Found && st.Confirmed && st.Err == "":
				if err := s.confirmTx(ctx, b, i); err != nil {
					return err
				}
				continue
			case !st.Found && height > tx.LastValid:
				// "Not found" is proof only if the node keeps history back to the slot the
				// transaction was signed at: a pruned node says "not found" of a
				// transaction that landed, and signing it again would pay twice.
				first, err := s.client.FirstAvailableSlot(ctx)
				if err != nil {
					return fmt.Errorf("transaction %s expired unseen, and the RPC endpoint cannot say how far back its history goes (%w): not signed again", tx.Signature, err)
				}
				if first > tx.Slot {
					return fmt.Errorf("%w: transaction %s was signed at slot %d, and settlement.rpc %s keeps history only from slot %d: it may have landed unseen. Finish this batch with an archival RPC endpoint (settlement.rpc); nothing was signed again",
						ErrNoHistory, tx.Signature, tx.Slot, s.cfg.Settlement.RPC, first)
				}
				s.log.Info("payout transaction expired unseen: signing it again", "batch", b.Batch, "signature", tx.Signature)
				tx.State = ledger.TxPlanned
				if err := s.ledger.PutBatch(*b); err != nil {
					return err
				}
				continue
			}
			if !st.Found {
				if err := s.client.Send(ctx, tx.Raw); err != nil {
					s.log.Warn("payout transaction send failed; the chain is asked again before any retry", "batch", b.Batch, "err", err)
					<-s.clock.After(200 * time.Millisecond)
					continue
				}
				if err := s.step("sent"); err != nil {
					return err
				}
			}
			wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			_, err = s.client.WaitConfirmed(wctx, sig, tx.LastValid)
			cancel()
			if err != nil && !errors.Is(err, chain.ErrExpired) {
				s.log.Warn("payout transaction not confirmed yet", "batch", b.Batch, "err", err)
			}
		}
	}
	return nil
}

// MaxTxFailures is how many times a transaction may fail on chain before replan splits it
// into one transaction per payout, or takes a lone payout out of the batch.
const MaxTxFailures = 3

// ErrNoHistory: the RPC endpoint cannot prove that an expired transaction never landed.
var ErrNoHistory = errors.New("the RPC endpoint has no history back to the transaction")

// errReplan says a transaction's payouts must be planned again before it is signed.
var errReplan = errors.New("a payout must be planned again")

// replan fixes the batch's transactions not signed yet, before they are: a payout whose
// token account is gone since planning (closed by its owner; looked for when
// checkAccounts is set, after signTx found one) is taken out of the batch; a
// transaction that failed MaxTxFailures times is split into one per payout, and a lone
// payout that did is taken out. Payouts named in force (by the operator) are taken out too.
// A payout taken out leaves the batch with its receipts, which the next batch pays; the
// other payouts settle. Payouts in signed or confirmed transactions are never touched.
func (s *Settlement) replan(ctx context.Context, b *ledger.Batch, force map[string]bool, why string, checkAccounts bool) error {
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
			ok, err := s.client.IsTokenAccount(ctx, chain.ATA(owner, s.mint), s.mint)
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
			s.log.Warn("payout transaction failed repeatedly: split into one per payout", "batch", b.Batch, "payouts", len(tx.Payouts))
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
			return s.ledger.PutBatch(*b)
		}
		return nil
	}
	// Take the payouts out and renumber the rest.
	now := s.clock.Now().UTC()
	renumber := map[int]int{}
	var payouts []protocol.Payout
	var deferred []ledger.DeferredPayout
	for i, p := range b.Payouts {
		if reason, ok := out[i]; ok {
			deferred = append(deferred, ledger.DeferredPayout{Provider: p.Provider, Amount: p.Amount + p.Rounding, Receipts: p.Receipts, Reason: reason, At: now})
			s.log.Warn("payout moved to the next batch", "batch", b.Batch, "provider", p.Provider, "usdc", p.Amount.String(), "why", reason)
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
	if err := s.ledger.DeferPayouts(*b, deferred); err != nil {
		return err
	}
	return s.sign(b)
}

// Replan takes the named providers' payouts (all unpaid ones when none is named) out of a
// batch that cannot settle, before any transaction paying them is signed, and settles the
// rest; their receipts go to the next batch (gpunex coordinator payouts replan).
func (s *Settlement) Replan(ctx context.Context, id string, providers []string) (api.BatchView, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	b, err := s.ledger.GetBatch(id)
	if err != nil {
		return api.BatchView{}, fmt.Errorf("%w: batch %s", api.ErrNotFound, id)
	}
	force := map[string]bool{}
	for _, p := range b.Payouts {
		if !p.Paid && p.Method == protocol.PayoutUSDC && (len(providers) == 0 || slices.Contains(providers, p.Provider)) {
			force[p.Provider] = true
		}
	}
	for i, tx := range b.Txs {
		for _, pi := range tx.Payouts {
			if force[b.Payouts[pi].Provider] && tx.State != ledger.TxPlanned {
				return api.BatchView{}, api.Conflict(fmt.Errorf("the payout to %s is in transaction %d, signed (%s): it may still land; wait until it expires or lands, then replan",
					b.Payouts[pi].Provider, i+1, tx.Signature))
			}
		}
	}
	if len(force) == 0 {
		return api.BatchView{}, api.Invalid(fmt.Errorf("batch %s has no unpaid USDC payout of those providers", id))
	}
	if err := s.replan(ctx, &b, force, "moved to the next batch by the operator", false); err != nil {
		return api.BatchView{}, err
	}
	err = s.settle(ctx, &b)
	return s.view(b), err
}

// signTx signs a planned transaction with a fresh blockhash and records its signature and
// bytes durably before anything is sent.
func (s *Settlement) signTx(ctx context.Context, b *ledger.Batch, i int) error {
	tx := &b.Txs[i]
	treasury, err := s.treasury()
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
			ok, err := s.client.IsTokenAccount(ctx, chain.ATA(owner, s.mint), s.mint)
			if err != nil {
				return err
			}
			if !ok {
				return errReplan
			}
		}
		pays = append(pays, chain.Payment{Owner: owner, Amount: uint64(p.Amount), CreateATA: create})
	}
	hash, lastValid, slot, err := s.client.LatestBlockhashAt(ctx)
	if err != nil {
		return err
	}
	raw, sig, err := chain.PayoutTransaction(hash, treasury, s.mint, protocol.USDCDecimals, protocol.PayoutMemo(b.Batch), pays)
	if err != nil {
		return err
	}
	tx.Raw, tx.Signature, tx.LastValid, tx.Slot, tx.State = raw, sig.String(), lastValid, slot, ledger.TxSigned
	tx.Attempts++
	return s.ledger.PutBatch(*b)
}

// confirmTx records a confirmed transaction and the payouts it paid.
func (s *Settlement) confirmTx(ctx context.Context, b *ledger.Batch, i int) error {
	tx := &b.Txs[i]
	if sig, err := chain.ParseSignature(tx.Signature); err == nil {
		if facts, err := s.client.Transaction(ctx, sig); err == nil {
			tx.Fee = facts.FeeLamports
		}
	}
	tx.State = ledger.TxConfirmed
	tx.Raw = nil
	for _, pi := range tx.Payouts {
		b.Payouts[pi].Transaction, b.Payouts[pi].Paid = tx.Signature, true
	}
	if err := s.ledger.PutBatch(*b); err != nil {
		return err
	}
	return s.step("confirmed")
}

// ScheduledPayouts pays each schedule once per due day: weekly on Mondays, monthly on the
// first business day. A due day the coordinator missed (it was down) is paid at the next
// check, as long as no later due day has come.
func (s *Settlement) ScheduledPayouts(ctx context.Context) {
	now := s.clock.Now().UTC()
	schedules := map[string]bool{}
	var keys []string
	for _, sch := range []string{protocol.PayoutWeekly, protocol.PayoutMonthly} {
		key := sch + "/" + lastDue(sch, now).Format("2006-01-02")
		if done, _ := s.ledger.ScheduledPayoutDone(key); !done {
			schedules[sch] = true
			keys = append(keys, key)
		}
	}
	if len(schedules) == 0 {
		return
	}
	v, err := s.run(ctx, runOptions{schedules: schedules})
	if err != nil {
		s.log.Warn("scheduled payouts failed; they are retried at the next check", "err", err)
		return
	}
	for _, k := range keys {
		s.ledger.MarkScheduledPayoutDone(k)
	}
	if v.BatchID != "" && v.State != "empty" {
		s.log.Info("scheduled payouts", "batch", v.BatchID, "payouts", len(v.Payouts), "usdc", v.TotalUSDC)
	}
}

// ConfirmBankPayouts marks a batch's bank payouts paid, with the bank's reference.
func (s *Settlement) ConfirmBankPayouts(id, reference string, providers []string) (api.BatchView, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	b, err := s.ledger.GetBatch(id)
	if err != nil {
		return api.BatchView{}, fmt.Errorf("batch %s: %w", id, err)
	}
	marked := 0
	for i, p := range b.Payouts {
		if p.Method == protocol.PayoutBank && !p.Paid && (len(providers) == 0 || slices.Contains(providers, p.Provider)) {
			b.Payouts[i].Paid, b.Payouts[i].Transaction = true, reference
			marked++
		}
	}
	if marked == 0 {
		return api.BatchView{}, fmt.Errorf("batch %s has no unpaid bank payout to confirm", id)
	}
	paidAll := true
	for _, p := range b.Payouts {
		paidAll = paidAll && p.Paid
	}
	if paidAll {
		b.State = protocol.BatchSettled
	}
	if err := s.sign(&b); err != nil {
		return api.BatchView{}, err
	}
	return s.view(b), nil
}

// Batch returns a payout batch.
func (s *Settlement) Batch(id string) (api.BatchView, []byte, error) {
	b, err := s.ledger.GetBatch(id)
	if err != nil {
		return api.BatchView{}, nil, fmt.Errorf("batch %s: %w", id, err)
	}
	return s.view(b), b.Record, nil
}

// Batches lists the payout batches, newest first.
func (s *Settlement) Batches() ([]api.BatchView, error) {
	bs, err := s.ledger.Batches()
	out := make([]api.BatchView, len(bs))
	for i, b := range bs {
		out[i] = s.view(b)
	}
	return out, err
}

// batchPage returns the signed records of the batches whose ID sorts before after (all
// when after is empty), newest first, about budget bytes of them (at least one); more says
// older ones are left.
func (s *Settlement) batchPage(after string, budget int) (records [][]byte, more bool, err error) {
	size := 0
	err = s.ledger.BatchesBefore(after, func(b ledger.Batch) bool {
		if len(b.Record) == 0 {
			return true
		}
		if size >= budget && len(records) > 0 {
			more = true
			return false
		}
		records = append(records, b.Record)
		size += len(b.Record) * 4 / 3
		return true
	})
	return records, more, err
}
