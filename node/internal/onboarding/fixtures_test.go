package onboarding

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// The onboarding tests build a coordinator (and applicants) from their Deps: an in-memory
// ledger, a fake clock, the fakes below, and a real libp2p host on loopback (a decision
// pushes its notification over a stream).

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// t0 is a Monday morning, the tests' start.
var t0 = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)

func newTestLedger(t testing.TB) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

type acceptAll struct{}

func (acceptAll) Validate(string, []byte) error        { return nil }
func (acceptAll) Select(string, [][]byte) (int, error) { return 0, nil }

// newTestPeer starts a peer on loopback with key sk (a fresh one when nil).
func newTestPeer(t testing.TB, sk crypto.PrivKey) *p2p.Peer {
	t.Helper()
	if sk == nil {
		sk, _ = recordtest.NewKey()
	}
	p, err := p2p.New(p2p.Options{Key: sk, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, OfferValidator: acceptAll{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// connect makes a know b's address.
func connect(t testing.TB, a, b *p2p.Peer) {
	t.Helper()
	if err := a.Host.Connect(context.Background(), peer.AddrInfo{ID: b.ID, Addrs: b.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// testRevocations is the trust store's part onboarding uses: the revocations it knows.
type testRevocations struct {
	clock clock.Clock
	mu    sync.Mutex
	revs  []*protocol.SignedRevocation
	fail  error
}

func (r *testRevocations) RevocationOf(c *protocol.SignedCertificate) *protocol.SignedRevocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.revs {
		if x.Revokes(c) {
			return x
		}
	}
	return nil
}

func (r *testRevocations) TakeRevocation(raw []byte, source string) error {
	if r.fail != nil {
		return r.fail
	}
	rev, err := protocol.CheckRevocation(raw, r.clock.Now(), nil)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.revs = append(r.revs, rev)
	r.mu.Unlock()
	return nil
}

func (r *testRevocations) all() []*protocol.SignedRevocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*protocol.SignedRevocation(nil), r.revs...)
}

// testTopic records what is published on it.
type testTopic struct {
	mu   sync.Mutex
	sent [][]byte
}

func (p *testTopic) Publish(_ context.Context, data []byte) error {
	p.mu.Lock()
	p.sent = append(p.sent, data)
	p.mu.Unlock()
	return nil
}

func (p *testTopic) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sent)
}

// testCoord is a coordinator's onboarding with what it was built from.
type testCoord struct {
	*Coordinator
	clock   *clock.Fake
	ledger  *ledger.Ledger
	peer    *p2p.Peer
	revs    *testRevocations
	gossip  *testTopic
	metrics *metrics.Metrics
	cfg     config.CoordinatorConfig
}

// newTestCoordinator builds a coordinator with the default configuration, changed by
// configure when given.
func newTestCoordinator(t testing.TB, configure func(*config.CoordinatorConfig)) *testCoord {
	t.Helper()
	cfg := config.Defaults(config.RoleCoordinator).Coordinator
	if configure != nil {
		configure(&cfg)
	}
	clk := clock.NewFake(t0)
	tc := &testCoord{clock: clk, ledger: newTestLedger(t), peer: newTestPeer(t, nil),
		revs: &testRevocations{clock: clk}, gossip: &testTopic{}, metrics: metrics.New(nil, nil), cfg: cfg}
	tc.restart(t)
	return tc
}

// restart builds the coordinator again on the same ledger, clock and peer (a restart).
func (tc *testCoord) restart(t testing.TB) {
	t.Helper()
	c, err := NewCoordinator(CoordinatorDeps{Base: subsystem.Base{Peer: tc.peer, Clock: tc.clock, Log: quietLogger(), Metrics: tc.metrics}, Applications: tc.ledger.Applications, Links: tc.ledger.Links, Serials: tc.ledger.Serials,
		Config: tc.cfg, Trust: protocol.NewTrust(tc.peer.ID), Revocations: tc.revs, RevocationsTopic: tc.gossip})
	if err != nil {
		t.Fatal(err)
	}
	tc.Coordinator = c
}

// testApplicant is a provider's key and the applications it signs.
type testApplicant struct {
	key crypto.PrivKey
	id  peer.ID
	seq uint64
}

func newTestApplicant() *testApplicant {
	sk, id := recordtest.NewKey()
	return &testApplicant{key: sk, id: id, seq: uint64(t0.UnixMilli())}
}

// form is a complete application form: one host of 2 L4s, Enterprise on every count.
func form() protocol.Application {
	return protocol.Application{Name: "Ada Lovelace", Email: "ada@example.org", UPS: true, CommitmentMonths: 12,
		GPUs: []protocol.ApplicationGPU{{Model: "L4-24GB", Count: 2, HostRAMGB: 128, UpGbps: 1, DownGbps: 1, Availability: "24/7",
			Location: protocol.Location{City: "Lyon", Country: "FR", Region: "eu-west"}}}}
}

func newApplicationID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sign signs f as this applicant's next record at now: a new application when f has no
// ID, an update of f.ID otherwise.
func (a *testApplicant) sign(t testing.TB, f protocol.Application, now time.Time) ([]byte, *protocol.Application) {
	t.Helper()
	if f.ID == "" {
		f.ID = newApplicationID()
	}
	a.seq++
	f.Version, f.Provider, f.Seq, f.IssuedAt = protocol.ApplicationVersion, a.id.String(), a.seq, now.UTC()
	raw, err := protocol.Seal(protocol.KindApplication, f, a.key)
	if err != nil {
		t.Fatal(err)
	}
	return raw, &f
}

// rejected reads how many applications were refused for a reason.
func (tc *testCoord) rejected(reason string) float64 {
	return testutil.ToFloat64(tc.metrics.RecordsRejected.WithLabelValues("application", "stream", reason))
}

// ledgerProvider is the peer ID of an application's provider.
func ledgerProvider(a ledger.Application) (peer.ID, error) { return peer.Decode(a.Provider) }

func peerOf(sk crypto.PrivKey) peer.ID {
	id, _ := peer.IDFromPrivateKey(sk)
	return id
}
