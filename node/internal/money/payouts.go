package money

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
)

// Payouts: a batch pays every due provider its pending earnings, in USDC on Solana (SPL
// TransferChecked from the treasury, many per transaction, one memo naming the batch) or
// by bank transfer (a file for the operator's bank). The state machine records each
// transaction's signature before broadcasting it and, after a crash or an RPC failure,
// asks the chain before sending anything again: a retry never pays twice.
// docs/settlement.md, "Payout state machine".

// payouts plans payout batches, has the state machine settle them, and keeps them.
type payouts struct {
	id     peer.ID
	ledger Stores
	clock  clock.Clock
	log    *slog.Logger
	// cfg's min_payout_usdc and commission_bps shape a batch.
	cfg      config.SettlementConfig
	treasury *treasury
	machine  *payoutMachine
	// runMu lets one payout run (or resumption, or bank confirmation) go at a time.
	runMu sync.Mutex
}

// view is a batch as the API shows it.
func (s *payouts) view(b ledger.Batch) api.BatchView {
	v := api.BatchView{BatchID: b.Batch, State: b.State, DryRun: b.DryRun, CreatedAt: b.CreatedAt, MerkleRoot: b.MerkleRoot, Error: b.Error,
		Transactions: []string{}, Payouts: []api.PayoutView{}}
	var total protocol.MicroUSDC
	for _, p := range b.Payouts {
		pv := api.PayoutView{Provider: p.Provider, Method: p.Method, Destination: p.Destination, Amount: p.Amount, AmountUSDC: p.Amount.String(),
			Receipts: len(p.Receipts), MerkleRoot: p.MerkleRoot, Transaction: p.Transaction, Paid: p.Paid}
		if p.Method == protocol.PayoutUSDC && p.Transaction != "" {
			if sig, err := chain.ParseSignature(p.Transaction); err == nil {
				pv.Explorer = chain.ExplorerURL(sig, s.treasury.rpc)
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

// RunPayouts plans a payout batch of every due provider and settles it; it first finishes
// any batch a crash left unfinished.
func (s *payouts) RunPayouts(ctx context.Context, o api.PayoutRunOptions) (api.BatchView, error) {
	return s.run(ctx, runOptions{PayoutRunOptions: o})
}

func (s *payouts) run(ctx context.Context, o runOptions) (api.BatchView, error) {
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
	if err := s.ledger.Payouts.CreateBatch(b); err != nil {
		return api.BatchView{}, err
	}
	if err := s.machine.sign(&b); err != nil {
		return api.BatchView{}, err
	}
	s.log.Info("payout batch planned", "batch", b.Batch, "payouts", len(b.Payouts), "transactions", len(b.Txs))
	err = s.machine.settle(ctx, &b)
	v := s.view(b)
	v.Skipped = skipped
	return v, err
}

// plan builds a batch from the pending earnings of due providers and checks that it can
// be paid: right cluster, right mint, a treasury that holds the USDC and the fees.
func (s *payouts) plan(ctx context.Context, o runOptions) (ledger.Batch, []string, error) {
	l := s.ledger
	now := s.clock.Now().UTC()
	min, _ := protocol.ParseUSDC(s.cfg.MinPayoutUSDC)
	if o.Min != nil {
		min = *o.Min
	}
	earnings, err := l.Payouts.Earnings("")
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
		IssuedAt: now, State: protocol.BatchPlanned, CommissionBPS: s.cfg.CommissionBPS, Cluster: s.treasury.cluster},
		CreatedAt: now, Settings: map[string][]byte{}, DryRun: o.DryRun}
	var skipped []string
	var usdcTotal protocol.MicroUSDC
	for _, p := range providers {
		pp := pending[p]
		settings, err := l.Payouts.GetPayoutSettings(p)
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
		if b.Batch, err = l.Payouts.NextBatchID(now); err != nil {
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
func (s *payouts) planTransactions(ctx context.Context, b *ledger.Batch, total protocol.MicroUSDC) error {
	if err := s.treasury.ready(); err != nil {
		return err
	}
	treasury, err := s.treasury.key()
	if err != nil {
		return err
	}
	b.Mint, b.Treasury = s.treasury.mint.String(), treasury.PublicKey().String()
	if b.Cluster == "" {
		if b.Cluster, err = s.treasury.client.GenesisHash(ctx); err != nil {
			return fmt.Errorf("settlement.rpc %s: %w", s.treasury.rpc, err)
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
		exists, err := s.treasury.client.IsTokenAccount(ctx, chain.ATA(owner, s.treasury.mint), s.treasury.mint)
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
	err = s.treasury.client.Check(ctx, chain.Setup{GenesisHash: s.treasury.cluster, Mint: s.treasury.mint, Decimals: protocol.USDCDecimals,
		Treasury: treasury.PublicKey(), NeedMicro: uint64(total), NeedLamports: uint64(len(b.Txs))*10_000 + uint64(missing)*ataRent})
	if err != nil {
		return fmt.Errorf("payout batch not sent: %w", err)
	}
	return nil
}

// resume settles every batch a crash or an error left unfinished.
func (s *payouts) resume(ctx context.Context) error {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return s.resumeLocked(ctx)
}

func (s *payouts) resumeLocked(ctx context.Context) error {
	if err := s.ledger.Payouts.FinishMarking(); err != nil {
		return err
	}
	batches, err := s.ledger.Payouts.Batches()
	if err != nil {
		return err
	}
	for i := len(batches) - 1; i >= 0; i-- {
		b := batches[i]
		if b.State == protocol.BatchSettled || b.State == ledger.BatchFailed || (!b.UnsettledUSDC() && b.Signed()) {
			continue
		}
		s.log.Info("resuming payout batch", "batch", b.Batch)
		if err := s.machine.settle(ctx, &b); err != nil {
			return err
		}
	}
	return nil
}

// Replan takes the named providers' payouts (all unpaid ones when none is named) out of a
// batch that cannot settle, before any transaction paying them is signed, and settles the
// rest; their receipts go to the next batch (gpunex coordinator payouts replan).
func (s *payouts) Replan(ctx context.Context, id string, providers []string) (api.BatchView, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	b, err := s.ledger.Payouts.GetBatch(id)
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
	if err := s.machine.replan(ctx, &b, force, "moved to the next batch by the operator", false); err != nil {
		return api.BatchView{}, err
	}
	err = s.machine.settle(ctx, &b)
	return s.view(b), err
}

// ConfirmBankPayouts marks a batch's bank payouts paid, with the bank's reference.
func (s *payouts) ConfirmBankPayouts(id, reference string, providers []string) (api.BatchView, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	b, err := s.ledger.Payouts.GetBatch(id)
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
	if err := s.machine.sign(&b); err != nil {
		return api.BatchView{}, err
	}
	return s.view(b), nil
}

// Batch returns a payout batch.
func (s *payouts) Batch(id string) (api.BatchView, []byte, error) {
	b, err := s.ledger.Payouts.GetBatch(id)
	if err != nil {
		return api.BatchView{}, nil, fmt.Errorf("batch %s: %w", id, err)
	}
	return s.view(b), b.Record, nil
}

// Batches lists the payout batches, newest first.
func (s *payouts) Batches() ([]api.BatchView, error) {
	bs, err := s.ledger.Payouts.Batches()
	out := make([]api.BatchView, len(bs))
	for i, b := range bs {
		out[i] = s.view(b)
	}
	return out, err
}

// batchPage returns the signed records of the batches whose ID sorts before after (all
// when after is empty), newest first, about budget bytes of them (at least one); more says
// older ones are left.
func (s *payouts) batchPage(after string, budget int) (records [][]byte, more bool, err error) {
	size := 0
	err = s.ledger.Payouts.BatchesBefore(after, func(b ledger.Batch) bool {
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
