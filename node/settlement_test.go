package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger/audit"

	"github.com/gpunex/gpunex/node/internal/money"

	"github.com/gpunex/gpunex/node/internal/jobs"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/ledger/solana/localnet"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// chainEnv is a local Solana runtime with a USDC-style mint and a funded treasury.
type chainEnv struct {
	rt       *localnet.Runtime
	c        *chain.Client
	treasury chain.PrivateKey
	mint     chain.PublicKey
	dir      string
}

func newChainEnv(t testing.TB) *chainEnv {
	t.Helper()
	rt := localnet.ForTest(t)
	ctx := context.Background()
	e := &chainEnv{rt: rt, c: chain.Dial(rt.URL), dir: t.TempDir()}
	var err error
	if e.treasury, err = chain.NewKeypair(); err != nil {
		t.Fatal(err)
	}
	if err := chain.WriteKeypair(filepath.Join(e.dir, "treasury.json"), e.treasury); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Airdrop(ctx, e.treasury.PublicKey(), 100_000_000_000); err != nil {
		t.Fatal(err)
	}
	if e.mint, err = e.c.CreateMint(ctx, e.treasury, protocol.USDCDecimals); err != nil {
		t.Fatal(err)
	}
	return e
}

// fund gives a wallet SOL for fees and USDC.
func (e *chainEnv) fund(t testing.TB, owner chain.PublicKey, micro uint64) {
	t.Helper()
	ctx := context.Background()
	if err := e.c.Airdrop(ctx, owner, 1_000_000_000); err != nil {
		t.Fatal(err)
	}
	if micro > 0 {
		if err := e.c.MintTo(ctx, e.treasury, e.mint, owner, micro); err != nil {
			t.Fatal(err)
		}
	}
}

// renterConfig is a renter whose own Solana wallet holds micro USDC (and SOL for fees).
func (e *chainEnv) renterConfig(t testing.TB, micro uint64) (config.Config, chain.PublicKey) {
	t.Helper()
	w, _ := chain.NewKeypair()
	path := filepath.Join(e.dir, "renter-"+w.PublicKey().String()+".json")
	if err := chain.WriteKeypair(path, w); err != nil {
		t.Fatal(err)
	}
	e.fund(t, w.PublicKey(), micro)
	c := testConfig(config.RoleRenter)
	c.Wallet = config.WalletConfig{RPC: e.rt.URL, Keypair: path}
	return c, w.PublicKey()
}

func (e *chainEnv) usdc(t testing.TB, owner chain.PublicKey) uint64 {
	t.Helper()
	b, err := e.c.TokenBalance(context.Background(), owner, e.mint)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *chainEnv) coordinatorConfig() config.Config {
	c := testConfig(config.RoleCoordinator)
	c.Settlement.RPC, c.Settlement.Mint, c.Settlement.Cluster = e.rt.URL, e.mint.String(), e.rt.GenesisHash
	c.Settlement.TreasuryKeypair = filepath.Join(e.dir, "treasury.json")
	c.Settlement.MinPayoutUSDC = "0.000001"
	c.Settlement.MarketInterval = config.Duration{Duration: time.Second}
	return c
}

// TestMoneyEndToEnd: a renter deposits USDC and runs a job against an escrow hold; the
// provider's receipt charges it; a payout batch pays the provider on chain, less the
// commission; the auditor passes the batch and fails an altered one.
func TestMoneyEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd and Solana")
	}
	e := newChainEnv(t)
	rt := testRuntime(t)
	tn := newTestNetWith(t, e.coordinatorConfig())
	ctx := context.Background()

	provWallet, _ := chain.NewKeypair()
	pcfg := providerConfig(0)
	pcfg.Provider.GPUs[0].Count, pcfg.Provider.GPUs[0].PriceUSDC = 2, "3.60"
	pcfg.Jobs.MemoryMBPerGPU, pcfg.Jobs.ScratchMB, pcfg.Jobs.Pids = 64, 16, 64
	pcfg.Jobs.RequireEscrow = true
	pcfg.Payout = config.PayoutConfig{Method: protocol.PayoutUSDC, Schedule: protocol.PayoutWeekly, SolanaAddress: provWallet.PublicKey().String()}
	prov := tn.addWith(pcfg, Deps{Sandbox: rt, JobsDir: t.TempDir()})

	rcfg, renterWallet := e.renterConfig(t, 100_000_000)
	renter := tn.add(rcfg, nil)
	eventually(t, 10*time.Second, "provider's offer found", func() (bool, string) {
		_, ok := searchHas(t, renter, prov.ID())
		return ok, ""
	})
	waitCertified(t, tn.boot, prov)
	archive := busyboxArchive(t)
	job := api.JobRequest{Offer: offerOf(prov), GPUs: 2, MaxSeconds: 60, ImageArchive: archive, Args: []string{"sh", "-c", "sleep 2"}}

	// Without funds the provider refuses: no hold.
	if _, err := renter.renter.ProposeJob(ctx, job); !errors.Is(err, jobs.ErrRefused) || !strings.Contains(err.Error(), "insufficient funds") {
		t.Fatalf("a job without funds: %v", err)
	}
	dep, err := renter.wallet.Deposit(ctx, 100_000_000, "")
	if err != nil {
		t.Fatal(err)
	}
	if !dep.Credited || dep.Balance == nil || dep.Balance.Available != 100_000_000 {
		t.Fatalf("deposit: %+v", dep)
	}
	if e.usdc(t, renterWallet) != 0 || e.usdc(t, e.treasury.PublicKey()) != 100_000_000 {
		t.Fatal("the deposit did not move the USDC to the treasury")
	}
	// A second claim of the same transaction credits nothing more.
	if _, err := renter.wallet.ClaimDeposits(ctx, dep.Signature, ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := renter.wallet.Balance(ctx, ""); b.Available != 100_000_000 {
		t.Fatalf("a deposit credited twice: %+v", b)
	}

	// A proposal the provider counters (its price is above the maximum): the hold placed
	// for it comes back once the provider confirms the job never ran.
	low := job
	low.MaxPrice = "1.00"
	if _, err := renter.renter.ProposeJob(ctx, low); !errors.Is(err, jobs.ErrRefused) {
		t.Fatalf("a proposal under the price: %v", err)
	}
	eventually(t, 15*time.Second, "the countered proposal's hold released", func() (bool, string) {
		b, _ := renter.wallet.Balance(ctx, "")
		return b.Held == 0 && b.Available == 100_000_000 && len(b.Holds) == 1 && b.Holds[0].State == ledger.HoldReleased, fmt.Sprintf("%+v", b)
	})

	v, err := renter.renter.ProposeJob(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	hold := protocol.HoldAmount(3_600_000, 2, 60)
	if b, _ := renter.wallet.Balance(ctx, ""); b.Held != hold || b.Available != 100_000_000-hold {
		t.Fatalf("balance while the job runs: %+v (hold %d)", b, hold)
	}
	final, err := renter.renter.JobLogs(ctx, v.ID, true, io.Discard)
	if err != nil || final.State != "ended" {
		t.Fatalf("job: %+v %v", final, err)
	}
	charge := final.Cost
	net := charge - protocol.Commission(charge, 1000)
	// A job that ran cannot have its hold released: the receipt settles it.
	if a := prov.jobs.ReleaseAnswer(v.ID); a.Release {
		t.Fatal("the provider would release the hold of a job that ran")
	}
	eventually(t, 20*time.Second, "job charged", func() (bool, string) {
		b, _ := renter.wallet.Balance(ctx, "")
		return b.Held == 0 && b.Available == 100_000_000-charge, fmt.Sprintf("%+v", b)
	})
	if charge <= 0 {
		t.Fatalf("the job cost nothing: %+v", final)
	}

	coord := tn.boot
	eventually(t, 10*time.Second, "the renter's countersignature of the receipt at the coordinator", func() (bool, string) {
		r, err := coord.ledger.Escrow.GetJobReport(v.ID, prov.ID().String())
		return err == nil && len(r.ReceiptCountersig) > 0, ""
	})
	eventually(t, 10*time.Second, "provider's payout settings at the coordinator", func() (bool, string) {
		_, err := coord.ledger.Payouts.GetPayoutSettings(prov.ID().String())
		return err == nil, ""
	})
	// The provider's pending earnings, as its operator's Prometheus sees them after the
	// hourly check.
	prov.alertPayouts()
	if got := gaugeValue(t, prov, "gpunex_earnings_pending_micro_usdc"); got != float64(net) {
		t.Fatalf("gpunex_earnings_pending_micro_usdc %v before the payout, want %d", got, net)
	}
	batch, err := coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	if batch.State != protocol.BatchSettled || len(batch.Payouts) != 1 || batch.Payouts[0].Amount != net || len(batch.Transactions) != 1 {
		t.Fatalf("batch: %+v", batch)
	}
	if got := e.usdc(t, provWallet.PublicKey()); got != uint64(net) {
		t.Fatalf("provider's wallet holds %d micro-USDC, want %d", got, net)
	}
	// Solana's official JavaScript client reads the same deposit and payout from the
	// runtime, as explorers and wallets would.
	if err := localnet.CheckWithWeb3(ctx, localnet.Web3Check{RPC: e.rt.URL, Mint: e.mint.String(), Treasury: e.treasury.PublicKey().String(),
		Deposits: []localnet.Web3Transfer{{Signature: dep.Signature, Amount: "100000000"}},
		Payouts:  []localnet.Web3Transfer{{Signature: batch.Transactions[0], Owner: provWallet.PublicKey().String(), Amount: fmt.Sprint(int64(net))}}}); err != nil {
		t.Fatal(err)
	}
	prov.alertPayouts()
	if got := gaugeValue(t, prov, "gpunex_earnings_pending_micro_usdc"); got != 0 {
		t.Fatalf("gpunex_earnings_pending_micro_usdc %v after the payout", got)
	}
	// Running again pays nothing more.
	again, err := coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
	if err != nil || again.State != "empty" {
		t.Fatalf("second run: %+v %v", again, err)
	}

	earn, err := prov.wallet.Earnings(ctx, api.EarningsQuery{Period: "month", By: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	if earn.Total != int64(net) || earn.Pending != 0 || len(earn.Payouts) != 1 || !earn.Payouts[0].Paid || len(earn.Groups) != 2 {
		t.Fatalf("earnings: %+v", earn)
	}
	if earn.Groups[0].Net+earn.Groups[1].Net != int64(net) {
		t.Fatalf("per-GPU earnings do not add up: %+v", earn.Groups)
	}

	// The auditor passes the batch...
	bundle, known, err := renter.wallet.PayoutBundle(ctx, batch.BatchID)
	if err != nil {
		t.Fatal(err)
	}
	rep := audit.Batch(ctx, *bundle, audit.Options{RPC: e.rt.URL, Trust: []peer.ID{coord.ID()}, Known: known})
	if !rep.OK || rep.Receipts != 1 || rep.Transactions != 1 || rep.Countersigned != 1 {
		t.Fatalf("audit of the real batch: %+v", rep)
	}
	// ...and fails one whose amount was altered (the signature breaks), one the
	// coordinator signed with a wrong amount, and a receipt paid in a second batch.
	altered := *bundle
	altered.Batch = []byte(strings.Replace(string(bundle.Batch), fmt.Sprintf(`"amount_micro_usdc":%d`, net), fmt.Sprintf(`"amount_micro_usdc":%d`, net+1), 1))
	if rep := audit.Batch(ctx, altered, audit.Options{RPC: e.rt.URL}); rep.OK {
		t.Fatal("an altered batch passed the audit")
	}
	sb, _ := protocol.CheckBatch(bundle.Batch, nil)
	wrong := sb.PayoutBatch
	wrong.Payouts = append([]protocol.Payout{}, wrong.Payouts...)
	wrong.Payouts[0].Amount = net + 5
	wrongRaw, _ := protocol.Seal(protocol.KindPayoutBatch, wrong, coord.peer.Key)
	rep = audit.Batch(ctx, protocol.AuditBundle{Batch: wrongRaw, Receipts: bundle.Receipts, Settings: bundle.Settings}, audit.Options{RPC: e.rt.URL})
	if rep.OK || !strings.Contains(strings.Join(rep.Discrepancies, "\n"), "receipts add up to") || !strings.Contains(strings.Join(rep.Discrepancies, "\n"), "moved") {
		t.Fatalf("a batch with a wrong amount: %+v", rep)
	}
	twice := sb.PayoutBatch
	twice.Batch = "20990101-001"
	twiceRaw, _ := protocol.Seal(protocol.KindPayoutBatch, twice, coord.peer.Key)
	rep = audit.Batch(ctx, *bundle, audit.Options{RPC: e.rt.URL, Known: [][]byte{twiceRaw}})
	if rep.OK || !strings.Contains(strings.Join(rep.Discrepancies, "\n"), "paid in batch 20990101-001 and again") {
		t.Fatalf("a receipt paid twice: %+v", rep)
	}

	// Market statistics reach the provider: the job's GPU-seconds count, but a job of a
	// few seconds sets no lease price (money.MinCountedGPUSeconds).
	eventually(t, 10*time.Second, "market advice", func() (bool, string) {
		adv, err := prov.market.RecommendPrice("", "")
		return err == nil && len(adv) == 1 && adv[0].ListedGPUs == 2 && adv[0].Leases == 0 && adv[0].LeasedGPUSeconds > 0 && adv[0].Recommended > 0,
			fmt.Sprintf("%+v %v", adv, err)
	})
}

// payoutFixture is a coordinator holding earnings of several providers, without jobs: the
// payout state machine's tests.
type payoutFixture struct {
	e         *chainEnv
	coord     *Node
	providers []chain.PrivateKey
	ids       []peer.ID
	round     int
}

func newPayoutFixture(t testing.TB, dataDir string, providers int) *payoutFixture {
	t.Helper()
	e := newChainEnv(t)
	f := &payoutFixture{e: e}
	f.coord = startCoordinator(t, e.coordinatorConfig(), dataDir)
	for range providers {
		w, _ := chain.NewKeypair()
		sk, _, _ := crypto.GenerateEd25519Key(nil)
		id, _ := peer.IDFromPrivateKey(sk)
		raw, err := protocol.Seal(protocol.KindPayoutSettings, protocol.PayoutSettings{Version: 1, Provider: id.String(), Seq: 1,
			IssuedAt: time.Now(), Method: protocol.PayoutUSDC, Schedule: protocol.PayoutWeekly, SolanaAddress: w.PublicKey().String()}, sk)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.coord.settlement.Serve(context.Background(), id, protocol.WalletRequest{Op: "settings", Settings: raw}); err != nil {
			t.Fatal(err)
		}
		f.providers, f.ids = append(f.providers, w), append(f.ids, id)
	}
	return f
}

// startCoordinator starts a coordinator whose ledger is on disk in dataDir.
func startCoordinator(t testing.TB, cfg config.Config, dataDir string) *Node {
	t.Helper()
	return startCoordinatorWith(t, cfg, dataDir, Deps{})
}

// startCoordinatorWith is startCoordinator with more of the node's Deps.
func startCoordinatorWith(t testing.TB, cfg config.Config, dataDir string, d Deps) *Node {
	t.Helper()
	sk, err := loadOrCreateKey(filepath.Join(dataDir, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	d.DataDir, d.Logger = filepath.Join(dataDir, "data"), quietLogger()
	n, err := New(context.Background(), cfg, sk, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	return n
}

func loadOrCreateKey(path string) (crypto.PrivKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		return crypto.UnmarshalPrivateKey(b)
	}
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, err
	}
	b, _ := crypto.MarshalPrivateKey(sk)
	os.MkdirAll(filepath.Dir(path), 0o700)
	return sk, os.WriteFile(path, b, 0o600)
}

// earn books a charged job of the given amount for each provider, and puts the USDC the
// renter would have deposited into the treasury.
func (f *payoutFixture) earn(t testing.TB, amount protocol.MicroUSDC) {
	t.Helper()
	f.earnUnfunded(t, amount)
	if err := f.e.c.MintTo(context.Background(), f.e.treasury, f.e.mint, f.e.treasury.PublicKey(), uint64(amount)*uint64(len(f.ids))); err != nil {
		t.Fatal(err)
	}
}

// earnUnfunded books earnings whose USDC never reached the treasury.
func (f *payoutFixture) earnUnfunded(t testing.TB, amount protocol.MicroUSDC) {
	t.Helper()
	l := f.coord.ledger
	f.round++
	if _, _, err := l.Escrow.CreditDeposit(ledger.Deposit{Signature: fmt.Sprint("fixture-", f.round), Renter: "renter", Amount: amount * protocol.MicroUSDC(len(f.ids))}); err != nil {
		t.Fatal(err)
	}
	var items []ledger.ReportCharge
	for i, id := range f.ids {
		job := fmt.Sprintf("%08x%08x", f.round, i)
		if _, err := l.Escrow.PlaceHold(ledger.Hold{Job: job, Renter: "renter", Provider: id.String(), Amount: amount, CommissionBPS: 1000, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		items = append(items, ledger.ReportCharge{Report: ledger.JobReport{Job: job, Provider: id.String(), ReceivedAt: time.Now()}, Countersigned: true,
			Receipt: receiptSHA(f.round, i), Renter: "renter", Amount: amount, EndedAt: time.Now()})
	}
	if _, err := l.Escrow.ChargeReports(items); err != nil {
		t.Fatal(err)
	}
}

func receiptSHA(round, i int) string { return fmt.Sprintf("%032x%032x", round, i) }

// settled checks that every batch is settled and that its latest signed record says so,
// naming the transaction of each payout.
func (f *payoutFixture) settled(t testing.TB) {
	t.Helper()
	bs, err := f.coord.ledger.Payouts.Batches()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		rec, err := protocol.CheckBatch(b.Record, protocol.NewTrust(f.coord.ID()))
		if err != nil {
			t.Fatal(err)
		}
		if b.State != protocol.BatchSettled || rec.State != protocol.BatchSettled || len(rec.Transactions) != len(b.Txs) {
			t.Fatalf("batch %s: state %s, signed record says %s with %d of %d transactions", b.Batch, b.State, rec.State, len(rec.Transactions), len(b.Txs))
		}
		for _, p := range rec.Payouts {
			if !p.Paid || p.Transaction == "" {
				t.Fatalf("batch %s: the signed record does not show %s paid", b.Batch, p.Provider)
			}
		}
	}
}

// paid checks that every provider's wallet holds exactly want.
func (f *payoutFixture) paid(t testing.TB, want uint64) {
	t.Helper()
	for i, w := range f.providers {
		if got := f.e.usdc(t, w.PublicKey()); got != want {
			t.Fatalf("provider %d holds %d micro-USDC, want %d (paid twice or not at all)", i, got, want)
		}
	}
}

// TestPayoutFailureAtEveryStep: a run stopped at each step of the state machine (as a
// crash would stop it), or hit by an RPC failure, is finished by the next run: every
// provider is paid exactly once.
func TestPayoutFailureAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("Solana")
	}
	f := newPayoutFixture(t, t.TempDir(), 3)
	ctx := context.Background()
	s := f.coord.settlement
	var want uint64
	for _, step := range []string{"planned", "signed", "sent", "confirmed"} {
		t.Run(step, func(t *testing.T) {
			f.earn(t, 1_000_000)
			want += 900_000
			var hit atomic.Bool
			s.SetStepHook(func(name string) error {
				if name == step && hit.CompareAndSwap(false, true) {
					return fmt.Errorf("injected stop at %s", step)
				}
				return nil
			})
			if _, err := f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true}); err == nil || !hit.Load() {
				t.Fatalf("the run did not stop at %s: %v", step, err)
			}
			s.SetStepHook(nil)
			if _, err := f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true}); err != nil {
				t.Fatal(err)
			}
			f.paid(t, want)
			f.settled(t)
		})
	}
	t.Run("expired-before-send", func(t *testing.T) {
		// Signed and recorded, never sent, and its blockhash expires: it is signed again.
		f.earn(t, 1_000_000)
		want += 900_000
		s.SetStepHook(func(name string) error {
			if name == "signed" {
				return errors.New("injected stop before sending")
			}
			return nil
		})
		f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
		s.SetStepHook(nil)
		if err := f.e.rt.ExpireBlockhash(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
		f.paid(t, want)
		bs, _ := f.coord.ledger.Payouts.Batches()
		if bs[0].Txs[0].Attempts != 2 {
			t.Fatalf("the expired transaction was signed %d times, want 2", bs[0].Txs[0].Attempts)
		}
	})
	t.Run("lost-send-response", func(t *testing.T) {
		// The RPC node takes the transaction but the answer is lost: the state machine
		// finds it on chain instead of paying again.
		f.earn(t, 1_000_000)
		want += 900_000
		lost := &loseResponses{method: "sendTransaction", base: http.DefaultTransport}
		saved := s.Chain()
		lossy := saved
		lossy.Client = chain.DialHTTP(f.e.rt.URL, &http.Client{Transport: lost})
		s.UseChain(lossy)
		defer s.UseChain(saved)
		if _, err := f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
		if lost.lost.Load() == 0 {
			t.Fatal("no answer was lost: the test did not test anything")
		}
		f.paid(t, want)
	})
	t.Run("wrong-mint-and-underfunded", func(t *testing.T) {
		f.earn(t, 1_000_000)
		saved := s.Chain()
		wrong := saved
		wrong.Mint = f.e.treasury.PublicKey() // an account that is not a mint
		s.UseChain(wrong)
		_, err := f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
		s.UseChain(saved)
		if !errors.Is(err, chain.ErrWrongMint) {
			t.Fatalf("wrong mint: %v", err)
		}
		wrong = saved
		wrong.Cluster = "11111111111111111111111111111111"
		s.UseChain(wrong)
		_, err = f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
		s.UseChain(saved)
		if !errors.Is(err, chain.ErrWrongCluster) {
			t.Fatalf("wrong cluster: %v", err)
		}
		f.earnUnfunded(t, 500_000_000_000)
		if _, err := f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true}); !errors.Is(err, chain.ErrUnderfunded) {
			t.Fatalf("underfunded treasury: %v", err)
		}
		f.paid(t, want) // nothing was sent
	})
}

// loseResponses forwards requests but drops the answer of one JSON-RPC method.
type loseResponses struct {
	method string
	base   http.RoundTripper
	lost   atomic.Int32
}

func (l *loseResponses) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	resp, err := l.base.RoundTrip(r)
	if err == nil && strings.Contains(string(body), `"`+l.method+`"`) && l.lost.Add(1) == 1 {
		resp.Body.Close()
		return nil, errors.New("injected: connection reset after the request was sent")
	}
	return resp, err
}

// TestPayoutSurvivesKill9: the coordinator process is killed with SIGKILL right after it
// broadcast a payout transaction, before recording it; a restarted coordinator finishes
// the batch from its ledger and the chain, and pays nobody twice.
func TestPayoutSurvivesKill9(t *testing.T) {
	if os.Getenv("GPUNEX_PAYOUT_CHILD") != "" {
		payoutChild(t)
		return
	}
	if testing.Short() {
		t.Skip("Solana")
	}
	dir := t.TempDir()
	f := newPayoutFixture(t, dir, 20) // two transactions
	f.earn(t, 2_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	f.coord.Close(ctx)
	cancel()

	for _, step := range []string{"sent", "confirmed"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPayoutSurvivesKill9$", "-test.v")
		cmd.Env = append(os.Environ(), "GPUNEX_PAYOUT_CHILD="+dir, "GPUNEX_TEST_CRASH_AT="+step,
			"GPUNEX_CHILD_RPC="+f.e.rt.URL, "GPUNEX_CHILD_MINT="+f.e.mint.String(), "GPUNEX_CHILD_GENESIS="+f.e.rt.GenesisHash,
			"GPUNEX_CHILD_TREASURY="+filepath.Join(f.e.dir, "treasury.json"))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys() == nil || !strings.Contains(ee.String(), "killed") {
			t.Fatalf("the child was not killed at %s: %v\n%s", step, err, out)
		}
	}
	// A restarted coordinator resumes the batch at start.
	cfg := f.e.coordinatorConfig()
	n := startCoordinator(t, cfg, dir)
	eventually(t, 60*time.Second, "batch settled after restart", func() (bool, string) {
		bs, _ := n.ledger.Payouts.Batches()
		return len(bs) == 1 && bs[0].State == protocol.BatchSettled, fmt.Sprint(len(bs))
	})
	f.paid(t, 1_800_000)
}

// payoutChild is the coordinator process TestPayoutSurvivesKill9 kills: its payout state
// machine's observer kills it with SIGKILL (no deferred function, no flush) at the step
// GPUNEX_TEST_CRASH_AT names, from its start on (the resumption at start included).
func payoutChild(t *testing.T) {
	dir, crashAt := os.Getenv("GPUNEX_PAYOUT_CHILD"), os.Getenv("GPUNEX_TEST_CRASH_AT")
	cfg := testConfig(config.RoleCoordinator)
	cfg.Settlement.RPC, cfg.Settlement.Mint, cfg.Settlement.Cluster = os.Getenv("GPUNEX_CHILD_RPC"), os.Getenv("GPUNEX_CHILD_MINT"), os.Getenv("GPUNEX_CHILD_GENESIS")
	cfg.Settlement.TreasuryKeypair, cfg.Settlement.MinPayoutUSDC = os.Getenv("GPUNEX_CHILD_TREASURY"), "0.01"
	n := startCoordinatorWith(t, cfg, dir, Deps{PayoutSteps: func(step string) error {
		if step == crashAt {
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				p.Kill()
			}
			select {}
		}
		return nil
	}})
	_, err := n.settlement.RunPayouts(context.Background(), api.PayoutRunOptions{Now: true})
	t.Fatalf("the run returned instead of being killed: %v", err)
}

// BenchmarkPayouts1000 settles 1,000 provider payouts on the local Solana runtime, twice:
// first to wallets without a USDC token account (the batch creates them), then again once
// they exist (every later week). It reports transactions, fees and wall time of each.
func BenchmarkPayouts1000(b *testing.B) {
	for range b.N {
		f := newPayoutFixture(b, b.TempDir(), 1000)
		ctx := context.Background()
		for _, round := range []string{"first", "later"} {
			f.earn(b, 1_000_000)
			start := time.Now()
			v, err := f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
			if err != nil {
				b.Fatal(err)
			}
			wall := time.Since(start)
			if v.State != protocol.BatchSettled || len(v.Payouts) != 1000 {
				b.Fatalf("batch %+v", v.State)
			}
			b.ReportMetric(float64(len(v.Transactions)), round+"-transactions")
			b.ReportMetric(float64(v.FeesLamports), round+"-fee-lamports")
			b.ReportMetric(wall.Seconds(), round+"-seconds")
		}
	}
}

// TestBankPayouts: a provider paid by bank transfer gets whole cents (the sub-cent rest is
// recorded in the batch), exported as CSV and pain.001 from the settings it signed, and
// marked paid once the bank confirms.
func TestBankPayouts(t *testing.T) {
	if testing.Short() {
		t.Skip("Solana")
	}
	e := newChainEnv(t)
	cfg := e.coordinatorConfig()
	cfg.Settlement.BankAccountName, cfg.Settlement.BankIBAN, cfg.Settlement.BankBIC = "GPUNEX OPERATOR", "DE89370400440532013000", "COBADEFFXXX"
	coord := startCoordinator(t, cfg, t.TempDir())
	f := &payoutFixture{e: e, coord: coord}
	sk, _, _ := crypto.GenerateEd25519Key(nil)
	id, _ := peer.IDFromPrivateKey(sk)
	raw, _ := protocol.Seal(protocol.KindPayoutSettings, protocol.PayoutSettings{Version: 1, Provider: id.String(), Seq: 1, IssuedAt: time.Now(),
		Method: protocol.PayoutBank, Schedule: protocol.PayoutMonthly, AccountName: "Ada GPU SARL", IBAN: "FR1420041010050500013M02606", BIC: "PSSTFRPPPAR"}, sk)
	if _, err := coord.settlement.Serve(context.Background(), id, protocol.WalletRequest{Op: "settings", Settings: raw}); err != nil {
		t.Fatal(err)
	}
	f.ids = []peer.ID{id}
	f.earnUnfunded(t, 1_371_741) // the provider earns 90%: 1,234,566.9 -> 1,234,567 micro-USDC
	v, err := coord.settlement.RunPayouts(context.Background(), api.PayoutRunOptions{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := coord.ledger.Payouts.GetBatch(v.BatchID)
	p := b.Payouts[0]
	if p.Method != protocol.PayoutBank || p.Amount != 1_230_000 || p.Rounding != 4_567 || p.Paid || len(v.Transactions) != 0 || v.State != protocol.BatchSettling {
		t.Fatalf("bank payout %+v, batch %+v", p, v)
	}
	csvFile, _, err := coord.settlement.BankExport(v.BatchID, "csv")
	if err != nil || !strings.Contains(string(csvFile), "FR1420041010050500013M02606,PSSTFRPPPAR,1.23,USD") {
		t.Fatalf("csv: %v\n%s", err, csvFile)
	}
	xmlFile, _, err := coord.settlement.BankExport(v.BatchID, "pain001")
	if err != nil || !strings.Contains(string(xmlFile), `<InstdAmt Ccy="USD">1.23</InstdAmt>`) || !strings.Contains(string(xmlFile), "<IBAN>DE89370400440532013000</IBAN>") {
		t.Fatalf("pain.001: %v\n%s", err, xmlFile)
	}
	done, err := coord.settlement.ConfirmBankPayouts(v.BatchID, "BANK-REF-42", nil)
	if err != nil || done.State != protocol.BatchSettled || !done.Payouts[0].Paid {
		t.Fatalf("confirm: %+v %v", done, err)
	}
	if _, _, err := coord.settlement.BankExport(v.BatchID, "csv"); err == nil {
		t.Fatal("a paid batch exported again")
	}
	// What anyone may read names the account only masked: no IBAN, no holder's name.
	bundle, known, err := coord.wallet.PayoutBundle(context.Background(), v.BatchID)
	if err != nil {
		t.Fatal(err)
	}
	public := bytes.Join(append(append([][]byte{bundle.Batch}, bundle.Settings...), known...), nil)
	if bytes.Contains(public, []byte("FR1420041010050500013M02606")) || bytes.Contains(public, []byte("Ada GPU SARL")) ||
		!bytes.Contains(public, []byte(`"destination":"FR14 **** 2606"`)) {
		t.Fatalf("the public batch and bundle expose bank details:\n%s", public)
	}
	// (The fixture's receipts have no records, so the audit fails, but not for settings.)
	rep := audit.Batch(context.Background(), *bundle, audit.Options{RPC: e.rt.URL, Known: known})
	if strings.Contains(strings.Join(rep.Discrepancies, "\n"), "settings") || len(rep.Unverifiable) != 1 || !strings.Contains(rep.Unverifiable[0], "FR14 **** 2606") {
		t.Fatalf("audit of a bank batch: %+v, unverifiable %q", rep.Discrepancies, rep.Unverifiable)
	}
}

// TestScheduledPayoutsCatchUp: a weekly provider whose Monday the coordinator missed is paid
// at the next check, once: the next checks that week pay nothing more.
func TestScheduledPayoutsCatchUp(t *testing.T) {
	if testing.Short() {
		t.Skip("Solana")
	}
	f := newPayoutFixture(t, t.TempDir(), 2)
	f.earn(t, 1_000_000)
	s := f.coord.settlement
	s.ScheduledPayouts(context.Background())
	f.paid(t, 900_000)
	f.earn(t, 1_000_000)
	s.ScheduledPayouts(context.Background())
	f.paid(t, 900_000)
	if bs, _ := f.coord.ledger.Payouts.Batches(); len(bs) != 1 {
		t.Fatalf("%d batches: a due day paid twice", len(bs))
	}
}

// TestDepositRecordedButNotSent: a renter that crashed after recording its signed deposit
// and before sending it sends it again and has it credited, once; one whose blockhash
// expired meanwhile is marked as having moved nothing; one confirmed but not finalized yet
// is credited only once finalized.
func TestDepositRecordedButNotSent(t *testing.T) {
	if testing.Short() {
		t.Skip("Solana")
	}
	e := newChainEnv(t)
	tn := newTestNetWith(t, e.coordinatorConfig())
	ctx := context.Background()
	w, _ := chain.NewKeypair()
	e.fund(t, w.PublicKey(), 50_000_000)
	chain.WriteKeypair(filepath.Join(e.dir, "renter.json"), w)
	rcfg := testConfig(config.RoleRenter)
	rcfg.Wallet = config.WalletConfig{RPC: e.rt.URL, Keypair: filepath.Join(e.dir, "renter.json")}
	renter := tn.add(rcfg, nil)
	eventually(t, 10*time.Second, "treasury token account", func() (bool, string) {
		ok, _ := e.c.AccountExists(ctx, chain.ATA(e.treasury.PublicKey(), e.mint))
		return ok, ""
	})
	record := func(amount uint64) ledger.OwnDeposit {
		hash, lastValid, err := e.c.LatestBlockhash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		raw, sig, err := chain.DepositTransaction(hash, w, e.treasury.PublicKey(), e.mint, protocol.USDCDecimals, amount, protocol.DepositMemo(renter.ID()))
		if err != nil {
			t.Fatal(err)
		}
		d := ledger.OwnDeposit{Signature: sig.String(), Amount: protocol.MicroUSDC(amount), Raw: raw, LastValid: lastValid, SentAt: time.Now()}
		renter.ledger.Wallet.PutOwnDeposit(d)
		return d
	}
	d := record(20_000_000)
	if renter.wallet.DepositLanded(ctx, &d) {
		t.Fatal("a deposit never sent counted as landed")
	}
	eventually(t, 10*time.Second, "the deposit sent again lands", func() (bool, string) { return renter.wallet.DepositLanded(ctx, &d), "" })
	if _, err := renter.wallet.ClaimDeposits(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := renter.wallet.Balance(ctx, ""); b.Available != 20_000_000 || e.usdc(t, w.PublicKey()) != 30_000_000 {
		t.Fatalf("after the resent deposit: %+v, wallet %d", b, e.usdc(t, w.PublicKey()))
	}
	late := record(5_000_000)
	if err := e.rt.ExpireBlockhash(ctx); err != nil {
		t.Fatal(err)
	}
	if renter.wallet.DepositLanded(ctx, &late) || late.Error == "" {
		t.Fatalf("an expired deposit: %+v", late)
	}
	if b, _ := renter.wallet.Balance(ctx, ""); b.Available != 20_000_000 || e.usdc(t, w.PublicKey()) != 30_000_000 {
		t.Fatalf("the expired deposit moved money: %+v", b)
	}

	if err := e.rt.HoldFinality(ctx, true); err != nil {
		t.Fatal(err)
	}
	pending := record(7_000_000)
	eventually(t, 10*time.Second, "the deposit lands (confirmed)", func() (bool, string) { return renter.wallet.DepositLanded(ctx, &pending), "" })
	if _, err := renter.wallet.ClaimDeposits(ctx, "", ""); err == nil || !strings.Contains(err.Error(), "not finalized") {
		t.Fatalf("claiming a deposit not finalized: %v", err)
	}
	if b, _ := renter.wallet.Balance(ctx, ""); b.Available != 20_000_000 {
		t.Fatalf("a deposit not finalized was credited: %+v", b)
	}
	if err := e.rt.HoldFinality(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := renter.wallet.ClaimDeposits(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := renter.wallet.Balance(ctx, ""); b.Available != 27_000_000 {
		t.Fatalf("the finalized deposit: %+v", b)
	}
}

// signedJob builds the records of a job as a provider key and a renter key sign them: the
// lease, the renter's countersignature, a receipt of the given seconds and the renter's
// countersignature of it.
func signedJob(t testing.TB, provKey, renterKey crypto.PrivKey, job string, price protocol.MicroUSDC, gpus int, seconds int64) ledger.Job {
	t.Helper()
	prov, _ := peer.IDFromPrivateKey(provKey)
	renter, _ := peer.IDFromPrivateKey(renterKey)
	now := time.Now().UTC().Add(-time.Duration(seconds+5) * time.Second)
	l := protocol.Lease{Version: 1, Job: job, Proposal: strings.Repeat("0", 64), Renter: renter.String(), Provider: prov.String(),
		Model: "H100-80GB", GPUs: gpus, Price: price, IssuedAt: now, EndsAt: now.Add(time.Hour),
		Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	lease, err := protocol.Seal(protocol.KindLease, l, provKey)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindLease,
		SHA256: protocol.RecordSHA256(lease), Job: job, Signer: renter.String(), SignedAt: now}, renterKey)
	r := protocol.Receipt{Version: 1, Job: job, Lease: protocol.RecordSHA256(lease), Provider: prov.String(), Renter: renter.String(),
		Model: l.Model, GPUs: gpus, StartedAt: now, EndedAt: now.Add(time.Duration(seconds) * time.Second), Seconds: seconds,
		Price: price, Amount: protocol.Cost(price, gpus, seconds), Reason: "exited"}
	receipt, err := protocol.Seal(protocol.KindReceipt, r, provKey)
	if err != nil {
		t.Fatal(err)
	}
	rcs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindReceipt,
		SHA256: protocol.RecordSHA256(receipt), Job: job, Signer: renter.String(), SignedAt: time.Now().UTC()}, renterKey)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.Job{ID: job, Side: "provider", State: ledger.JobEnded, Lease: lease, LeaseCountersig: cs, Receipt: receipt, ReceiptCountersig: rcs}
}

// TestForgedReportsChargeNothing: job reports built to mint money (figures that overflow),
// to charge a renter's hold with a lease of another renter, or to take the place of the
// real provider's report are refused; the real report still charges the hold.
func TestForgedReportsChargeNothing(t *testing.T) {
	tn := newTestNet(t)
	coord := tn.boot
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	ctx := context.Background()
	coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 10_000_000})
	const job = "00000000000000aa"
	waitCertified(t, coord, prov)
	if _, err := coord.settlement.Serve(ctx, renter.ID(), protocol.WalletRequest{Op: "hold", Job: job, Provider: prov.ID().String(),
		Amount: 7_300_000, ExpiresAt: time.Now().Add(48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sockKey, _, _ := crypto.GenerateEd25519Key(nil)
	sock, _ := peer.IDFromPrivateKey(sockKey)
	balance := func() ledger.Account { a, _ := coord.ledger.Escrow.GetAccount(renter.ID().String()); return a }

	// Figures that overflow: refused by the lease's range rules.
	prov.wallet.ReportJob(context.Background(), signedJob(t, prov.peer.Key, sockKey, "00000000000000bb", 1<<62, 4, 1))
	if a, _ := coord.ledger.Escrow.GetAccount(sock.String()); a.Available != 0 || a.Charged != 0 {
		t.Fatalf("an overflowing lease moved money: %+v", a)
	}
	if _, err := coord.ledger.Escrow.GetJobReport("00000000000000bb", prov.ID().String()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an overflowing report was stored: %v", err)
	}
	// The provider's own lease for the renter's job, countersigned by a renter of its own.
	prov.wallet.ReportJob(context.Background(), signedJob(t, prov.peer.Key, sockKey, job, 3_600_000, 1, 3600))
	// The renter's self-signed report of its own job, to take the provider's place.
	renter.wallet.ReportJob(context.Background(), signedJob(t, renter.peer.Key, renter.peer.Key, job, 1, 1, 1))
	if h, _ := coord.ledger.Escrow.GetHold(job); h.State != ledger.HoldHeld || balance().Charged != 0 {
		t.Fatalf("a forged report touched the hold: %+v %+v", h, balance())
	}
	// The real report charges it.
	prov.wallet.ReportJob(context.Background(), signedJob(t, prov.peer.Key, renter.peer.Key, job, 3_600_000, 2, 60))
	eventually(t, 5*time.Second, "the real report charged", func() (bool, string) {
		h, _ := coord.ledger.Escrow.GetHold(job)
		return h.State == ledger.HoldCharged && h.Charge == 120_000 && balance().Charged == 120_000, fmt.Sprintf("%+v", h)
	})
}

// TestWalletAnswersComeInPages: an auditor gets a batch's bundle and the list of batches in
// pages when they are long, and a provider its earnings of a period only, with totals that
// cover the period even when the listing is cut short.
func TestWalletAnswersComeInPages(t *testing.T) {
	if testing.Short() {
		t.Skip("Solana")
	}
	pageBytes, rows := money.WalletPageBytes, money.MaxEarningRows
	t.Cleanup(func() { money.WalletPageBytes, money.MaxEarningRows = pageBytes, rows })
	const providers, rounds = 12, 3
	f := newPayoutFixture(t, t.TempDir(), providers)
	ctx := context.Background()
	var ids []string
	for range rounds {
		f.earn(t, 1_000_000)
		run, err := f.coord.settlement.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.BatchID)
	}
	whole, known, err := f.coord.wallet.PayoutBundle(ctx, ids[1])
	if err != nil || len(whole.Receipts) != providers || len(known) != rounds {
		t.Fatalf("in one page: %d receipts, %d batches known, %v", len(whole.Receipts), len(known), err)
	}
	money.WalletPageBytes = 1 // one receipt, one batch a page
	paged, pagedKnown, err := f.coord.wallet.PayoutBundle(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(paged) != fmt.Sprint(whole) || fmt.Sprint(pagedKnown) != fmt.Sprint(known) {
		t.Fatalf("paged answers differ: %d receipts, %d batches", len(paged.Receipts), len(pagedKnown))
	}
	if _, more, _ := f.coord.settlement.BundlePage(ids[1], 0, money.WalletPageBytes); !more {
		t.Fatal("a one-byte page held the whole bundle")
	}

	// Earnings: the provider's three jobs, all paid; a period holding none of them lists
	// none but still knows what was paid; cut to one row, the totals still cover three.
	a, err := f.coord.settlement.EarningsOf(f.ids[0].String(), time.Time{}, time.Time{})
	if err != nil || len(a.Rows) != rounds || a.Net != rounds*900_000 || a.Paid != rounds*900_000 || a.Pending != 0 || len(a.Payouts) != rounds || a.Truncated {
		t.Fatalf("earnings: %+v %v", a, err)
	}
	old, err := f.coord.settlement.EarningsOf(f.ids[0].String(), time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	if err != nil || len(old.Rows) != 0 || old.Net != 0 || old.Paid != rounds*900_000 {
		t.Fatalf("earnings of a period without jobs: %+v %v", old, err)
	}
	money.MaxEarningRows = 1
	cut, err := f.coord.settlement.EarningsOf(f.ids[0].String(), time.Time{}, time.Time{})
	if err != nil || len(cut.Rows) != 1 || !cut.Truncated || cut.Net != rounds*900_000 || cut.Rows[0].Receipt != a.Rows[rounds-1].Receipt {
		t.Fatalf("earnings cut to one row: %+v %v", cut, err)
	}
}

// TestReportGoesToTheHoldsCoordinator: a provider trusting two coordinators reports a job
// to the one that holds the renter's money for it (the hold's signer), not to its first,
// and that one charges the hold.
func TestReportGoesToTheHoldsCoordinator(t *testing.T) {
	tn := newTestNet(t)
	first := tn.boot
	second := tn.add(testConfig(config.RoleCoordinator), nil)
	pcfg := providerConfig(0)
	pcfg.Trust.Coordinators = []string{first.ID().String(), second.ID().String()}
	prov := tn.add(pcfg, nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	ctx := context.Background()
	second.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 10_000_000})
	const job = "00000000000000cc"
	waitCertified(t, second, prov)
	resp, err := second.settlement.Serve(ctx, renter.ID(), protocol.WalletRequest{Op: "hold", Job: job, Provider: prov.ID().String(),
		Amount: 7_300_000, ExpiresAt: time.Now().Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	j := signedJob(t, prov.peer.Key, renter.peer.Key, job, 3_600_000, 2, 60)
	if j.Proposal, err = protocol.Seal(protocol.KindProposal, protocol.Proposal{Version: 1, Job: job, Renter: renter.ID().String(),
		Provider: prov.ID().String(), IssuedAt: time.Now(), Model: "H100-80GB", GPUs: 2, MaxSeconds: 3600, MaxPrice: 3_600_000,
		Image: protocol.Image{Ref: "example.org/job:1"}, Hold: resp.Hold}, renter.peer.Key); err != nil {
		t.Fatal(err)
	}
	// Sent again until it lands, as reportLoop does (the provider may not reach the second
	// coordinator at once).
	eventually(t, 20*time.Second, "the hold's coordinator charged the job", func() (bool, string) {
		prov.wallet.ReportJob(ctx, j)
		h, _ := second.ledger.Escrow.GetHold(job)
		return h.State == ledger.HoldCharged && h.Charge == 120_000, fmt.Sprintf("state %s charge %s", h.State, h.Charge)
	})
	if _, err := first.ledger.Escrow.GetJobReport(job, prov.ID().String()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the report went to the first coordinator too: %v", err)
	}
	// The provider's earnings add up what every coordinator it trusts holds for it.
	earn, err := prov.wallet.Earnings(ctx, api.EarningsQuery{Period: "month"})
	if err != nil || len(earn.History) != 1 || earn.History[0].Job != job || earn.Total <= 0 || earn.Total > 120_000 || len(earn.Unreachable) != 0 {
		t.Fatalf("earnings across coordinators: %+v %v", earn, err)
	}
}

// TestUncountersignedReceipts: a greedy provider's receipt the renter never countersigned
// is charged, after the dispute window, no more than the renter's last countersigned
// checkpoint plus one interval; a receipt the renter disputes waits for the coordinator's
// decision, which charges at least what the checkpoints prove; a stranger cannot dispute.
func TestUncountersignedReceipts(t *testing.T) {
	tn := newTestNet(t)
	coord := tn.boot
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	ctx := context.Background()
	coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	const price, gpus = greedyPrice, 1
	waitCertified(t, coord, prov)
	greedy := func(job string, cpSeconds int64) ledger.Job {
		return greedyReceipt(t, coord, prov, renter, job, cpSeconds)
	}

	// No dispute: after the window, the checkpoint (60 s) plus one interval (60 s).
	greedy("00000000000000d1", 60)
	later := time.Now().Add(coord.cfg.Settlement.DisputeWindow.Duration + time.Minute)
	if es, err := coord.ledger.Escrow.ChargeDue(time.Now()); err != nil || len(es) != 0 {
		t.Fatalf("charged inside the dispute window: %v %+v", err, es)
	}
	es, err := coord.ledger.Escrow.ChargeDue(later)
	if err != nil || len(es) != 1 || es[0].Charge != 120_000 || es[0].Rule != protocol.RuleCheckpoint {
		t.Fatalf("after the window, a 3,000 s receipt with a 60 s checkpoint: %v %+v", err, es)
	}

	// Disputed: the renter says 100 s; the hold waits for a decision.
	j := greedy("00000000000000d2", 90)
	rec, _, _ := protocol.OpenReceipt(j.Receipt)
	d := protocol.Dispute{Version: 1, Job: j.ID, Receipt: protocol.RecordSHA256(j.Receipt), Renter: renter.ID().String(), Provider: prov.ID().String(),
		ObservedStart: rec.StartedAt, ObservedEnd: rec.StartedAt.Add(100 * time.Second), Seconds: 100, Amount: protocol.Cost(price, gpus, 100),
		Reason: "the job ended after 100 s", SignedAt: time.Now().UTC()}
	stranger := tn.add(testConfig(config.RoleRenter), nil)
	forged := j
	forged.Dispute, _ = protocol.Seal(protocol.KindDispute, d, stranger.peer.Key)
	if err := stranger.wallet.Dispute(ctx, forged); err == nil {
		t.Fatal("a stranger disputed another renter's job")
	}
	if err := disputeReceipt(t, renter, prov, &j, 100, "the job ended after 100 s"); err != nil {
		t.Fatal(err)
	}
	if es, _ := coord.ledger.Escrow.ChargeDue(later); len(es) != 0 {
		t.Fatalf("a disputed receipt charged at the window's end: %+v", es)
	}
	open, err := coord.settlement.Disputes(false)
	if err != nil || len(open) != 1 || open[0].ClaimedUSDC != "3.00" || open[0].RenterSaysUSDC != "0.10" || open[0].FloorUSDC != "0.09" {
		t.Fatalf("open disputes: %+v %v", open, err)
	}
	if _, err := coord.settlement.ResolveDispute(j.ID, api.ResolveRequest{USDC: "0.05"}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a decision below what the checkpoints prove: %v", err)
	}
	v, err := coord.settlement.ResolveDispute(j.ID, api.ResolveRequest{For: "renter", Note: "the renter's logs show the end"})
	if err != nil || v.ChargedUSDC != "0.10" || v.State != ledger.DisputeDecided || len(v.Decision) == 0 {
		t.Fatalf("decided for the renter: %+v %v", v, err)
	}
	if h, _ := coord.ledger.Escrow.GetHold(j.ID); h.State != ledger.HoldCharged || h.Rule != protocol.RuleDecision || h.Charge != 100_000 {
		t.Fatalf("hold after the decision: %+v", h)
	}
	if _, err := coord.settlement.ResolveDispute(j.ID, api.ResolveRequest{For: "provider"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("decided twice: %v", err)
	}
	a, _ := coord.ledger.Escrow.GetAccount(renter.ID().String())
	if a.Charged != 220_000 || a.Available+a.Held+a.Charged != a.Deposited {
		t.Fatalf("the renter paid %s for two jobs that ran about 100 s each: %+v", a.Charged, a)
	}
}

// TestDisputeOfAnotherReceipt: a provider that hands its renter a 110 s receipt and
// reports a 3,000 s one for the same job does not get the larger: the dispute shows both
// and the provider's two signatures, and a decision for the provider charges what the
// dispute showed as claimed.
func TestDisputeOfAnotherReceipt(t *testing.T) {
	tn := newTestNet(t)
	coord := tn.boot
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	waitCertified(t, coord, prov)
	const job = "00000000000000d3"
	j := greedyReceipt(t, coord, prov, renter, job, 60) // reported: 3,000 s
	reported, _, _ := protocol.OpenReceipt(j.Receipt)
	r := *reported
	r.Seconds, r.EndedAt = 110, r.StartedAt.Add(110*time.Second)
	r.Amount = protocol.Cost(r.Price, r.GPUs, r.Seconds)
	handed := j
	handed.Receipt, _ = protocol.Seal(protocol.KindReceipt, r, prov.peer.Key)
	if err := disputeReceipt(t, renter, prov, &handed, 100, "the job ended after 100 s"); err != nil {
		t.Fatal(err)
	}
	shown, err := coord.settlement.Dispute(job)
	if err != nil || !shown.Equivocation || shown.ClaimedUSDC != "0.11" || shown.ReportedUSDC != "3.00" || shown.FloorUSDC != "0.06" {
		t.Fatalf("the dispute shows equivocation %v, claimed %s, reported %s, floor %s: %v", shown.Equivocation, shown.ClaimedUSDC, shown.ReportedUSDC, shown.FloorUSDC, err)
	}
	v, err := coord.settlement.ResolveDispute(job, api.ResolveRequest{For: "provider"})
	if err != nil || v.ChargedUSDC != shown.ClaimedUSDC {
		t.Fatalf("a decision for the provider charged %s; the dispute showed %s claimed: %v", v.ChargedUSDC, shown.ClaimedUSDC, err)
	}
}

// greedyPrice is the price of greedyReceipt's jobs: 1,000 micro-USDC a second on one GPU.
const greedyPrice = 3_600_000

// greedyReceipt makes the records of a job of renter on prov whose receipt claims 3,000 s
// while the renter countersigned a checkpoint at cpSeconds, held by coord, and has prov
// report it: the receipt waits at the coordinator, pending, not countersigned.
func greedyReceipt(t *testing.T, coord, prov, renter *Node, job string, cpSeconds int64) ledger.Job {
	t.Helper()
	j := greedyJob(t, coord, prov, renter, job, cpSeconds)
	eventually(t, 10*time.Second, "the report stored", func() (bool, string) {
		prov.wallet.ReportJob(context.Background(), j)
		h, _ := coord.ledger.Escrow.GetHold(job)
		return h.State == ledger.HoldPending, h.State
	})
	return j
}

// greedyJob is greedyReceipt's job, held, before the provider reports it.
func greedyJob(t *testing.T, coord, prov, renter *Node, job string, cpSeconds int64) ledger.Job {
	t.Helper()
	ctx := context.Background()
	const price, gpus = greedyPrice, 1
	resp, err := coord.settlement.Serve(ctx, renter.ID(), protocol.WalletRequest{Op: "hold", Job: job, Provider: prov.ID().String(),
		Amount: 4_000_000, ExpiresAt: time.Now().Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	j := signedJob(t, prov.peer.Key, renter.peer.Key, job, price, gpus, 3000) // it ran 100 s at most
	j.ReceiptCountersig = nil
	l, _, _ := protocol.OpenLease(j.Lease)
	cp := protocol.Checkpoint{Version: 1, Job: job, Lease: protocol.RecordSHA256(j.Lease), Provider: prov.ID().String(), Renter: renter.ID().String(),
		Seconds: cpSeconds, Amount: protocol.Cost(price, gpus, cpSeconds), At: l.IssuedAt.Add(time.Duration(cpSeconds) * time.Second)}
	j.Checkpoint, _ = protocol.Seal(protocol.KindCheckpoint, cp, prov.peer.Key)
	j.CheckpointCountersig, _ = protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindCheckpoint,
		SHA256: protocol.RecordSHA256(j.Checkpoint), Job: job, Signer: renter.ID().String(), SignedAt: cp.At}, renter.peer.Key)
	j.Proposal, _ = protocol.Seal(protocol.KindProposal, protocol.Proposal{Version: 1, Job: job, Renter: renter.ID().String(),
		Provider: prov.ID().String(), IssuedAt: time.Now(), Model: "H100-80GB", GPUs: gpus, MaxSeconds: 3600, MaxPrice: price,
		Image: protocol.Image{Ref: "example.org/job:1"}, Hold: resp.Hold}, renter.peer.Key)
	return j
}

// countersignReceipt has the renter of a greedyJob countersign its receipt after all.
func countersignReceipt(renter *Node, j *ledger.Job) {
	j.ReceiptCountersig, _ = protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindReceipt,
		SHA256: protocol.RecordSHA256(j.Receipt), Job: j.ID, Signer: renter.ID().String(), SignedAt: time.Now().UTC()}, renter.peer.Key)
}

// TestDisputeThenCountersign: a renter that disputes a receipt, then countersigns it for
// the provider, pays it: the provider's report with the countersignature charges the
// receipt by the countersigned-receipt rule and closes the dispute.
func TestDisputeThenCountersign(t *testing.T) {
	tn := newTestNet(t)
	coord := tn.boot
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	waitCertified(t, coord, prov)
	j := greedyReceipt(t, coord, prov, renter, "00000000000000d4", 60)
	if err := disputeReceipt(t, renter, prov, &j, 0, "nothing ran"); err != nil {
		t.Fatal(err)
	}
	countersignReceipt(renter, &j)
	eventually(t, 10*time.Second, "the countersigned report taken", func() (bool, string) {
		prov.wallet.ReportJob(context.Background(), j)
		h, _ := coord.ledger.Escrow.GetHold(j.ID)
		return h.State == ledger.HoldCharged, h.State
	})
	if h, _ := coord.ledger.Escrow.GetHold(j.ID); h.Rule != protocol.RuleCountersignedReceipt || h.Charge != 3_000_000 {
		t.Fatalf("a receipt countersigned after its dispute: charged %s under %s", h.Charge, h.Rule)
	}
	if d, _ := coord.settlement.Dispute(j.ID); d.State != ledger.DisputeCountersigned {
		t.Fatalf("the dispute is %s", d.State)
	}
}

// TestDisputeDecidedOnlyAfterTheReport: a renter that disputes before the provider's
// report cannot have it decided then (which would charge nothing, whatever the report
// proves): the decision waits, and the countersigned report that comes charges the job.
func TestDisputeDecidedOnlyAfterTheReport(t *testing.T) {
	tn := newTestNet(t)
	coord := tn.boot
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	waitCertified(t, coord, prov)
	j := greedyJob(t, coord, prov, renter, "00000000000000d5", 960)
	if err := disputeReceipt(t, renter, prov, &j, 0, "nothing ran"); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.settlement.ResolveDispute(j.ID, api.ResolveRequest{For: "renter"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("decided before the provider's report: %v", err)
	}
	countersignReceipt(renter, &j)
	eventually(t, 10*time.Second, "the report taken", func() (bool, string) {
		prov.wallet.ReportJob(context.Background(), j)
		h, _ := coord.ledger.Escrow.GetHold(j.ID)
		return h.State == ledger.HoldCharged, h.State
	})
	if a, _ := coord.ledger.Escrow.GetAccount(renter.ID().String()); a.Charged < protocol.Cost(greedyPrice, 1, 960) {
		t.Fatalf("the renter countersigned 960 s and paid %s", a.Charged)
	}
}

// disputeReceipt has the renter of a greedyReceipt job dispute it: it says the job ran
// seconds.
func disputeReceipt(t *testing.T, renter, prov *Node, j *ledger.Job, seconds int64, reason string) error {
	t.Helper()
	rec, _, _ := protocol.OpenReceipt(j.Receipt)
	d := protocol.Dispute{Version: 1, Job: j.ID, Receipt: protocol.RecordSHA256(j.Receipt), Renter: renter.ID().String(), Provider: prov.ID().String(),
		ObservedStart: rec.StartedAt, ObservedEnd: rec.StartedAt.Add(time.Duration(seconds) * time.Second), Seconds: seconds, Amount: protocol.Cost(greedyPrice, 1, seconds),
		Reason: reason, SignedAt: time.Now().UTC()}
	j.Dispute, _ = protocol.Seal(protocol.KindDispute, d, renter.peer.Key)
	return renter.wallet.Dispute(context.Background(), *j)
}

// TestPayoutGriefing: a provider that closes its token account after its batch is planned
// cannot block the others: its payout moves to the next batch before anything is signed,
// the others are paid, and the next batch pays it (creating its account), each exactly
// once. And a transaction that expired unseen is not signed again while the RPC endpoint
// cannot prove it never landed (pruned history): the operator is told to use an archival
// endpoint, and nothing is paid twice.
func TestPayoutGriefing(t *testing.T) {
	if testing.Short() {
		t.Skip("Solana")
	}
	f := newPayoutFixture(t, t.TempDir(), 3)
	ctx := context.Background()
	s := f.coord.settlement
	griefer := f.providers[0]
	if err := f.e.c.Airdrop(ctx, griefer.PublicKey(), 1_000_000_000); err != nil {
		t.Fatal(err)
	}
	if err := f.e.c.CreateATA(ctx, f.e.treasury, griefer.PublicKey(), f.e.mint); err != nil {
		t.Fatal(err)
	}
	f.earn(t, 1_000_000)
	var closed atomic.Bool
	s.SetStepHook(func(name string) error {
		if name == "planned" && closed.CompareAndSwap(false, true) {
			return f.e.c.CloseTokenAccount(ctx, griefer, f.e.mint)
		}
		return nil
	})
	v, err := s.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
	s.SetStepHook(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Deferred) != 1 || v.Deferred[0].Provider != f.ids[0].String() || len(v.Payouts) != 2 || v.State != protocol.BatchSettled {
		t.Fatalf("batch after the griefer closed its account: %+v", v)
	}
	for i, w := range f.providers {
		want := uint64(900_000)
		if i == 0 {
			want = 0
		}
		if got := f.e.usdc(t, w.PublicKey()); got != want {
			t.Fatalf("provider %d holds %d, want %d", i, got, want)
		}
	}
	f.settled(t)
	// The next run pays the griefer's receipts, once.
	if v, err := s.RunPayouts(ctx, api.PayoutRunOptions{Now: true}); err != nil || len(v.Payouts) != 1 || v.Payouts[0].Provider != f.ids[0].String() {
		t.Fatalf("the next batch: %+v %v", v, err)
	}
	f.paid(t, 900_000)
	f.settled(t)

	// Pruned history: sent, landed, then the node forgets it and the blockhash expires.
	f.earn(t, 1_000_000)
	s.SetStepHook(func(name string) error {
		if name == "sent" {
			return errors.New("injected crash after sending")
		}
		return nil
	})
	s.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
	s.SetStepHook(nil)
	if err := f.e.rt.PruneHistory(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := f.e.rt.ExpireBlockhash(ctx); err != nil {
		t.Fatal(err)
	}
	v, err = s.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
	if err != nil || len(v.Skipped) == 0 || !strings.Contains(strings.Join(v.Skipped, ";"), "archival RPC endpoint") {
		t.Fatalf("an expired transaction on a pruned RPC node: %+v %v", v.Skipped, err)
	}
	if bs, _ := f.coord.ledger.Payouts.Batches(); !strings.Contains(bs[0].Error, "keeps history only from slot") || bs[0].Txs[0].Attempts != 1 {
		t.Fatalf("the stuck batch: error %q, signed %d times", bs[0].Error, bs[0].Txs[0].Attempts)
	}
	f.paid(t, 1_800_000) // landed once; not signed again
	if err := f.e.rt.PruneHistory(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunPayouts(ctx, api.PayoutRunOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	f.paid(t, 1_800_000)
	f.settled(t)
}

// waitCertified waits until a coordinator holds a provider's certified offer: it places
// holds and hears reports only for such providers.
func waitCertified(t testing.TB, coord, prov *Node) {
	t.Helper()
	eventually(t, 10*time.Second, "the provider's certified offer at the coordinator", func() (bool, string) {
		so, _ := coord.book.Get(prov.ID())
		return so != nil && so.Cert != nil, ""
	})
}

// TestAbandonedJobCounted: a provider that never reports a job it lost does not escape the
// completion count. Once the lease has ended with no receipt, the renter's node ends the job
// and sends the coordinator its countersigned usage; when the job's hold expires with still
// no report from the provider, the coordinator counts the job against the provider, once.
// A stranger's account, one without usage, one before the lease's end, and one of a job its
// provider did report are refused.
func TestAbandonedJobCounted(t *testing.T) {
	after := jobs.AbandonAfter
	jobs.AbandonAfter = 0
	t.Cleanup(func() { jobs.AbandonAfter = after })
	tn := newTestNet(t)
	coord := tn.boot
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	stranger := tn.add(testConfig(config.RoleRenter), nil)
	ctx := context.Background()
	coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	waitCertified(t, coord, prov)
	const price, gpus = 3_600_000, 1
	// A job of renter that ran (60 s countersigned) under a lease that started at start and
	// lasted an hour, whose hold expires at expires.
	rented := func(job string, start, expires time.Time, cpSeconds int64) ledger.Job {
		resp, err := coord.settlement.Serve(ctx, renter.ID(), protocol.WalletRequest{Op: "hold", Job: job, Provider: prov.ID().String(),
			Amount: 4_000_000, ExpiresAt: expires})
		if err != nil {
			t.Fatal(err)
		}
		l := protocol.Lease{Version: 1, Job: job, Proposal: strings.Repeat("0", 64), Renter: renter.ID().String(), Provider: prov.ID().String(),
			Model: "H100-80GB", GPUs: gpus, Price: price, IssuedAt: start, EndsAt: start.Add(time.Hour),
			Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
		j := ledger.Job{ID: job, Side: "renter", Peer: prov.ID().String(), State: ledger.JobRunning, CreatedAt: start, StartedAt: start, ObservedStart: start}
		j.Lease, _ = protocol.Seal(protocol.KindLease, l, prov.peer.Key)
		j.LeaseCountersig, _ = protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindLease,
			SHA256: protocol.RecordSHA256(j.Lease), Job: job, Signer: renter.ID().String(), SignedAt: start}, renter.peer.Key)
		if cpSeconds > 0 {
			cp := protocol.Checkpoint{Version: 1, Job: job, Lease: protocol.RecordSHA256(j.Lease), Provider: prov.ID().String(), Renter: renter.ID().String(),
				Seconds: cpSeconds, Amount: protocol.Cost(price, gpus, cpSeconds), At: start.Add(time.Duration(cpSeconds+1) * time.Second)}
			j.Checkpoint, _ = protocol.Seal(protocol.KindCheckpoint, cp, prov.peer.Key)
			j.CheckpointCountersig, _ = protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindCheckpoint,
				SHA256: protocol.RecordSHA256(j.Checkpoint), Job: job, Signer: renter.ID().String(), SignedAt: cp.At}, renter.peer.Key)
			j.CheckpointSeconds = cpSeconds
		}
		j.Proposal, _ = protocol.Seal(protocol.KindProposal, protocol.Proposal{Version: 1, Job: job, Renter: renter.ID().String(),
			Provider: prov.ID().String(), IssuedAt: start, Model: "H100-80GB", GPUs: gpus, MaxSeconds: 3600, MaxPrice: price,
			Image: protocol.Image{Ref: "example.org/job:1"}, Hold: resp.Hold}, renter.peer.Key)
		return j
	}
	ended := time.Now().UTC().Add(-2 * time.Hour) // the lease ended an hour ago
	completion := func() (weight, good float64, events []string) {
		rs, _ := coord.ledger.Reliability.UpdateReliability(prov.ID().String(), func(*ledger.ReliabilityState) error { return nil })
		hl := coord.cfg.Coordinator.HalfLife.Duration
		return rs.Reliability.Completion.Weight(time.Now(), hl), rs.Reliability.Completion.Good, rs.Events
	}

	// Refused: before the lease's end, without usage, by a stranger.
	early := rented("00000000000000a1", time.Now().UTC().Add(-time.Minute), time.Now().Add(48*time.Hour), 30)
	if err := renter.wallet.ReportAbandoned(ctx, early); err == nil || !strings.Contains(err.Error(), "the lease runs until") {
		t.Fatalf("an account before the lease's end: %v", err)
	}
	bare := rented("00000000000000a2", ended, time.Now().Add(48*time.Hour), 0)
	if err := renter.wallet.ReportAbandoned(ctx, bare); err == nil || !strings.Contains(err.Error(), "nothing shows that the job ran") {
		t.Fatalf("an account without usage: %v", err)
	}
	job := rented("00000000000000a3", ended, time.Now().Add(6*time.Second), 60)
	if err := stranger.wallet.ReportAbandoned(ctx, job); err == nil || !strings.Contains(err.Error(), "not yours") {
		t.Fatalf("a stranger's account: %v", err)
	}

	// The renter's node does it by itself: the job is running in its ledger, the lease has
	// ended, no receipt came.
	if err := renter.ledger.Jobs.PutJob(job); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the renter's account taken", func() (bool, string) {
		_, err := coord.ledger.Escrow.GetAbandonment(job.ID)
		return err == nil, fmt.Sprint(err)
	})
	if j, _ := renter.ledger.Jobs.GetJob(job.ID); j.State != ledger.JobFailed || !strings.Contains(j.Error, "abandoned by its provider") ||
		!strings.Contains(j.Error, "the coordinator was told") || j.AbandonReported.IsZero() {
		t.Fatalf("the renter's job: %s %q", j.State, j.Error)
	}
	if w, _, _ := completion(); w != 0 {
		t.Fatalf("counted before the hold expired: weight %v", w)
	}
	// The hold expires with no report from the provider: counted against it, once.
	eventually(t, 20*time.Second, "the hold expired", func() (bool, string) {
		coord.settlement.ReleaseExpired()
		h, _ := coord.ledger.Escrow.GetHold(job.ID)
		return h.State == ledger.HoldReleased, h.State
	})
	w, good, events := completion()
	coord.settlement.ReleaseExpired()
	if again, _, _ := completion(); again > w*1.01 {
		t.Fatalf("counted twice: weight %v, then %v", w, again)
	}
	if w <= 0 || good != 0 || !strings.Contains(strings.Join(events, "; "), "job 00000000000000a3 abandoned: no receipt by its hold's expiry; its renter's countersigned usage shows 60 s run") {
		t.Fatalf("completion weight %v, good %v, events %q", w, good, events)
	}

	// A job its provider reported is not the renter's to call abandoned.
	reported := signedJob(t, prov.peer.Key, renter.peer.Key, "00000000000000a4", price, gpus, 100)
	resp, err := coord.settlement.Serve(ctx, renter.ID(), protocol.WalletRequest{Op: "hold", Job: reported.ID, Provider: prov.ID().String(),
		Amount: 4_000_000, ExpiresAt: time.Now().Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	reported.Proposal, _ = protocol.Seal(protocol.KindProposal, protocol.Proposal{Version: 1, Job: reported.ID, Renter: renter.ID().String(),
		Provider: prov.ID().String(), IssuedAt: time.Now(), Model: "H100-80GB", GPUs: gpus, MaxSeconds: 3600, MaxPrice: price,
		Image: protocol.Image{Ref: "example.org/job:1"}, Hold: resp.Hold}, renter.peer.Key)
	eventually(t, 10*time.Second, "the report stored", func() (bool, string) {
		prov.wallet.ReportJob(ctx, reported)
		h, _ := coord.ledger.Escrow.GetHold(reported.ID)
		return h.State != ledger.HoldHeld, h.State
	})
	if err := renter.wallet.ReportAbandoned(ctx, reported); err == nil || !strings.Contains(err.Error(), "settled already") {
		t.Fatalf("an account of a reported job: %v", err)
	}
}

// behindClock is a machine clock running late.
type behindClock struct{ by time.Duration }

func (c behindClock) Now() time.Time                         { return time.Now().Add(-c.by) }
func (c behindClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestRefusedHoldGivenBack: a renter whose clock runs ten minutes late refuses the hold its
// coordinator signs (issued "in the future"), and proposes without it; the coordinator has
// placed it all the same, and the renter asks for it back at once, so its funds are not
// locked for the job's time and a day.
func TestRefusedHoldGivenBack(t *testing.T) {
	tn := newTestNet(t)
	coord := tn.boot
	prov := tn.add(providerConfig(0), nil)
	renter := tn.add(testConfig(config.RoleRenter), behindClock{10 * time.Minute})
	coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 10_000_000})
	waitCertified(t, coord, prov)
	const job = "00000000000000dd"
	// Asked again while the renter cannot reach the coordinator yet (no hold placed then).
	eventually(t, 20*time.Second, "the renter refuses the hold", func() (bool, string) {
		_, err := renter.wallet.RequestHold(context.Background(), protocol.Proposal{Version: 1, Job: job, Renter: renter.ID().String(),
			Provider: prov.ID().String(), IssuedAt: time.Now(), Model: "H100-80GB", GPUs: 1, MaxSeconds: 3600, MaxPrice: 1_000_000}, coord.ID())
		return err != nil && strings.Contains(err.Error(), "does not check"), fmt.Sprint(err)
	})
	eventually(t, 20*time.Second, "the refused hold released", func() (bool, string) {
		h, err := coord.ledger.Escrow.GetHold(job)
		a, _ := coord.ledger.Escrow.GetAccount(renter.ID().String())
		return err == nil && h.State == ledger.HoldReleased && a.Held == 0, fmt.Sprintf("hold %s (%v), account %+v", h.State, err, a)
	})
}
