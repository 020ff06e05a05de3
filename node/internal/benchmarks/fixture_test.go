package benchmarks

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// The package's tests build a coordinator's side and providers' runners from their Deps:
// libp2p hosts on loopback (the bench-net and bench-challenge streams are real), in-memory
// ledgers, simulated GPUs, one fake clock, and fakes of the small interfaces.

// testStart is the fake clock's start: every test's challenges, receipts and attestations
// are dated from it.
var testStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestPeer is a node's peer on a libp2p host on 127.0.0.1 (no DHT, no gossip: the
// benchmarks need streams only).
func newTestPeer(t testing.TB) *p2p.Peer {
	t.Helper()
	return newTestPeerOn(t, "127.0.0.1")
}

// newTestPeerOn is a peer listening, and so dialling, from ip (127.0.0.2 and up are
// networks of their own to p2p.NetworkOf; 127.0.0.1 is the host's own).
func newTestPeerOn(t testing.TB, ip string) *p2p.Peer {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.Identity(sk), libp2p.ListenAddrStrings("/ip4/"+ip+"/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &p2p.Peer{Host: h, Key: sk, ID: h.ID()}
}

// connect has a dial b (and so know its address).
func connect(t testing.TB, a, b *p2p.Peer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Host.Connect(ctx, peer.AddrInfo{ID: b.ID, Addrs: b.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func newTestLedger(t testing.TB) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// catalogues is the node's model book as the benchmarks see it: the compiled-in
// catalogue, and the catalogues given to it (by Take, or by a test).
type catalogues struct {
	mu     sync.Mutex
	held   map[peer.ID][]*protocol.SignedModelCatalogue
	taken  int
	source string
}

func (c *catalogues) Take(raw []byte, source string) error {
	sc, err := protocol.CheckModelCatalogue(raw, testStart, nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if latest := c.latest(sc.Signer); latest != nil && latest.Seq >= sc.Seq {
		return protocol.ErrReplay
	}
	c.add(sc)
	c.taken++
	c.source = source
	return nil
}

func (c *catalogues) add(sc *protocol.SignedModelCatalogue) {
	if c.held == nil {
		c.held = map[peer.ID][]*protocol.SignedModelCatalogue{}
	}
	c.held[sc.Signer] = append(c.held[sc.Signer], sc)
}

func (c *catalogues) Lookup(coordinator peer.ID, seq uint64) *protocol.ModelCatalogue {
	if seq == 0 {
		return protocol.FirstModels()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sc := range c.held[coordinator] {
		if sc.Seq == seq {
			return &sc.ModelCatalogue
		}
	}
	return nil
}

func (c *catalogues) Latest(coordinator peer.ID) *protocol.SignedModelCatalogue {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest(coordinator)
}

func (c *catalogues) latest(coordinator peer.ID) *protocol.SignedModelCatalogue {
	all := c.held[coordinator]
	if len(all) == 0 {
		return nil
	}
	return all[len(all)-1]
}

// signCatalogue signs a model catalogue of seq for the coordinator of key: the compiled-in
// one's entries that keep holds.
func signCatalogue(t testing.TB, key crypto.PrivKey, seq uint64, keep func(e protocol.ModelEntry) bool) *protocol.SignedModelCatalogue {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(key)
	cat := protocol.ModelCatalogue{Version: protocol.ModelsVersion, Coordinator: id.String(), Seq: seq, IssuedAt: testStart}
	for _, e := range protocol.FirstModels().Models {
		if keep(e) {
			cat.Models = append(cat.Models, e)
		}
	}
	raw, err := protocol.Seal(protocol.KindModelCatalogue, cat, key)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := protocol.CheckModelCatalogue(raw, testStart, protocol.NewTrust(id))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// leases are the job runner's leases: the GPUs leased, and what the latest probe found.
type leases struct {
	mu     sync.Mutex
	busy   map[string]bool
	probed []bench.GPUInfo
}

func (l *leases) Busy(uuid string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.busy[uuid]
}

func (l *leases) Probed(gpus []bench.GPUInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.probed = gpus
}

func (l *leases) lease(uuid string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy == nil {
		l.busy = map[string]bool{}
	}
	l.busy[uuid] = true
}

// poker counts the publisher's wake-ups.
type poker struct {
	mu sync.Mutex
	n  int
}

func (p *poker) Poke() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
}

func (p *poker) pokes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// links is the coordinator's book of providers' link measurements.
type links struct {
	mu   sync.Mutex
	kept map[string]ledger.LinkMeasurement
}

func (l *links) SetLinkMeasurement(m ledger.LinkMeasurement) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kept == nil {
		l.kept = map[string]ledger.LinkMeasurement{}
	}
	l.kept[m.Provider] = m
	return nil
}

func (l *links) of(provider peer.ID) (ledger.LinkMeasurement, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.kept[provider.String()]
	return m, ok
}

// reviews are the coordinator's review queue and the revocations it knows.
type reviews struct {
	mu      sync.Mutex
	apps    map[string]ledger.Application
	revoked map[string]bool // providers whose certificates are revoked
}

func (r *reviews) GetApplication(id string) (ledger.Application, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.apps[id]
	if !ok {
		return a, ledger.ErrNotFound
	}
	return a, nil
}

func (r *reviews) RevocationOf(c *protocol.SignedCertificate) *protocol.SignedRevocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked[c.Provider] {
		return &protocol.SignedRevocation{}
	}
	return nil
}

// apply puts an application of provider with status in the queue, under id.
func (r *reviews) apply(id string, provider peer.ID, status string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.apps == nil {
		r.apps = map[string]ledger.Application{}
	}
	r.apps[id] = ledger.Application{ID: id, Provider: provider.String(), Status: status}
}

func (r *reviews) revoke(provider peer.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked == nil {
		r.revoked = map[string]bool{}
	}
	r.revoked[provider.String()] = true
}

// alerts records what the runner told the operator through the alerts.
type alerts struct {
	mu   sync.Mutex
	sent []string // key: subject
}

func (a *alerts) alert(key, subject, _ string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent = append(a.sent, key+": "+subject)
}

func (a *alerts) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.sent...)
}

// testCoordinator is a coordinator's side of the benchmarks on its own host.
type testCoordinator struct {
	*Coordinator
	peer    *p2p.Peer
	clock   clock.Clock
	models  *catalogues
	links   *links
	reviews *reviews
}

// lenientMinimum is a listing minimum that loopback on a busy machine always passes.
var lenientMinimum = protocol.HostMinimum{Name: "listing", UpMbps: 1, DownMbps: 1, MaxRTTMilli: 10_000}

// newTestCoordinator starts a coordinator's side whose streams and turns are not rationed:
// a provider's tests run it many times a minute.
func newTestCoordinator(t testing.TB, clk clock.Clock) *testCoordinator {
	t.Helper()
	tc := newRationedCoordinator(t, clk)
	tc.setMinimum(lenientMinimum)
	return tc
}

// newRationedCoordinator starts a coordinator's side with its limits as they are.
func newRationedCoordinator(t testing.TB, clk clock.Clock) *testCoordinator {
	t.Helper()
	tc := &testCoordinator{peer: newTestPeer(t), clock: clk, models: &catalogues{}, links: &links{}, reviews: &reviews{}}
	tc.Coordinator = tc.build(lenientMinimum)
	tc.peer.Handle(protocol.BenchNetProtocol, tc.HandleBenchNet)
	tc.peer.Handle(protocol.BenchNetProtocolV1, tc.HandleBenchNetV1)
	return tc
}

func (tc *testCoordinator) build(m protocol.HostMinimum) *Coordinator {
	return NewCoordinator(CoordinatorDeps{Base: subsystem.Base{Peer: tc.peer, Clock: tc.clock, Metrics: metrics.New(func() float64 { return 0 }, func() float64 { return 0 }), Log: quietLogger()},
		Trust: protocol.NewTrust(tc.peer.ID), Minimum: m, Links: tc.links, Models: tc.models,
		Revocations: tc.reviews, Applications: tc.reviews})
}

// setMinimum has the coordinator hold its providers to m from the next stream on, without
// rationing their streams and turns (a new coordinator's side on the same host).
func (tc *testCoordinator) setMinimum(m protocol.HostMinimum) {
	c := tc.build(m)
	c.rate, c.turns = p2p.NewPeerRate(1000), p2p.NewPeerRateOver(1000, time.Hour)
	tc.Coordinator = c
	tc.peer.Handle(protocol.BenchNetProtocol, c.HandleBenchNet)
}

// testProvider is a provider's benchmark runner over simulated GPUs, on its own host,
// connected to its coordinator.
type testProvider struct {
	*Runner
	peer      *p2p.Peer
	ledger    *ledger.Ledger
	clock     *clock.Fake
	leases    *leases
	publisher *poker
	alerts    *alerts
	models    *catalogues

	mu     sync.Mutex
	gpus   []bench.SimulatedGPU
	driver string // reported instead of the simulated driver's version, when set
}

// newTestProvider starts a provider that holds its coordinator's certificate.
func newTestProvider(t testing.TB, clk *clock.Fake, coord *testCoordinator, gpus ...bench.SimulatedGPU) *testProvider {
	t.Helper()
	tp := newUncertifiedProvider(t, clk, coord, gpus...)
	tp.certify(t, coord)
	return tp
}

// certify gives the provider a certificate of coord, valid from the fake clock's start.
func (tp *testProvider) certify(t testing.TB, coord *testCoordinator) {
	t.Helper()
	cert := recordtest.Certificate(t, coord.peer.Key, tp.peer.ID, []protocol.CertifiedGPU{{Model: "H100-80GB", Count: 2}}, testStart)
	if err := tp.ledger.Applicant.SetOwnCertificate(cert); err != nil {
		t.Fatal(err)
	}
}

// newUncertifiedProvider starts a provider that holds no certificate.
func newUncertifiedProvider(t testing.TB, clk *clock.Fake, coord *testCoordinator, gpus ...bench.SimulatedGPU) *testProvider {
	t.Helper()
	p := newTestPeer(t)
	connect(t, p, coord.peer)
	tp := &testProvider{peer: p, ledger: newTestLedger(t), clock: clk, leases: &leases{}, publisher: &poker{}, alerts: &alerts{},
		models: &catalogues{}, gpus: gpus}
	tp.Runner = NewRunner(tp.deps(t, coord))
	p.Handle(protocol.BenchChallengeProtocol, tp.HandleBenchChallenge)
	return tp
}

func (tp *testProvider) deps(t testing.TB, coord *testCoordinator) Deps {
	return Deps{Base: subsystem.Base{Peer: tp.peer, Clock: tp.clock, Log: quietLogger()}, Own: tp.ledger.Provider, History: tp.ledger.History, Notifications: tp.ledger.Notifications,
		Serials: tp.ledger.Serials, Applicant: tp.ledger.Applicant, Trusted: []peer.ID{coord.peer.ID},
		Bench:    config.BenchConfig{Interval: config.Duration{Duration: 24 * time.Hour}, StorageMB: 1, NetworkMB: 1},
		Provider: config.ProviderConfig{Region: "eu-west", GPUs: []config.GPUConfig{{Model: "H100-80GB", Count: 2, VRAMGB: 80, PriceUSDC: "2.00", Simulated: true}}},
		Probe:    tp.probe, Dir: t.TempDir(), Models: tp.models, Jobs: tp.leases, Publisher: tp.publisher, Alert: tp.alerts.alert}
}

// setGPUs changes what the probe finds from the next probe on.
func (tp *testProvider) setGPUs(gpus ...bench.SimulatedGPU) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.gpus = gpus
}

// setDriver has the probe report another driver version.
func (tp *testProvider) setDriver(v string) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.driver = v
}

func (tp *testProvider) probe() (bench.Probe, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return driverProbe{bench.NewSimulated(tp.peer.ID.String(), append([]bench.SimulatedGPU(nil), tp.gpus...)), tp.driver}, nil
}

// driverProbe is a simulated probe that reports another driver version.
type driverProbe struct {
	*bench.Simulated
	driver string
}

func (p driverProbe) GPUs() ([]bench.GPUInfo, error) {
	gpus, err := p.Simulated.GPUs()
	for i := range gpus {
		if p.driver != "" {
			gpus[i].DriverVersion = p.driver
		}
	}
	return gpus, err
}

// run runs the benchmarks and fails the test when the run fails.
func (tp *testProvider) run(t testing.TB) *protocol.SignedAttestation {
	t.Helper()
	a, err := tp.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// notices are the subjects of the notifications the provider's ledger holds.
func (tp *testProvider) notices(t testing.TB) []string {
	t.Helper()
	ns, err := tp.ledger.Notifications.Notifications()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range ns {
		out = append(out, n.Subject+" | "+n.Body)
	}
	return out
}
