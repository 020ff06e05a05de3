package money

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/protocol"
)

// The coordinator of the unit tests: a Settlement built from its Deps over an in-memory
// ledger, a fake clock, the fake chain (fakechain_test.go), fake offers and a fake provider
// to ask about releases.

// start is a Monday, 12:00 UTC: weekly payouts are due.
var start = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// stepClock is a fake clock that a wait moves forward by what is waited: the code under
// test never blocks on time, and time still passes as it asks.
type stepClock struct{ *clock.Fake }

func (c stepClock) After(d time.Duration) <-chan time.Time {
	c.Advance(d)
	return c.Fake.After(0)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// party is a node's identity.
type party struct {
	key crypto.PrivKey
	id  peer.ID
}

func newParty() party {
	k, id := recordtest.NewKey()
	return party{k, id}
}

// fakeOffers is the coordinator's book: providers certified here, and their live offers.
type fakeOffers struct {
	mu     sync.Mutex
	offers map[peer.ID]*protocol.SignedOffer
}

func (o *fakeOffers) Live(time.Time) []*protocol.SignedOffer {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*protocol.SignedOffer
	for _, so := range o.offers {
		out = append(out, so)
	}
	return out
}

func (o *fakeOffers) Get(p peer.ID) (*protocol.SignedOffer, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.offers[p], time.Time{}
}

// certify puts a certified offer of the provider in the book.
func (o *fakeOffers) certify(p peer.ID, region string, gpus ...protocol.OfferGPUs) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.offers == nil {
		o.offers = map[peer.ID]*protocol.SignedOffer{}
	}
	o.offers[p] = &protocol.SignedOffer{Offer: protocol.Offer{Provider: p.String(), Region: region, GPUs: gpus},
		Signer: p, Cert: &protocol.SignedCertificate{}}
}

// fakeProviders answers the coordinator's "did this job run?" as the test says.
type fakeProviders struct {
	answer protocol.HoldRelease
	err    error
	asked  []peer.ID
}

func (f *fakeProviders) Exchange(_ context.Context, id peer.ID, proto string, _ time.Duration, req any, _ int, resp any) error {
	f.asked = append(f.asked, id)
	if proto != protocol.HoldReleaseProtocol {
		return fmt.Errorf("unexpected protocol %s", proto)
	}
	if f.err != nil {
		return f.err
	}
	a := f.answer
	if a.Job == "" {
		a.Job = req.(protocol.HoldRelease).Job
	}
	*resp.(*protocol.HoldRelease) = a
	return nil
}

// fakeTopic keeps what is published.
type fakeTopic struct {
	mu        sync.Mutex
	published [][]byte
}

func (t *fakeTopic) Publish(_ context.Context, data []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.published = append(t.published, data)
	return nil
}

// coordinator is a Settlement under test with everything around it.
type coordinator struct {
	*Settlement
	party
	deps      SettlementDeps
	ledger    *ledger.Ledger
	clock     stepClock
	chain     *fakeChain
	treasury  chain.PrivateKey
	offers    *fakeOffers
	providers *fakeProviders
	topic     *fakeTopic
	metrics   *metrics.Metrics
	steps     []string // the payout steps seen, in order

	alertsMu sync.Mutex
	alerts   []string // the alerts sent to the operator: "key: subject: body"
}

// told returns the alerts sent to the coordinator's operator so far.
func (c *coordinator) told() []string {
	c.alertsMu.Lock()
	defer c.alertsMu.Unlock()
	return append([]string(nil), c.alerts...)
}

// newCoordinator builds a coordinator: commission 10%, minimum payout 0.01 USDC, dispute
// window 24 h, its treasury funded on the fake chain. edit changes its config first.
func newCoordinator(t testing.TB, edit ...func(*config.Config)) *coordinator {
	t.Helper()
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	treasury, err := chain.NewKeypair()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "treasury.json")
	if err := chain.WriteKeypair(keyFile, treasury); err != nil {
		t.Fatal(err)
	}
	fc := newFakeChain(treasury.PublicKey())
	cfg := config.Defaults(config.RoleCoordinator)
	cfg.Settlement.RPC, cfg.Settlement.Mint, cfg.Settlement.Cluster = "http://solana.test:8899", fc.mint.String(), fc.genesis
	cfg.Settlement.TreasuryKeypair, cfg.Settlement.MinPayoutUSDC = keyFile, "0.01"
	for _, e := range edit {
		e(&cfg)
	}
	me := newParty()
	c := &coordinator{party: me, ledger: l, clock: stepClock{clock.NewFake(start)}, chain: fc, treasury: treasury,
		offers: &fakeOffers{}, providers: &fakeProviders{}, topic: &fakeTopic{},
		metrics: metrics.New(func() float64 { return 0 }, func() float64 { return 0 })}
	c.deps = SettlementDeps{
		Deps:   Deps{Peer: &p2p.Peer{ID: me.id, Key: me.key}, Ledger: storesOf(l), Clock: c.clock, Log: quiet(), Metrics: c.metrics, Config: cfg},
		Offers: c.offers, Market: NewMarket(Deps{Clock: c.clock, Metrics: c.metrics, Ledger: storesOf(l), Config: cfg}, []peer.ID{me.id}),
		MarketTopic: c.topic, Chain: fc, Providers: c.providers,
		PayoutSteps: func(step string) error { c.steps = append(c.steps, step); return nil },
		Alert: func(key, subject, body string) {
			c.alertsMu.Lock()
			defer c.alertsMu.Unlock()
			c.alerts = append(c.alerts, key+": "+subject+": "+body)
		},
	}
	c.restart(t)
	return c
}

// restart builds a new Settlement over the same ledger and chain, as a coordinator that
// crashed and started again would have (nothing kept in memory). Its group commit runs
// until the test ends.
func (c *coordinator) restart(t testing.TB) {
	t.Helper()
	s, err := NewSettlement(c.deps)
	if err != nil {
		t.Fatal(err)
	}
	c.Settlement = s
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.commitLoop(ctx)
}

// stopAt makes the payout run stop at the first time it reaches step, as a crash there
// would; it records the steps seen.
func (c *coordinator) stopAt(step string) {
	stopped := false
	c.SetStepHook(func(name string) error {
		c.steps = append(c.steps, name)
		if name == step && !stopped {
			stopped = true
			return fmt.Errorf("injected stop at %s", step)
		}
		return nil
	})
}

// provider is a provider with its Solana wallet.
type provider struct {
	party
	wallet chain.PrivateKey
}

func newProvider(t testing.TB) provider {
	t.Helper()
	w, err := chain.NewKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return provider{newParty(), w}
}

// ata is the provider's USDC token account.
func (p provider) ata(c *coordinator) chain.PublicKey {
	return chain.ATA(p.wallet.PublicKey(), c.chain.mint)
}

// usdcProvider delivers a provider's signed payout settings (USDC to its wallet, on the
// schedule) to the coordinator, as its node would.
func (c *coordinator) usdcProvider(t testing.TB, schedule string) provider {
	t.Helper()
	p := newProvider(t)
	c.settings(t, p.party, protocol.PayoutSettings{Method: protocol.PayoutUSDC, Schedule: schedule, SolanaAddress: p.wallet.PublicKey().String()})
	return p
}

func (c *coordinator) settings(t testing.TB, p party, ps protocol.PayoutSettings) {
	t.Helper()
	ps.Version, ps.Provider, ps.IssuedAt = 1, p.id.String(), c.clock.Now()
	ps.Seq = uint64(c.clock.Now().UnixNano())
	raw, err := protocol.Seal(protocol.KindPayoutSettings, ps, p.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Serve(context.Background(), p.id, protocol.WalletRequest{Op: "settings", Settings: raw}); err != nil {
		t.Fatal(err)
	}
}

var jobCounter int

// earn books a job the renter "renter" paid for, on one H100 for an hour, charged from a
// countersigned receipt of amount, so that the provider earns amount less the 10%
// commission. It returns the job's ID.
func (c *coordinator) earn(t testing.TB, p party, amount protocol.MicroUSDC) string {
	t.Helper()
	jobCounter++
	job := fmt.Sprintf("%016x", jobCounter)
	l := c.ledger
	if _, _, err := l.Escrow.CreditDeposit(ledger.Deposit{Signature: "fixture-" + job, Renter: "renter", Amount: amount}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Escrow.PlaceHold(ledger.Hold{Job: job, Renter: "renter", Provider: p.id.String(), Amount: amount, CommissionBPS: 1000,
		ExpiresAt: c.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	out, err := l.Escrow.ChargeReports([]ledger.ReportCharge{{Report: ledger.JobReport{Job: job, Provider: p.id.String(), ReceivedAt: c.clock.Now()},
		Countersigned: true, Receipt: fmt.Sprintf("%064x", jobCounter), Renter: "renter", Amount: amount, Model: "H100-80GB", GPUs: 1,
		Seconds: 3600, EndedAt: c.clock.Now()}})
	if err != nil || out[0].Earning == nil {
		t.Fatalf("earning not booked: %+v %v", out, err)
	}
	return job
}

// testNet is a mocknet where the coordinator serves its streams, and peers to call it from.
type testNet struct {
	mn    mocknet.Mocknet
	coord host.Host
	c     *coordinator
}

// serve puts the coordinator on a mocknet with its wallet and job-report handlers.
func (c *coordinator) serve(t testing.TB) *testNet {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	h, err := mn.AddPeer(c.key, ma.StringCast("/ip4/10.0.0.1/tcp/4001"))
	if err != nil {
		t.Fatal(err)
	}
	h.SetStreamHandler(libp2pprotocol.ID(protocol.WalletProtocol), c.HandleWallet)
	h.SetStreamHandler(libp2pprotocol.ID(protocol.JobReportProtocol), c.HandleJobReport)
	return &testNet{mn: mn, coord: h, c: c}
}

// join adds a peer at an IPv4 address, linked to the coordinator.
func (n *testNet) join(t testing.TB, p party, ip string) host.Host {
	t.Helper()
	h, err := n.mn.AddPeer(p.key, ma.StringCast("/ip4/"+ip+"/tcp/4001"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.mn.LinkPeers(h.ID(), n.coord.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := n.mn.ConnectPeers(h.ID(), n.coord.ID()); err != nil {
		t.Fatal(err)
	}
	return h
}

// ask sends one frame to the coordinator on a protocol and reads its answer.
func (n *testNet) ask(t testing.TB, from host.Host, proto string, req, resp any) {
	t.Helper()
	s, err := from.NewStream(context.Background(), n.coord.ID(), libp2pprotocol.ID(proto))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Reset()
	// A server that refuses at once answers without reading the request: the write is
	// not waited for, the answer is.
	go func() {
		protocol.WriteJSONFrame(s, req)
		s.CloseWrite()
	}()
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxWalletResponse, resp); err != nil {
		t.Fatal(err)
	}
}

// wallet sends one wallet request and returns the answer.
func (n *testNet) wallet(t testing.TB, from host.Host, req protocol.WalletRequest) protocol.WalletResponse {
	t.Helper()
	var resp protocol.WalletResponse
	n.ask(t, from, protocol.WalletProtocol, req, &resp)
	return resp
}

// storesOf hands money every store of a test's ledger that node.New hands it.
func storesOf(l *ledger.Ledger) Stores {
	return Stores{Jobs: l.Jobs, Wallet: l.Wallet, Own: l.Provider, Escrow: l.Escrow, Payouts: l.Payouts, Reliability: l.Reliability}
}
