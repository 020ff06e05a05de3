package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/benchmarks"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// apiClient serves n's local API and returns a client of it.
func apiClient(t testing.TB, n *Node) *api.Client {
	t.Helper()
	h, _, err := config.Init(t.TempDir(), config.InitOptions{Role: n.cfg.Role})
	if err != nil {
		t.Fatal(err)
	}
	token, _ := h.Token()
	srv, err := n.ServeAPI("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	h.WriteAPIAddr(srv.Addr())
	cl, err := api.NewClient(h)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func gpuOf(a *protocol.SignedAttestation, model string) protocol.GPUBenchmark {
	for _, g := range a.GPUs {
		if g.Model == model {
			return g
		}
	}
	return protocol.GPUBenchmark{}
}

// TestModelCatalogue: a GPU whose model the catalogue lacks is delisted, saying why. The
// coordinator adds the model; without any node restarting, the catalogue reaches every
// node, the provider benchmarks again and a renter finds the GPU with its figures. A
// provider whose certificate does not name the model still does not offer it. An older
// catalogue, or one signed by a stranger, changes nothing and is counted.
func TestModelCatalogue(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	jitter := benchmarks.CatalogueJitter
	benchmarks.CatalogueJitter = 0
	t.Cleanup(func() { benchmarks.CatalogueJitter = jitter })
	tn := newTestNet(t)
	cfg := testConfig(config.RoleProvider)
	cfg.Provider.Region = "eu-west"
	cfg.Provider.GPUs = []config.GPUConfig{
		{Model: "B200-192GB", Count: 1, VRAMGB: 192, PriceUSDC: "5.00", Simulated: true},
		{Model: "L4-24GB", Count: 1, VRAMGB: 24, PriceUSDC: "1.00", Simulated: true},
	}
	prov := tn.add(cfg, nil)
	narrow := tn.addUncertified(cfg)
	if err := narrow.ledger.Applicant.SetOwnCertificate(testCertificate(t, tn.bootKey, narrow.ID(), []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 1}}, time.Now())); err != nil {
		t.Fatal(err)
	}
	narrow.publisher.Poke()
	renter := tn.add(testConfig(config.RoleRenter), nil)
	eventually(t, 30*time.Second, "first benchmark runs", func() (bool, string) {
		return prov.bench.Latest() != nil && narrow.bench.Latest() != nil, ""
	})
	g := gpuOf(prov.bench.Latest(), "B200-192GB")
	if !strings.HasPrefix(g.Below, protocol.NotInCatalogue+"model B200-192GB has no reference figures in catalogue 0") || g.PerfScore != 0 {
		t.Fatalf("a model the catalogue lacks: %+v", g)
	}
	ns, _ := prov.ledger.Notifications.Notifications()
	if len(ns) != 1 || !strings.Contains(ns[0].Subject, "B200-192GB) delisted") || !strings.Contains(ns[0].Body, "benchmarks it again as soon as the catalogue arrives") {
		t.Fatalf("notifications: %+v", ns)
	}
	eventually(t, 15*time.Second, "the L4 listed, the B200 not", func() (bool, string) {
		l4 := providersIn(search(t, renter, api.SearchFilter{Model: "L4-24GB"}))
		b200 := providersIn(search(t, renter, api.SearchFilter{Model: "B200-192GB"}))
		_, ok := l4[prov.ID().String()]
		return ok && len(b200) == 0, ""
	})

	// The coordinator adds the model through its API, as `gpunex coordinator models add`.
	coord := apiClient(t, tn.boot)
	ctx := context.Background()
	entry := protocol.ModelEntry{Model: "b200-192gb", Aliases: []string{"NVIDIA B200"}, VRAMGB: 192, FP32TFLOPS: 80, FP16TFLOPS: 160,
		TensorTFLOPS: 1125, MemBandwidth: 8000, Supported: true}
	v, err := coord.EditModels(ctx, api.ModelEdit{Op: "add", Entry: entry})
	if err != nil || v.Seq == 0 || v.Coordinator != tn.boot.ID().String() {
		t.Fatalf("add: %+v %v", v, err)
	}
	first := v.Seq
	if _, err := coord.EditModels(ctx, api.ModelEdit{Op: "add", Entry: entry}); err == nil || !strings.Contains(err.Error(), "in the catalogue already") {
		t.Fatalf("adding it twice: %v", err)
	}
	bad := entry
	bad.Model, bad.MemBandwidth = "X1-8GB", 0
	if _, err := coord.EditModels(ctx, api.ModelEdit{Op: "add", Entry: bad}); err == nil || !strings.Contains(err.Error(), "mem_bandwidth_gbps") {
		t.Fatalf("an entry without figures: %v", err)
	}

	eventually(t, 30*time.Second, "the B200 found with its figures", func() (bool, string) {
		rows := providersIn(search(t, renter, api.SearchFilter{Model: "B200-192GB"}))
		r, ok := rows[prov.ID().String()]
		if _, wrong := rows[narrow.ID().String()]; wrong {
			t.Fatalf("a certificate that names no B200 was widened: %+v", rows)
		}
		return ok && r.Bench != nil && r.Bench.PerfScore >= 98, ""
	})
	if c := renter.models.Latest(tn.boot.ID()); c == nil || c.Seq != first {
		t.Fatalf("renter's catalogue: %+v", c)
	}
	a := prov.bench.Latest()
	if a.Challenge.ModelsSeq != first || gpuOf(a, "B200-192GB").Below != "" {
		t.Fatalf("the provider's new attestation: %+v", a.Challenge)
	}
	if ns, _ := prov.ledger.Notifications.Notifications(); len(ns) != 2 || !strings.Contains(ns[1].Subject, "B200-192GB) listed again") {
		t.Fatalf("notifications after the catalogue: %+v", ns)
	}
	if so := narrow.publisher.Current(); so == nil || len(so.Offer.GPUs) != 1 || so.Offer.GPUs[0].Model != "L4-24GB" {
		t.Fatalf("the narrow certificate's offer: %+v", so)
	}

	// A corrected datasheet: a second catalogue. The first, gossiped again, is a repeat
	// that changes nothing; one of the same sequence with other contents is refused and
	// counted; an older one the renter never had is kept to check attestations naming it,
	// but does not become current; one signed by a stranger is refused and counted.
	firstRaw := renter.models.Latest(tn.boot.ID()).Raw
	entry.Note = "corrected"
	if v, err = coord.EditModels(ctx, api.ModelEdit{Op: "set", Entry: entry}); err != nil || v.Seq <= first {
		t.Fatalf("set: %+v %v", v, err)
	}
	second := v.Seq
	eventually(t, 15*time.Second, "the renter holds the second catalogue", func() (bool, string) {
		c := renter.models.Latest(tn.boot.ID())
		return c != nil && c.Seq == second, ""
	})
	replays := func() float64 {
		return testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues(string(protocol.KindModelCatalogue), "gossip", "replay"))
	}
	before := replays()
	if verdict := renter.models.Validate(ctx, prov.ID(), firstRaw); verdict != p2p.Repeat || replays() != before {
		t.Fatalf("the first catalogue again: %v, counted %v", verdict, replays()-before)
	}
	coordCatalogue := func(seq uint64, note string) []byte {
		c := protocol.ModelCatalogue{Version: 1, Coordinator: tn.boot.ID().String(), Seq: seq, IssuedAt: time.Now().UTC(),
			Models: append([]protocol.ModelEntry{{Model: "X9-8GB", VRAMGB: 8, FP32TFLOPS: 1, TensorTFLOPS: 1, MemBandwidth: 1, Note: note}}, protocol.FirstModels().Models...)}
		raw, err := protocol.Seal(protocol.KindModelCatalogue, c, tn.bootKey)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	renter.models.Validate(ctx, prov.ID(), coordCatalogue(first, "other contents"))
	if replays() != before+1 || renter.models.Latest(tn.boot.ID()).Seq != second {
		t.Fatalf("the first sequence with other contents: counted %v", replays()-before)
	}
	if verdict := renter.models.Validate(ctx, prov.ID(), coordCatalogue(first-1, "older")); verdict != p2p.Accept ||
		renter.models.Latest(tn.boot.ID()).Seq != second || renter.models.Lookup(tn.boot.ID(), first-1) == nil {
		t.Fatalf("an older catalogue: %v, current %d", verdict, renter.models.Latest(tn.boot.ID()).Seq)
	}
	stranger := newTestKey(t)
	strangerID, _ := peer.IDFromPrivateKey(stranger)
	forged := protocol.ModelCatalogue{Version: 1, Coordinator: strangerID.String(), Seq: 99, IssuedAt: time.Now(), Models: []protocol.ModelEntry{entry}}
	forged.Models[0].Model, forged.Models[0].TensorTFLOPS = "B200-192GB", 1
	raw, err := protocol.Seal(protocol.KindModelCatalogue, forged, stranger)
	if err != nil {
		t.Fatal(err)
	}
	renter.models.Validate(ctx, prov.ID(), raw)
	if n := testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues(string(protocol.KindModelCatalogue), "gossip", "untrusted")); n != 1 {
		t.Fatalf("a stranger's catalogue: counted %v", n)
	}
	if c := renter.models.Latest(strangerID); c != nil {
		t.Fatalf("a stranger's catalogue kept: %+v", c.ModelCatalogue)
	}

	// A renter that joins later (no gossip brings it the catalogues) gets them from the
	// coordinator as it joins, the one the provider's attestation names included, and finds
	// the B200 with its figures.
	late := tn.add(testConfig(config.RoleRenter), nil)
	eventually(t, 20*time.Second, "the late renter finds the B200 with its figures", func() (bool, string) {
		r, ok := providersIn(search(t, late, api.SearchFilter{Model: "B200-192GB"}))[prov.ID().String()]
		return ok && r.Bench != nil && late.models.Lookup(tn.boot.ID(), first) != nil && late.models.Latest(tn.boot.ID()).Seq == second, ""
	})
}
