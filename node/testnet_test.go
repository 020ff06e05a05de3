package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/internal/recordtest"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
)

// testNet is an in-process gpunex network on loopback: real libp2p hosts, real DHT and
// gossipsub, in-memory ledgers.
type testNet struct {
	t       testing.TB
	boot    *Node
	bootKey crypto.PrivKey
	nodes   []*Node
}

var testModels = []struct {
	model string
	vram  int
}{{"H100-80GB", 80}, {"A100-80GB", 80}, {"L40S-48GB", 48}, {"L4-24GB", 24}}

var testRegions = []string{"eu-west", "us-east", "ap-south"}

// testCoordinatorKey signs the certificates of test providers outside a test network.
var testCoordinatorKey, testCoordinatorID = recordtest.NewKey()

// testCertificate signs a certificate for provider, valid for 30 days from now.
var testCertificate = recordtest.Certificate

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHost(t testing.TB) (host.Host, crypto.PrivKey) {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.Identity(sk), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	return h, sk
}

func testConfig(role string) config.Config {
	c := config.Defaults(role)
	c.P2P.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.Offers.TTL = config.Duration{Duration: 2 * time.Minute}
	c.Offers.Republish = config.Duration{Duration: 30 * time.Second}
	c.Offers.SearchTimeout = config.Duration{Duration: 5 * time.Second}
	// No system containerd in tests: job tests give the provider a private one.
	c.Jobs.ContainerdAddress = "/nonexistent/containerd.sock"
	c.Bench.StorageMB, c.Bench.NetworkMB = 1, 1
	// Sixteen providers benchmarking at once on a 2-core machine measure tens of Mbit/s on
	// loopback: the test coordinator holds links to 1 Mbit/s (TestSlowLinkDelisted's holds
	// them to the default).
	c.Coordinator.HostMinimum = config.HostMinimumConfig{UpMbps: 1, DownMbps: 1, MaxRTTMilli: 10_000, EnterpriseMbps: 1}
	// Job tests run without money unless they ask for escrow (settlement_test.go).
	c.Jobs.RequireEscrow = false
	// Renters countersign usage every second, so that a job's receipt is taken and
	// countersigned soon after it ends.
	c.Jobs.CheckpointInterval = config.Duration{Duration: time.Second}
	return c
}

// providerConfig gives provider i a model and region from the mix.
func providerConfig(i int) config.Config {
	c := testConfig(config.RoleProvider)
	m := testModels[i%len(testModels)]
	c.Provider.Region = testRegions[i%len(testRegions)]
	c.Provider.GPUs = []config.GPUConfig{{Model: m.model, Count: 1 + i%8, VRAMGB: m.vram, PriceUSDC: fmt.Sprintf("%d.%02d", 1+i%5, i%100), Simulated: true}}
	return c
}

func newTestNet(t testing.TB) *testNet {
	return newTestNetWith(t, testConfig(config.RoleCoordinator))
}

// newTestNetWith starts a test network whose coordinator has the given configuration.
func newTestNetWith(t testing.TB, coordinator config.Config) *testNet {
	tn := &testNet{t: t}
	tn.boot = tn.add(coordinator, nil)
	return tn
}

// add starts a node bootstrapped through the coordinator, trusting it (unless the
// configuration names its bootstrap peers or the coordinators to trust). A provider starts
// with a certificate from the coordinator for the GPUs it declares.
func (tn *testNet) add(cfg config.Config, clk clock.Clock) *Node {
	tn.t.Helper()
	return tn.addNode(cfg, Deps{Clock: clk}, true)
}

// addUncertified starts a provider without a certificate: it has to apply.
func (tn *testNet) addUncertified(cfg config.Config) *Node {
	tn.t.Helper()
	return tn.addNode(cfg, Deps{}, false)
}

// addWith starts a certified node with some dependencies given (a sandbox runtime).
func (tn *testNet) addWith(cfg config.Config, d Deps) *Node {
	tn.t.Helper()
	return tn.addNode(cfg, d, true)
}

func (tn *testNet) addNode(cfg config.Config, d Deps, certified bool) *Node {
	tn.t.Helper()
	h, sk := newHost(tn.t)
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	if err != nil {
		tn.t.Fatal(err)
	}
	if tn.boot != nil {
		if len(cfg.P2P.Bootstrap) == 0 {
			cfg.P2P.Bootstrap = tn.boot.Addrs()[:1]
		}
		if len(cfg.Trust.Coordinators) == 0 {
			cfg.Trust.Coordinators = []string{tn.boot.ID().String()}
		}
		if cfg.Role == config.RoleProvider && certified {
			var gpus []protocol.CertifiedGPU
			for _, g := range cfg.Provider.GPUs {
				gpus = append(gpus, protocol.CertifiedGPU{Model: protocol.NormalizeModel(g.Model), Count: g.Count})
			}
			if err := l.Applicant.SetOwnCertificate(testCertificate(tn.t, tn.bootKey, h.ID(), gpus, time.Now())); err != nil {
				tn.t.Fatal(err)
			}
		}
	} else {
		tn.bootKey = sk
	}
	d.Host, d.Ledger, d.Logger = h, l, quietLogger()
	n, err := New(context.Background(), cfg, sk, d)
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.nodes = append(tn.nodes, n)
	tn.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
		h.Close()
		l.Close()
	})
	return n
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last: %s)", what, within, last)
}

// search lists the offers n finds, those without a fresh benchmark attestation included:
// the tests of the offer network do not wait for every provider's first run (the renter's
// default leaves them out: offers TestSearchPassesOverUnbenchmarkedOffers).
func search(t testing.TB, n *Node, f api.SearchFilter) []api.OfferRow {
	t.Helper()
	f.Unbenchmarked = true
	rows, err := n.catalogue.Search(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func providersIn(rows []api.OfferRow) map[string]api.OfferRow {
	m := map[string]api.OfferRow{}
	for _, r := range rows {
		m[r.Provider] = r
	}
	return m
}

// declaredModel is the first GPU model a provider declares, as its offer names it.
func declaredModel(n *Node) string { return protocol.NormalizeModel(n.cfg.Provider.GPUs[0].Model) }

func newTestKey(t testing.TB) crypto.PrivKey {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return sk
}

// trustOf is the set of coordinators a node trusts.
func trustOf(n *Node) protocol.Trust {
	ids, _ := n.cfg.TrustedCoordinators()
	return protocol.NewTrust(ids...)
}
