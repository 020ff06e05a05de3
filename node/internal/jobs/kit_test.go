package jobs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// What the tests of this package build: providers and renters from their Deps, with an
// in-memory ledger, a fake clock, simulated GPUs, a fake sandbox and fakes of the small
// interfaces; peers that talk do so over libp2p's mock network.

// t0 is when every test's clock starts.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newKey(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return k, id
}

// newLedger opens an in-memory ledger and returns its job store, the only one jobs use.
func newLedger(t *testing.T) *ledger.JobStore {
	t.Helper()
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Jobs
}

func newMetrics() *metrics.Metrics {
	return metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
}

// testNet is a mock libp2p network: its peers reach each other in memory.
type testNet struct {
	mn   mocknet.Mocknet
	next int
}

func newTestNet(t *testing.T) *testNet {
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	return &testNet{mn: mn}
}

// peer adds a peer with its own key, on a network of its own (10.0.0.N).
func (n *testNet) peer(t *testing.T) *p2p.Peer {
	t.Helper()
	key, id := newKey(t)
	n.next++
	h, err := n.mn.AddPeer(key, ma.StringCast(fmt.Sprintf("/ip4/10.0.0.%d/tcp/4001", n.next)))
	if err != nil {
		t.Fatal(err)
	}
	return &p2p.Peer{Host: h, Key: key, ID: id}
}

// connect links every peer added so far to every other.
func (n *testNet) connect(t *testing.T) {
	t.Helper()
	if err := n.mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := n.mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
}

// provider is a job runner with what it was built from.
type provider struct {
	*Runner
	rt      *fakeRuntime
	clk     *clock.Fake
	pub     *fakePublisher
	reports *fakeReporter
	sim     []bench.GPUInfo // the simulated GPUs its probe finds
}

// testJobsConfig is a provider's [jobs] section for the tests.
func testJobsConfig() config.JobsConfig {
	return config.JobsConfig{ProposalsPerMinute: 3, MaxImageMB: 100, ImageCacheGB: 1, MemoryMBPerGPU: 1024, CPUMillisPerGPU: 2000,
		Pids: 100, ScratchMB: 64, Retention: config.Duration{Duration: 24 * time.Hour}, MaxInputMB: 64, InputCacheGB: 1}
}

// newProvider builds a provider over simulated GPUs with a fake sandbox, open for jobs,
// offering each GPU model at one USDC per GPU-hour; edit changes its Deps first. p is its
// peer (nil: a key alone, for tests without streams).
func newProvider(t *testing.T, p *p2p.Peer, gpus []bench.SimulatedGPU, edit ...func(*Deps)) *provider {
	t.Helper()
	if p == nil {
		key, id := newKey(t)
		p = &p2p.Peer{ID: id, Key: key}
	}
	clk := clock.NewFake(t0)
	probe := bench.NewSimulated(p.ID.String(), gpus)
	sim, _ := probe.GPUs()
	pv := &provider{rt: newFakeRuntime(), clk: clk, reports: &fakeReporter{}, sim: sim}
	counts := map[string]int{}
	var models []string
	for _, g := range gpus {
		if counts[g.Model] == 0 {
			models = append(models, g.Model)
		}
		counts[g.Model]++
	}
	offer := &protocol.SignedOffer{Signer: p.ID, Offer: protocol.Offer{Provider: p.ID.String(), ExpiresAt: t0.Add(24 * time.Hour), Egress: protocol.EgressPublicOnly}}
	for _, m := range models {
		offer.Offer.GPUs = append(offer.Offer.GPUs, protocol.OfferGPUs{Model: m, Count: counts[m], PricePerGPUHour: 1_000_000, Simulated: true})
	}
	pv.pub = &fakePublisher{open: true, offer: offer}
	d := Deps{Base: subsystem.Base{Peer: p, Clock: clk, Log: quiet(), Metrics: newMetrics()}, Ledger: newLedger(t), Jobs: testJobsConfig(),
		Runtime: pv.rt, Dir: filepath.Join(t.TempDir(), "jobs"),
		Probe:     func() (bench.Probe, error) { return bench.NewSimulated(p.ID.String(), gpus), nil },
		Publisher: pv.pub, Reports: pv.reports}
	for _, e := range edit {
		e(&d)
	}
	r, err := NewRunner(d)
	if err != nil {
		t.Fatal(err)
	}
	pv.Runner = r
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.StopAll(ctx, "test over")
	})
	return pv
}

// serve registers the provider's stream handlers on its peer.
func (pv *provider) serve() {
	pv.peer.Handle(protocol.JobProtocol, pv.HandleJob)
	pv.peer.Handle(protocol.JobControlProtocol, pv.HandleControl)
	pv.peer.Handle(protocol.JobInputProtocol, pv.HandleInput)
}

// job reads a job from the provider's ledger.
func (pv *provider) job(t *testing.T, id string) ledger.Job {
	t.Helper()
	j, err := pv.ledger.GetJob(id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// leaseJob records a job leased to renter on n GPUs of model, at the offer's price for
// maxSeconds, as HandleJob does once the renter countersigned.
func (pv *provider) leaseJob(t *testing.T, id string, renter peer.ID, model string, n int, maxSeconds int64) (*protocol.Proposal, []byte, []sandbox.GPU) {
	t.Helper()
	p := &protocol.Proposal{Version: protocol.JobVersion, Job: id, Renter: renter.String(), Provider: pv.peer.ID.String(), IssuedAt: pv.clk.Now(),
		Model: model, GPUs: n, MaxSeconds: maxSeconds, MaxPrice: 1_000_000, Image: protocol.Image{Ref: "example.org/job:1"}}
	lease, gpus, _, err := pv.decide(p, []byte("proposal"), pv.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	now := pv.clk.Now()
	if err := pv.ledger.CreateJob(ledger.Job{ID: id, Side: "provider", Peer: renter.String(), State: ledger.JobLeased, CreatedAt: now, UpdatedAt: now,
		Lease: lease, GPUs: uuids}); err != nil {
		t.Fatal(err)
	}
	return p, lease, gpus
}

// startJob leases a job and starts it in the fake sandbox, as HandleJob does.
func (pv *provider) startJob(t *testing.T, id string, renter peer.ID, model string, n int, maxSeconds int64) []sandbox.GPU {
	t.Helper()
	p, lease, gpus := pv.leaseJob(t, id, renter, model, n, maxSeconds)
	pv.rt.addImage(p.Image.Ref)
	if err := pv.start(p, lease, jobImage{Ref: p.Image.Ref}, gpus); err != nil {
		t.Fatal(err)
	}
	return gpus
}

// ended waits until the provider's ledger shows the job ended (its watcher wrote the
// receipt) and returns it with its receipt.
func (pv *provider) ended(t *testing.T, id string) (ledger.Job, *protocol.Receipt) {
	t.Helper()
	var j ledger.Job
	eventually(t, "job "+id+" ended", func() bool { j = pv.job(t, id); return j.State == ledger.JobEnded })
	rec, err := openReceipt(j.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	return j, rec
}

// eventually waits for what a goroutine of the code under test does.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// waitTimer waits until a loop of the code under test waits on the fake clock.
func waitTimer(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d timer(s) set", n), func() bool { return clk.Waiters() >= n })
}

// fakePublisher is a provider's offer.
type fakePublisher struct {
	mu    sync.Mutex
	open  bool
	offer *protocol.SignedOffer
}

func (f *fakePublisher) Current() *protocol.SignedOffer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offer
}

func (f *fakePublisher) Open(time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

// fakeReporter records the jobs reported to the coordinator.
type fakeReporter struct {
	mu   sync.Mutex
	jobs []ledger.Job
}

func (f *fakeReporter) ReportJob(_ context.Context, j ledger.Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, j)
}

func (f *fakeReporter) reported() []ledger.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ledger.Job(nil), f.jobs...)
}

type attestations struct{ a *protocol.SignedAttestation }

func (a attestations) Latest() *protocol.SignedAttestation { return a.a }

// fakeRuntime is a sandbox that runs nothing: a job runs from Start until Kill or end,
// images are names, and every call is recorded.
type fakeRuntime struct {
	mu      sync.Mutex
	images  map[string]bool
	digests map[string]string // the manifest digest each image name holds
	// squat moves an image name to other content (a digest) at the next start by that
	// name, as another renter's import taking the name would.
	squat    map[string]string
	imports  int
	pulls    []string
	pruned   []int64
	removed  []string
	jobs     map[string]*fakeJob
	onStart  func(sandbox.Spec) // writes what the job would (its log, its output)
	startErr error
	pullGate chan struct{} // when set, a pull waits until it is closed (a pull that takes long)
	// listening are the ports every running job serves: Dial connects to the address of
	// a test listener standing for it.
	listening map[int]string
}

type fakeJob struct {
	spec sandbox.Spec
	done chan struct{}
	exit sandbox.Exit
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{images: map[string]bool{}, digests: map[string]string{}, squat: map[string]string{}, jobs: map[string]*fakeJob{}}
}

func (f *fakeRuntime) addImage(ref string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[ref] = true
}

func (f *fakeRuntime) ImportImage(_ context.Context, archive io.Reader) (string, string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, archive); err != nil {
		return "", "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	ref := "import/" + sum[:12]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[ref], f.digests[ref] = true, "sha256:"+sum
	f.imports++
	return ref, "sha256:" + sum, nil
}

func (f *fakeRuntime) PullImage(ctx context.Context, ref string) (string, error) {
	f.mu.Lock()
	gate := f.pullGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[ref], f.digests[ref] = true, "sha256:00"
	f.pulls = append(f.pulls, ref)
	return "sha256:00", nil
}

func (f *fakeRuntime) ImageSize(_ context.Context, ref string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.images[ref] {
		return 0, sandbox.ErrImageNotFound
	}
	return 1 << 20, nil
}

func (f *fakeRuntime) Start(_ context.Context, spec sandbox.Spec) error {
	f.mu.Lock()
	if f.startErr != nil {
		f.mu.Unlock()
		return f.startErr
	}
	if !f.images[spec.Image] {
		f.mu.Unlock()
		return sandbox.ErrImageNotFound
	}
	if d, ok := f.squat[spec.Image]; ok {
		f.digests[spec.Image] = d
		delete(f.squat, spec.Image)
	}
	if spec.ImageDigest != "" && spec.ImageDigest != f.digests[spec.Image] {
		f.mu.Unlock()
		return sandbox.ErrImageChanged
	}
	f.jobs[spec.ID] = &fakeJob{spec: spec, done: make(chan struct{})}
	onStart := f.onStart
	f.mu.Unlock()
	if onStart != nil {
		onStart(spec)
	}
	return nil
}

// run adds a job the sandbox holds running, as found after a restart.
func (f *fakeRuntime) run(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs[id] = &fakeJob{spec: sandbox.Spec{ID: id}, done: make(chan struct{})}
}

// end ends a running job as the sandbox would.
func (f *fakeRuntime) end(id string, exit sandbox.Exit) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	if j == nil {
		return false
	}
	select {
	case <-j.done:
		return false
	default:
	}
	j.exit = exit
	close(j.done)
	return true
}

func (f *fakeRuntime) spec(id string) (sandbox.Spec, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	if j == nil {
		return sandbox.Spec{}, false
	}
	return j.spec, true
}

func (f *fakeRuntime) Wait(ctx context.Context, id string) (sandbox.Exit, error) {
	f.mu.Lock()
	j := f.jobs[id]
	f.mu.Unlock()
	if j == nil {
		return sandbox.Exit{}, sandbox.ErrNotFound
	}
	select {
	case <-j.done:
		return j.exit, nil
	case <-ctx.Done():
		return sandbox.Exit{}, ctx.Err()
	}
}

func (f *fakeRuntime) Kill(_ context.Context, id, reason string) error {
	f.mu.Lock()
	_, ok := f.jobs[id]
	f.mu.Unlock()
	if !ok {
		return sandbox.ErrNotFound
	}
	f.end(id, sandbox.Exit{Code: 137, Reason: reason})
	return nil
}

// killedWith says why a job was ended ("" while it runs).
func (f *fakeRuntime) killedWith(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := f.jobs[id]; j != nil {
		return j.exit.Reason
	}
	return ""
}

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
	if _, ok := f.jobs[id]; !ok {
		return sandbox.ErrNotFound
	}
	delete(f.jobs, id)
	return nil
}

func (f *fakeRuntime) wasRemoved(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.removed {
		if r == id {
			return true
		}
	}
	return false
}

func (f *fakeRuntime) PruneImages(_ context.Context, maxBytes int64) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pruned = append(f.pruned, maxBytes)
	return nil, nil
}

func (f *fakeRuntime) List(context.Context) ([]sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Info
	for id, j := range f.jobs {
		in := sandbox.Info{ID: id, Running: true}
		select {
		case <-j.done:
			in.Running, in.Exit = false, &j.exit
		default:
		}
		out = append(out, in)
	}
	return out, nil
}

func (f *fakeRuntime) Close() error { return nil }

func (f *fakeRuntime) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	f.mu.Lock()
	j, addr := f.jobs[id], f.listening[port]
	f.mu.Unlock()
	if j == nil {
		return nil, sandbox.ErrNotFound
	}
	select {
	case <-j.done:
		return nil, sandbox.ErrNotFound
	default:
	}
	if addr == "" {
		return nil, sandbox.ErrPortClosed
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// listen has every running job serve port with a test listener.
func (f *fakeRuntime) listen(port int, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listening == nil {
		f.listening = map[int]string{}
	}
	f.listening[port] = addr
}

// renter is a renter's side with what it was built from.
type renter struct {
	*Renter
	offers *fakeOffers
	escrow *fakeEscrow
}

// newRenter builds a renter on peer p, sharing clk with the providers it rents from.
func newRenter(t *testing.T, p *p2p.Peer, clk clock.Clock) *renter {
	t.Helper()
	if p == nil {
		key, id := newKey(t)
		p = &p2p.Peer{ID: id, Key: key}
	}
	rn := &renter{offers: &fakeOffers{byPeer: map[peer.ID]*protocol.SignedOffer{}}, escrow: &fakeEscrow{}}
	rn.Renter = NewRenter(RenterDeps{Base: subsystem.Base{Peer: p, Clock: clk, Log: quiet(), Metrics: newMetrics()}, Ledger: newLedger(t),
		Offers: rn.offers, Escrow: rn.escrow, CheckpointInterval: time.Minute})
	return rn
}

// knows makes the renter hold a provider's offer, certified by coordinator, with a search
// row ranking it.
func (rn *renter) knows(so *protocol.SignedOffer, coordinator peer.ID) {
	rn.offers.mu.Lock()
	defer rn.offers.mu.Unlock()
	c := *so
	c.Cert = &protocol.SignedCertificate{Signer: coordinator, Certificate: protocol.Certificate{ExpiresAt: t0.Add(30 * 24 * time.Hour)}}
	rn.offers.byPeer[so.Signer] = &c
	for _, g := range so.Offer.GPUs {
		rn.offers.rows = append(rn.offers.rows, api.OfferRow{ID: protocol.OfferID(so.Signer, g.Model), Provider: so.Signer.String(), Model: g.Model,
			GPUs: g.Count, PriceUSDC: g.PricePerGPUHour.String(), PriceMicroUSDC: g.PricePerGPUHour, Tier: protocol.TierCommunity})
	}
}

// fakeOffers is the renter's catalogue: the offers it holds, and search rows in order.
type fakeOffers struct {
	mu       sync.Mutex
	byPeer   map[peer.ID]*protocol.SignedOffer
	rows     []api.OfferRow
	searches []api.SearchFilter
}

func (f *fakeOffers) Get(p peer.ID) (*protocol.SignedOffer, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byPeer[p], t0
}

func (f *fakeOffers) Search(_ context.Context, flt api.SearchFilter) ([]api.OfferRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.searches = append(f.searches, flt)
	var out []api.OfferRow
	for _, r := range f.rows {
		if r.Model == flt.Model && r.GPUs >= flt.MinGPUs && (r.Unbenchmarked == "" || flt.Unbenchmarked) {
			out = append(out, r)
		}
	}
	return out, nil
}

// fakeEscrow is the renter's side of escrow: holds signed by a coordinator key (none
// without one), and every release, dispute and report recorded.
type fakeEscrow struct {
	mu          sync.Mutex
	coordinator crypto.PrivKey // nil: no account, no hold
	released    []string
	retried     []string
	disputes    []ledger.Job
	abandoned   []ledger.Job
	abandonErr  error
	extended    []protocol.EscrowHold // the holds raised (extend_test.go); extendErr refuses
	extendErr   error
}

func (f *fakeEscrow) RequestHold(_ context.Context, p protocol.Proposal, coordinator peer.ID) ([]byte, error) {
	f.mu.Lock()
	key := f.coordinator
	f.mu.Unlock()
	if key == nil {
		return nil, fmt.Errorf("%w: no account at %s", api.ErrNotFound, coordinator)
	}
	id, _ := peer.IDFromPrivateKey(key)
	return protocol.Seal(protocol.KindEscrowHold, protocol.EscrowHold{Version: protocol.SettlementVersion, Coordinator: id.String(),
		Renter: p.Renter, Provider: p.Provider, Job: p.Job, Amount: protocol.HoldAmount(p.MaxPrice, p.GPUs, p.MaxSeconds),
		IssuedAt: p.IssuedAt, ExpiresAt: p.IssuedAt.Add(time.Duration(p.MaxSeconds)*time.Second + 2*protocol.HoldGrace)}, key)
}

func (f *fakeEscrow) ReleaseHold(_ context.Context, job, _ string) (api.BalanceView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, job)
	return api.BalanceView{}, nil
}

func (f *fakeEscrow) ReleaseAfterFailure(job string, _ peer.ID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retried = append(f.retried, job)
}

func (f *fakeEscrow) Dispute(_ context.Context, j ledger.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disputes = append(f.disputes, j)
	return nil
}

func (f *fakeEscrow) ReportAbandoned(_ context.Context, j ledger.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abandoned = append(f.abandoned, j)
	return f.abandonErr
}

// imageArchive writes a minimal OCI layout archive (what sandbox.CheckImageArchive takes)
// holding note, and returns its path.
func imageArchive(t *testing.T, note string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{
		"oci-layout": `{"imageLayoutVersion":"1.0.0"}`,
		"index.json": `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","annotations":{"note":"` + note + `"}}]}`,
	} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// market is a provider serving its streams and a renter that holds its offer, on one
// mock network and one fake clock; the renter's escrow holds are signed by the
// coordinator the provider trusts.
type market struct {
	net      *testNet
	pv       *provider
	rn       *renter
	coordKey crypto.PrivKey
	coord    peer.ID
}

// newMarket builds a market whose provider has n L4 GPUs; edit changes its Deps first.
func newMarket(t *testing.T, n int, edit ...func(*Deps)) *market {
	t.Helper()
	m := &market{net: newTestNet(t)}
	m.coordKey, m.coord = newKey(t)
	gpus := make([]bench.SimulatedGPU, n)
	for i := range gpus {
		gpus[i].Model = "L4-24GB"
	}
	m.pv = newProvider(t, m.net.peer(t), gpus, append([]func(*Deps){func(d *Deps) { d.Trusted = []peer.ID{m.coord} }}, edit...)...)
	m.pv.rt.onStart = func(spec sandbox.Spec) {
		os.WriteFile(spec.LogPath, []byte("hello from "+spec.ID+"\n"), 0o600)
		os.WriteFile(filepath.Join(spec.OutputDir, "answer.txt"), []byte("42\n"), 0o600)
	}
	m.pv.serve()
	m.rn = m.renter(t)
	m.rn.escrow.coordinator = m.coordKey
	return m
}

// renter adds a renter to the market that holds the provider's offer.
func (m *market) renter(t *testing.T) *renter {
	t.Helper()
	rn := newRenter(t, m.net.peer(t), m.pv.clk)
	rn.knows(m.pv.pub.offer, m.coord)
	m.net.connect(t)
	return rn
}

// request is a job on one of the provider's GPUs for an hour, running image.
func (m *market) request(image string) api.JobRequest {
	return api.JobRequest{Provider: m.pv.peer.ID.String(), GPUs: 1, MaxSeconds: 3600, ImageArchive: image, Args: []string{"run", "it"}, Env: []string{"SEED=7"}}
}

// run proposes a job from the market's renter and returns it started.
func (m *market) run(t *testing.T, req api.JobRequest) api.JobView {
	t.Helper()
	v, err := m.rn.ProposeJob(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
