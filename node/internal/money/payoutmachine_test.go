package money

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// The payout state machine on the fake chain (docs/settlement.md, "Payout state machine"):
// each step, a stop at each step and the resumption that follows, lost answers,
// transactions that never land or fail, and the checks before anything is sent.

var runNow = api.PayoutRunOptions{Now: true}

// payees are n providers paid in USDC weekly, each having earned 1 USDC (0.90 after the
// commission).
func (c *coordinator) payees(t *testing.T, n int) []provider {
	t.Helper()
	var ps []provider
	for range n {
		p := c.usdcProvider(t, protocol.PayoutWeekly)
		c.earn(t, p.party, 1_000_000)
		ps = append(ps, p)
	}
	return ps
}

// paidOnce checks what providers and auditors see once every batch settled: each batch's
// latest signed record says settled and lists its transactions, every payout is paid by a
// transaction that landed, and no more transactions landed than the batches hold (a
// second landing of a payout would need one more).
func (c *coordinator) paidOnce(t *testing.T) {
	t.Helper()
	bs, err := c.ledger.Payouts.Batches()
	if err != nil {
		t.Fatal(err)
	}
	txs := 0
	for _, b := range bs {
		rec, err := protocol.CheckBatch(b.Record, protocol.NewTrust(c.id))
		if err != nil {
			t.Fatalf("batch %s: signed record: %v", b.Batch, err)
		}
		if b.State != protocol.BatchSettled || rec.State != protocol.BatchSettled || len(rec.Transactions) != len(b.Txs) {
			t.Fatalf("batch %s is %s; its signed record says %s with %d of %d transactions", b.Batch, b.State, rec.State, len(rec.Transactions), len(b.Txs))
		}
		for _, p := range rec.Payouts {
			sig, err := chain.ParseSignature(p.Transaction)
			if err != nil || !p.Paid {
				t.Fatalf("batch %s: the signed record does not show %s paid: %+v", b.Batch, p.Provider, p)
			}
			if st, _ := c.chain.Status(context.Background(), sig); !st.Found || st.Err != "" {
				t.Fatalf("batch %s: %s is paid by %s, which did not land", b.Batch, p.Provider, p.Transaction)
			}
		}
		txs += len(b.Txs)
	}
	if got := c.chain.succeeded(); got != txs {
		t.Fatalf("%d transactions landed for %d in the batches: a payout went out twice", got, txs)
	}
}

// onlyBatch is the coordinator's one batch.
func (c *coordinator) onlyBatch(t *testing.T) ledger.Batch {
	t.Helper()
	bs, err := c.ledger.Payouts.Batches()
	if err != nil || len(bs) != 1 {
		t.Fatalf("%d batches: %v", len(bs), err)
	}
	return bs[0]
}

// TestPayoutRun: a run pays every due provider its earnings less the commission in one
// transaction, creating their token accounts, through every step in order, records the
// fee, and signs the settled batch; a second run finds nothing to pay.
func TestPayoutRun(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 3)
	v, err := c.RunPayouts(context.Background(), runNow)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != protocol.BatchSettled || len(v.Payouts) != 3 || v.Total != 2_700_000 || v.TotalUSDC != "2.70" || len(v.Transactions) != 1 || v.FeesLamports != 5000 {
		t.Fatalf("batch: %+v", v)
	}
	for _, pv := range v.Payouts {
		if pv.Amount != 900_000 || !pv.Paid || pv.Transaction != v.Transactions[0] || !strings.Contains(pv.Explorer, pv.Transaction) {
			t.Fatalf("payout: %+v", pv)
		}
	}
	b := c.onlyBatch(t)
	if !slices.Equal(b.Txs[0].CreateATA, []int{0, 1, 2}) {
		t.Fatalf("the transaction creates the token accounts of payouts %v, want all three", b.Txs[0].CreateATA)
	}
	if want := []string{StepPlanned, StepSigned, StepSent, StepConfirmed}; !slices.Equal(c.steps, want) {
		t.Fatalf("steps %v, want %v", c.steps, want)
	}
	if b.Mint != c.chain.mint.String() || b.Treasury != c.treasury.PublicKey().String() || b.Cluster != c.chain.genesis {
		t.Fatalf("the batch names mint %s, treasury %s, cluster %s", b.Mint, b.Treasury, b.Cluster)
	}
	c.paidOnce(t)
	again, err := c.RunPayouts(context.Background(), runNow)
	if err != nil || again.State != "empty" || c.chain.succeeded() != 1 {
		t.Fatalf("second run: %+v %v", again, err)
	}
}

// TestPayoutStoppedAtEachStep: a coordinator stopped at any step (as a crash stops it) and
// started again finishes the batch from its ledger and the chain, in the state
// docs/settlement.md's table gives, and pays every provider exactly once.
func TestPayoutStoppedAtEachStep(t *testing.T) {
	cases := []struct {
		step string
		// what the ledger holds at the stop, and how many sends were made
		txState string
		sends   int
	}{
		{StepPlanned, ledger.TxPlanned, 0},
		{StepSigned, ledger.TxSigned, 0},
		{StepSent, ledger.TxSigned, 1},
		{StepConfirmed, ledger.TxConfirmed, 1},
	}
	for _, tc := range cases {
		t.Run(tc.step, func(t *testing.T) {
			c := newCoordinator(t)
			c.payees(t, 3)
			c.stopAt(tc.step)
			if _, err := c.RunPayouts(context.Background(), runNow); err == nil || !strings.Contains(err.Error(), "injected stop") {
				t.Fatalf("the run did not stop at %s: %v", tc.step, err)
			}
			b := c.onlyBatch(t)
			if b.State == protocol.BatchSettled || b.Txs[0].State != tc.txState || c.chain.sends != tc.sends {
				t.Fatalf("at the stop: batch %s, transaction %s, %d sends", b.State, b.Txs[0].State, c.chain.sends)
			}
			signature := b.Txs[0].Signature

			c.restart(t)
			if err := c.resume(context.Background()); err != nil {
				t.Fatal(err)
			}
			c.paidOnce(t)
			b = c.onlyBatch(t)
			if signature != "" && (b.Txs[0].Signature != signature || b.Txs[0].Attempts != 1) {
				t.Fatalf("signed again after a stop at %s: %s (attempt %d), was %s", tc.step, b.Txs[0].Signature, b.Txs[0].Attempts, signature)
			}
		})
	}
}

// TestPayoutStoppedBetweenTransactions: a batch of several transactions stopped right
// after the first is confirmed resumes with the next ones; nothing is paid twice.
func TestPayoutStoppedBetweenTransactions(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 20) // too many for one transaction of 1,232 bytes
	c.stopAt(StepConfirmed)
	c.RunPayouts(context.Background(), runNow)
	b := c.onlyBatch(t)
	if len(b.Txs) < 2 || b.Txs[0].State != ledger.TxConfirmed || b.Txs[1].State != ledger.TxPlanned {
		t.Fatalf("at the stop: %d transactions, first %s, second %s", len(b.Txs), b.Txs[0].State, b.Txs[1].State)
	}
	rec, _ := protocol.CheckBatch(b.Record, nil)
	if rec.State == protocol.BatchSettled {
		t.Fatal("the signed record says settled before every transaction is confirmed")
	}
	c.restart(t)
	if err := c.resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.paidOnce(t)
}

// TestPayoutLostSendAnswer: the RPC node takes a transaction but its answer is lost; the
// state machine asks the chain, finds it and records it instead of sending another.
func TestPayoutLostSendAnswer(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 2)
	c.chain.loseAnswers = 1
	if _, err := c.RunPayouts(context.Background(), runNow); err != nil {
		t.Fatal(err)
	}
	if c.chain.sends != 1 || c.onlyBatch(t).Txs[0].Attempts != 1 {
		t.Fatalf("%d sends, %d signatures", c.chain.sends, c.onlyBatch(t).Txs[0].Attempts)
	}
	c.paidOnce(t)
}

// TestPayoutNeverLands: a transaction that never lands expires and is signed anew, up to
// 20 rounds; then the run stops with the reason kept in the batch, nobody is marked paid,
// and a later run (the chain working again) pays each provider once.
func TestPayoutNeverLands(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 2)
	c.chain.dropSends = true
	_, err := c.RunPayouts(context.Background(), runNow)
	if err == nil || !strings.Contains(err.Error(), "gave up after 20 attempts") {
		t.Fatalf("run: %v", err)
	}
	b := c.onlyBatch(t)
	v, _, _ := c.Batch(b.Batch)
	if b.State != protocol.BatchSettling || !strings.Contains(v.Error, "gave up") || b.Txs[0].Attempts < 2 || c.chain.succeeded() != 0 {
		t.Fatalf("after the run: state %s, error %q, %d signatures", b.State, v.Error, b.Txs[0].Attempts)
	}
	for _, p := range v.Payouts {
		if p.Paid {
			t.Fatalf("%s marked paid though nothing landed", p.Provider)
		}
	}
	c.chain.dropSends = false
	v2, err := c.RunPayouts(context.Background(), runNow)
	if err != nil || v2.State != "empty" {
		t.Fatalf("the next run: %+v %v", v2, err)
	}
	c.paidOnce(t)
	if v, _, _ := c.Batch(b.Batch); v.Error != "" {
		t.Fatalf("the settled batch still shows the error %q", v.Error)
	}
}

// TestPayoutExpiredBeforeSending: signed and recorded but never sent, and its blockhash
// expired: the chain has full history, so it is signed anew (attempts = 2) and paid once.
func TestPayoutExpiredBeforeSending(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 1)
	c.stopAt(StepSigned)
	c.RunPayouts(context.Background(), runNow)
	first := c.onlyBatch(t).Txs[0].Signature
	c.chain.expire()
	c.restart(t)
	if err := c.resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	tx := c.onlyBatch(t).Txs[0]
	if tx.Attempts != 2 || tx.Signature == first {
		t.Fatalf("attempts %d, signature changed: %v", tx.Attempts, tx.Signature != first)
	}
	c.paidOnce(t)
}

// TestPayoutPrunedHistory: a transaction sent and landed, then forgotten by a pruned RPC
// node once its blockhash expired, is never signed again: the operator is told to use an
// archival endpoint, and with one the batch settles, paid once.
func TestPayoutPrunedHistory(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 2)
	c.stopAt(StepSent)
	c.RunPayouts(context.Background(), runNow)
	c.chain.prune()
	c.chain.expire()
	c.restart(t)
	err := c.resume(context.Background())
	if !errors.Is(err, ErrNoHistory) || !strings.Contains(err.Error(), "archival RPC endpoint") {
		t.Fatalf("resume on a pruned node: %v", err)
	}
	if tx := c.onlyBatch(t).Txs[0]; tx.Attempts != 1 || tx.State != ledger.TxSigned || c.chain.sends != 1 {
		t.Fatalf("the transaction was touched: %+v, %d sends", tx.State, c.chain.sends)
	}
	c.chain.unprune()
	if err := c.resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.paidOnce(t)
}

// TestPayoutRefusedBeforeSending: a wrong mint, a wrong cluster, an underfunded treasury or
// a missing setting stop the run before anything is stored or sent; the earnings stay
// pending, and the next good run pays them once.
func TestPayoutRefusedBeforeSending(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 2)
	good := c.Chain()
	other, _ := chain.NewKeypair()
	for _, tc := range []struct {
		name  string
		chain Chain
		want  error
		text  string
	}{
		{"wrong mint", Chain{Client: good.Client, Mint: other.PublicKey(), Cluster: good.Cluster}, chain.ErrWrongMint, ""},
		{"wrong cluster", Chain{Client: good.Client, Mint: good.Mint, Cluster: "11111111111111111111111111111111"}, chain.ErrWrongCluster, ""},
		{"no rpc", Chain{Mint: good.Mint, Cluster: good.Cluster}, nil, "settlement.rpc is not set"},
		{"no mint", Chain{Client: good.Client, Cluster: good.Cluster}, nil, "settlement.mint is not set"},
	} {
		c.UseChain(tc.chain)
		_, err := c.RunPayouts(context.Background(), runNow)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.text) {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	c.UseChain(good)
	c.chain.usdc = 1_000_000
	if _, err := c.RunPayouts(context.Background(), runNow); !errors.Is(err, chain.ErrUnderfunded) {
		t.Fatalf("underfunded: %v", err)
	}
	if bs, _ := c.ledger.Payouts.Batches(); len(bs) != 0 || c.chain.sends != 0 {
		t.Fatalf("%d batches stored, %d sends before the checks passed", len(bs), c.chain.sends)
	}
	c.chain.usdc = 1_000_000_000
	if v, err := c.RunPayouts(context.Background(), runNow); err != nil || len(v.Payouts) != 2 {
		t.Fatalf("the good run: %+v %v", v, err)
	}
	c.paidOnce(t)
}

// TestPayoutFailedOnChain: a transaction that fails on chain moves nothing and stops the
// run; after three failures it is split into one transaction per payout, and a lone
// payout that fails three times leaves the batch for the next one, which pays it.
func TestPayoutFailedOnChain(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 2)
	c.chain.failOnChain = 3
	for i := 1; i <= 3; i++ {
		v, err := c.RunPayouts(context.Background(), runNow)
		if i == 1 && (err == nil || !strings.Contains(err.Error(), "failed on chain (1 of 3 tries)")) {
			t.Fatalf("first run: %v", err)
		}
		if i > 1 && !strings.Contains(strings.Join(v.Skipped, "\n"), "an earlier batch is unfinished") {
			t.Fatalf("run %d does not say the batch is unfinished: %+v %v", i, v.Skipped, err)
		}
	}
	if b := c.onlyBatch(t); len(b.Txs) != 1 || b.Txs[0].Failures != 3 {
		t.Fatalf("after three failures: %+v", b.Txs)
	}
	// Split: the first single payout fails three times more, the other lands; the run
	// that takes the first out of the batch plans the next batch, which pays it.
	first := c.onlyBatch(t).Batch
	c.chain.failOnChain = 3
	var last api.BatchView
	for range 4 {
		last, _ = c.RunPayouts(context.Background(), runNow)
	}
	b, _ := c.ledger.Payouts.GetBatch(first)
	if len(b.Txs) != 1 || len(b.Payouts) != 1 || len(b.Deferred) != 1 || b.State != protocol.BatchSettled {
		t.Fatalf("after the split: %d transactions, %d payouts, deferred %+v, %s", len(b.Txs), len(b.Payouts), b.Deferred, b.State)
	}
	if !strings.Contains(b.Deferred[0].Reason, "failed 3 times on chain") {
		t.Fatalf("deferred because %q", b.Deferred[0].Reason)
	}
	if last.BatchID == first || len(last.Payouts) != 1 || last.Payouts[0].Provider != b.Deferred[0].Provider || last.Payouts[0].Amount != 900_000 || !last.Payouts[0].Paid {
		t.Fatalf("the next batch: %+v", last)
	}
	c.paidOnce(t)
}

// TestPayoutClosedTokenAccount: a provider that closes its token account after the batch
// is planned cannot block the others: its payout moves to the next batch before anything
// is signed, the others are paid, and the next batch pays it (creating its account).
func TestPayoutClosedTokenAccount(t *testing.T) {
	c := newCoordinator(t)
	ps := c.payees(t, 3)
	griefer := ps[0]
	c.chain.accounts[griefer.ata(c)] = true
	c.SetStepHook(func(step string) error {
		if step == StepPlanned {
			c.chain.accounts[griefer.ata(c)] = false
		}
		return nil
	})
	v, err := c.RunPayouts(context.Background(), runNow)
	c.SetStepHook(nil)
	if err != nil || len(v.Payouts) != 2 || len(v.Deferred) != 1 || v.Deferred[0].Provider != griefer.id.String() || v.State != protocol.BatchSettled {
		t.Fatalf("batch: %+v %v", v, err)
	}
	if !strings.Contains(v.Deferred[0].Reason, "token account was closed") {
		t.Fatalf("reason %q", v.Deferred[0].Reason)
	}
	next, err := c.RunPayouts(context.Background(), runNow)
	if err != nil || len(next.Payouts) != 1 || next.Payouts[0].Provider != griefer.id.String() {
		t.Fatalf("the next batch: %+v %v", next, err)
	}
	b, _ := c.ledger.Payouts.GetBatch(next.BatchID)
	if !slices.Equal(b.Txs[0].CreateATA, []int{0}) {
		t.Fatal("the next batch does not create the griefer's token account")
	}
	c.paidOnce(t)
}

// TestReplanByOperator: the operator takes a provider's unpaid payout out of a batch that
// cannot settle; the rest settles, and the next batch pays it. A payout whose transaction
// is signed is not taken out: it may still land.
func TestReplanByOperator(t *testing.T) {
	c := newCoordinator(t)
	ps := c.payees(t, 2)
	c.stopAt(StepSigned)
	c.RunPayouts(context.Background(), runNow)
	b := c.onlyBatch(t)
	if _, err := c.Replan(context.Background(), b.Batch, []string{ps[0].id.String()}); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "it may still land") {
		t.Fatalf("replan of a signed transaction: %v", err)
	}
	if _, err := c.Replan(context.Background(), "20991231-001", nil); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("replan of no batch: %v", err)
	}
	// The transaction fails on chain: back to planned, nothing moved.
	c.SetStepHook(nil)
	c.chain.failOnChain = 1
	c.RunPayouts(context.Background(), runNow)
	if tx := c.onlyBatch(t).Txs[0]; tx.State != ledger.TxPlanned || tx.Failures != 1 {
		t.Fatalf("after the failure: %s, %d failures", tx.State, tx.Failures)
	}
	v, err := c.Replan(context.Background(), b.Batch, []string{ps[0].id.String()})
	if err != nil || len(v.Payouts) != 1 || len(v.Deferred) != 1 || v.Deferred[0].Reason != "moved to the next batch by the operator" || v.State != protocol.BatchSettled {
		t.Fatalf("replan: %+v %v", v, err)
	}
	if _, err := c.Replan(context.Background(), b.Batch, nil); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("replan of a settled batch: %v", err)
	}
	next, err := c.RunPayouts(context.Background(), runNow)
	if err != nil || len(next.Payouts) != 1 || next.Payouts[0].Provider != ps[0].id.String() {
		t.Fatalf("the next batch: %+v %v", next, err)
	}
	c.paidOnce(t)
}
