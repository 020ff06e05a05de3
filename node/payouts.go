package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	sol "github.com/gagliardetto/solana-go"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/protocol"
)

// Payouts: a batch pays every due provider its pending earnings, in USDC on Solana (SPL
// TransferChecked from the treasury, many per transaction, one memo naming the batch) or
// by bank transfer (a file for the operator's bank). The state machine records each
// transaction's signature before broadcasting it and, after a crash or an RPC failure,
// asks the chain before sending anything again: a retry never pays twice.
// docs/settlement.md, "Payout state machine".

// PayoutRunOptions are the options of `gpunex coordinator payouts run`.
type PayoutRunOptions struct {
	// Now pays every provider with pending earnings at least Min, whatever its schedule.
	Now bool `json:"now"`
	// Min overrides settlement.min_payout_usdc when set.
	Min *protocol.MicroUSDC `json:"min_micro_usdc,omitempty"`
	// DryRun plans and checks the batch but stores and sends nothing.
	DryRun bool `json:"dry_run"`
	// schedules, set by the scheduled run, names the schedules it pays (a due day the
	// coordinator missed included); nil pays the schedules due today.
	schedules map[string]bool
}

// pays reports whether a run pays providers of a schedule at time now.
func (o PayoutRunOptions) pays(schedule string, now time.Time) bool {
	if o.Now {
		return true
	}
	if o.schedules != nil {
		return o.schedules[schedule]
	}
	return due(schedule, now)
}

// PayoutView is one payout as the CLI shows it.
type PayoutView struct {
	Provider    string             `json:"provider"`
	Method      string             `json:"method"`
	Destination string             `json:"destination"`
	Amount      protocol.MicroUSDC `json:"amount_micro_usdc"`
	AmountUSDC  string             `json:"amount_usdc"`
	Receipts    int                `json:"receipts"`
	MerkleRoot  string             `json:"merkle_root"`
	Transaction string             `json:"transaction,omitempty"`
	Explorer    string             `json:"explorer,omitempty"`
	Paid        bool               `json:"paid"`
}

// BatchView is a payout batch as the CLI shows it.
type BatchView struct {
	BatchID      string       `json:"batch_id"`
	State        string       `json:"state"`
	DryRun       bool         `json:"dry_run,omitempty"`
	CreatedAt    time.Time    `json:"created_at"`
	Payouts      []PayoutView `json:"payouts"`
	TotalUSDC    string       `json:"total_usdc"`
	Total        int64        `json:"total_micro_usdc"`
	Transactions []string     `json:"transactions"`
	FeesLamports uint64       `json:"fees_lamports"`
	MerkleRoot   string       `json:"merkle_root"`
	Error        string       `json:"error,omitempty"`
	// Skipped says why providers with pending earnings are not in the batch.
	Skipped []string `json:"skipped,omitempty"`
}

func (s *settlement) view(b ledger.Batch) BatchView {
	v := BatchView{BatchID: b.Batch, State: b.State, DryRun: b.DryRun, CreatedAt: b.CreatedAt, MerkleRoot: b.MerkleRoot, Error: b.Error,
		Transactions: []string{}, Payouts: []PayoutView{}}
	var total protocol.MicroUSDC
	for _, p := range b.Payouts {
		pv := PayoutView{Provider: p.Provider, Method: p.Method, Destination: p.Destination, Amount: p.Amount, AmountUSDC: p.Amount.String(),
			Receipts: len(p.Receipts), MerkleRoot: p.MerkleRoot, Transaction: p.Transaction, Paid: p.Paid}
		if p.Method == protocol.PayoutUSDC && p.Transaction != "" {
			if sig, err := sol.SignatureFromBase58(p.Transaction); err == nil {
				pv.Explorer = chain.ExplorerURL(sig, s.n.cfg.Settlement.RPC)
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
func (n *Node) RunPayouts(ctx context.Context, o PayoutRunOptions) (BatchView, error) {
	if n.money == nil {
		return BatchView{}, fmt.Errorf("%w: payouts are run by a coordinator", ErrWrongRole)
	}
	return n.money.run(ctx, o)
}

func (s *settlement) run(ctx context.Context, o PayoutRunOptions) (BatchView, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	var stuck error
	if !o.DryRun {
		// A batch that cannot settle (its error is kept on it) does not hold up new
		// batches: their receipts are not in it.
		if stuck = s.resumeLocked(ctx); stuck != nil {
			s.n.log.Warn("an unfinished payout batch did not settle; planning the next one anyway", "err", stuck)
		}
	}
	b, skipped, err := s.plan(ctx, o)
	if err != nil {
		return BatchView{}, errors.Join(err, stuck)
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
	if err := s.n.ledger.CreateBatch(b); err != nil {
		return BatchView{}, err
	}
	if err := s.sign(&b); err != nil {
		return BatchView{}, err
	}
	s.n.log.Info("payout batch planned", "batch", b.Batch, "payouts", len(b.Payouts), "transactions", len(b.Txs))
	err = s.settle(ctx, &b)
	v := s.view(b)
	v.Skipped = skipped
	return v, err
}

// plan builds a batch from the pending earnings of due providers and checks that it can
// be paid: right cluster, right mint, a treasury that holds the USDC and the fees.
func (s *settlement) plan(ctx context.Context, o PayoutRunOptions) (ledger.Batch, []string, error) {
	l := s.n.ledger
	now := s.n.clock.Now().UTC()
	min, _ := protocol.ParseUSDC(s.n.cfg.Settlement.MinPayoutUSDC)
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
	b := ledger.Batch{PayoutBatch: protocol.PayoutBatch{Version: protocol.SettlementVersion, Coordinator: s.n.id.String(),
		IssuedAt: now, State: protocol.BatchPlanned, CommissionBPS: s.n.cfg.Settlement.CommissionBPS, Cluster: s.n.cfg.Settlement.Cluster},
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
func (s *settlement) planTransactions(ctx context.Context, b *ledger.Batch, total protocol.MicroUSDC) error {
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
			return fmt.Errorf("settlement.rpc %s: %w", s.n.cfg.Settlement.RPC, err)
		}
	}
	var pays []chain.Payment
	var index []int
	missing := 0
	for i, p := range b.Payouts {
		if p.Method != protocol.PayoutUSDC {
			continue
		}
		owner, err := sol.PublicKeyFromBase58(p.Destination)
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
	err = s.client.Check(ctx, chain.Setup{GenesisHash: s.n.cfg.Settlement.Cluster, Mint: s.mint, Decimals: USDCDecimals,
		Treasury: treasury.PublicKey(), NeedMicro: uint64(total), NeedLamports: uint64(len(b.Txs))*10_000 + uint64(missing)*ataRent})
	if err != nil {
		return fmt.Errorf("payout batch not sent: %w", err)
	}
	return nil
}

// sign signs the batch's current state as a new PayoutBatch record and stores it.
func (s *settlement) sign(b *ledger.Batch) error {
	b.Seq++
	b.IssuedAt = s.n.clock.Now().UTC()
	b.Transactions = b.Transactions[:0]
	for _, t := range b.Txs {
		if t.State == ledger.TxConfirmed {
			b.Transactions = append(b.Transactions, t.Signature)
		}
	}
	raw, err := protocol.Seal(protocol.KindPayoutBatch, b.PayoutBatch, s.n.key)
	if err != nil {
		return err
	}
	b.Record = raw
	return s.n.ledger.PutBatch(*b)
}

// step marks a point of the state machine: tests stop the run there (hook) or kill the
// process (GPUNEX_TEST_CRASH_AT).
func (s *settlement) step(name string) error {
	if s.crashAt == name {
		s.n.log.Warn("test crash point reached: killing the process", "step", name)
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
func (s *settlement) resume(ctx context.Context) error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return s.resumeLocked(ctx)
}

func (s *settlement) resumeLocked(ctx context.Context) error {
	if err := s.n.ledger.FinishMarking(); err != nil {
		return err
	}
	batches, err := s.n.ledger.Batches()
	if err != nil {
		return err
	}
	for i := len(batches) - 1; i >= 0; i-- {
		b := batches[i]
		if b.State == protocol.BatchSettled || b.State == ledger.BatchFailed || (!b.UnsettledUSDC() && b.Signed()) {
			continue
		}
		s.n.log.Info("resuming payout batch", "batch", b.Batch)
		if err := s.settle(ctx, &b); err != nil {
			return err
		}
	}
	return nil
}

// settle drives every transaction of the batch to confirmed, then signs the settled batch.
func (s *settlement) settle(ctx context.Context, b *ledger.Batch) error {
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
		if err := s.n.ledger.PutBatch(*b); err != nil {
			return err
		}
	}
	for i := range b.Txs {
		if err := s.settleTx(ctx, b, i); err != nil {
			b.Error = err.Error()
			s.n.ledger.PutBatch(*b)
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
	s.n.log.Info("payout batch settled", "batch", b.Batch, "state", b.State, "transactions", len(b.Txs))
	return nil
}

// settleTx drives one transaction: planned -> signed (signature and bytes recorded) ->
// sent -> confirmed. After any failure it asks the chain first: a confirmed transaction is
// recorded, an unexpired one is sent again as is (same signature: it cannot land twice),
// and only one whose blockhash expired unseen is signed anew.
func (s *settlement) settleTx(ctx context.Context, b *ledger.Batch, i int) error {
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
			sig, err := sol.SignatureFromBase58(tx.Signature)
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
				// Failed on chain, confirmed: nothing moved. Sign it again on the next run.
				tx.State = ledger.TxPlanned
				s.n.ledger.PutBatch(*b)
				return fmt.Errorf("transaction %s failed on chain: %s", tx.Signature, st.Err)
			case st.Found && st.Confirmed && st.Err == "":
				if err := s.confirmTx(ctx, b, i); err != nil {
					return err
				}
				continue
			case !st.Found && height > tx.LastValid:
				s.n.log.Info("payout transaction expired unseen: signing it again", "batch", b.Batch, "signature", tx.Signature)
				tx.State = ledger.TxPlanned
				if err := s.n.ledger.PutBatch(*b); err != nil {
					return err
				}
				continue
			}
			if !st.Found {
				if err := s.client.Send(ctx, tx.Raw); err != nil {
					s.n.log.Warn("payout transaction send failed; the chain is asked again before any retry", "batch", b.Batch, "err", err)
					time.Sleep(200 * time.Millisecond)
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
				s.n.log.Warn("payout transaction not confirmed yet", "batch", b.Batch, "err", err)
			}
		}
	}
	return nil
}

// signTx signs a planned transaction with a fresh blockhash and records its signature and
// bytes durably before anything is sent.
func (s *settlement) signTx(ctx context.Context, b *ledger.Batch, i int) error {
	tx := &b.Txs[i]
	treasury, err := s.treasury()
	if err != nil {
		return err
	}
	var pays []chain.Payment
	for _, pi := range tx.Payouts {
		p := b.Payouts[pi]
		owner, err := sol.PublicKeyFromBase58(p.Destination)
		if err != nil {
			return err
		}
		pays = append(pays, chain.Payment{Owner: owner, Amount: uint64(p.Amount), CreateATA: slices.Contains(tx.CreateATA, pi)})
	}
	hash, lastValid, err := s.client.LatestBlockhash(ctx)
	if err != nil {
		return err
	}
	raw, sig, err := chain.PayoutTransaction(hash, treasury, s.mint, USDCDecimals, protocol.PayoutMemo(b.Batch), pays)
	if err != nil {
		return err
	}
	tx.Raw, tx.Signature, tx.LastValid, tx.State = raw, sig.String(), lastValid, ledger.TxSigned
	tx.Attempts++
	return s.n.ledger.PutBatch(*b)
}

// confirmTx records a confirmed transaction and the payouts it paid.
func (s *settlement) confirmTx(ctx context.Context, b *ledger.Batch, i int) error {
	tx := &b.Txs[i]
	if sig, err := sol.SignatureFromBase58(tx.Signature); err == nil {
		if facts, err := s.client.Transaction(ctx, sig); err == nil {
			tx.Fee = facts.FeeLamports
		}
	}
	tx.State = ledger.TxConfirmed
	tx.Raw = nil
	for _, pi := range tx.Payouts {
		b.Payouts[pi].Transaction, b.Payouts[pi].Paid = tx.Signature, true
	}
	if err := s.n.ledger.PutBatch(*b); err != nil {
		return err
	}
	return s.step("confirmed")
}

// scheduledPayouts pays each schedule once per due day: weekly on Mondays, monthly on the
// first business day. A due day the coordinator missed (it was down) is paid at the next
// check, as long as no later due day has come.
func (s *settlement) scheduledPayouts(ctx context.Context) {
	now := s.n.clock.Now().UTC()
	schedules := map[string]bool{}
	var keys []string
	for _, sch := range []string{protocol.PayoutWeekly, protocol.PayoutMonthly} {
		key := sch + "/" + lastDue(sch, now).Format("2006-01-02")
		if done, _ := s.n.ledger.ScheduledPayoutDone(key); !done {
			schedules[sch] = true
			keys = append(keys, key)
		}
	}
	if len(schedules) == 0 {
		return
	}
	v, err := s.run(ctx, PayoutRunOptions{schedules: schedules})
	if err != nil {
		s.n.log.Warn("scheduled payouts failed; they are retried at the next check", "err", err)
		return
	}
	for _, k := range keys {
		s.n.ledger.MarkScheduledPayoutDone(k)
	}
	if v.BatchID != "" && v.State != "empty" {
		s.n.log.Info("scheduled payouts", "batch", v.BatchID, "payouts", len(v.Payouts), "usdc", v.TotalUSDC)
	}
}

// ConfirmBankPayouts marks a batch's bank payouts paid, with the bank's reference.
func (n *Node) ConfirmBankPayouts(id, reference string, providers []string) (BatchView, error) {
	if n.money == nil {
		return BatchView{}, fmt.Errorf("%w: payouts are run by a coordinator", ErrWrongRole)
	}
	s := n.money
	s.runMu.Lock()
	defer s.runMu.Unlock()
	b, err := n.ledger.GetBatch(id)
	if err != nil {
		return BatchView{}, fmt.Errorf("batch %s: %w", id, err)
	}
	marked := 0
	for i, p := range b.Payouts {
		if p.Method == protocol.PayoutBank && !p.Paid && (len(providers) == 0 || slices.Contains(providers, p.Provider)) {
			b.Payouts[i].Paid, b.Payouts[i].Transaction = true, reference
			marked++
		}
	}
	if marked == 0 {
		return BatchView{}, fmt.Errorf("batch %s has no unpaid bank payout to confirm", id)
	}
	paidAll := true
	for _, p := range b.Payouts {
		paidAll = paidAll && p.Paid
	}
	if paidAll {
		b.State = protocol.BatchSettled
	}
	if err := s.sign(&b); err != nil {
		return BatchView{}, err
	}
	return s.view(b), nil
}

// Batch returns a payout batch.
func (n *Node) Batch(id string) (BatchView, []byte, error) {
	if n.money == nil {
		return BatchView{}, nil, fmt.Errorf("%w: payout batches are kept by a coordinator", ErrWrongRole)
	}
	b, err := n.ledger.GetBatch(id)
	if err != nil {
		return BatchView{}, nil, fmt.Errorf("batch %s: %w", id, err)
	}
	return n.money.view(b), b.Record, nil
}

// Batches lists the payout batches, newest first.
func (n *Node) Batches() ([]BatchView, error) {
	if n.money == nil {
		return nil, fmt.Errorf("%w: payout batches are kept by a coordinator", ErrWrongRole)
	}
	bs, err := n.ledger.Batches()
	out := make([]BatchView, len(bs))
	for i, b := range bs {
		out[i] = n.money.view(b)
	}
	return out, err
}

// batchPage returns the signed records of the batches whose ID sorts before after (all
// when after is empty), newest first, about budget bytes of them (at least one); more says
// older ones are left.
func (s *settlement) batchPage(after string, budget int) (records [][]byte, more bool, err error) {
	bs, err := s.n.ledger.Batches()
	if err != nil {
		return nil, false, err
	}
	size := 0
	for _, b := range bs {
		if len(b.Record) == 0 || (after != "" && b.Batch >= after) {
			continue
		}
		if size >= budget && len(records) > 0 {
			return records, true, nil
		}
		records = append(records, b.Record)
		size += len(b.Record) * 4 / 3
	}
	return records, false, nil
}
