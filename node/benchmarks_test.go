package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// TestBenchmarksDelistAndRelist: a provider benchmarks its simulated GPUs against the
// coordinator's challenge; renters see each model's figures and score; a GPU at 45% of its
// datasheet leaves the offer with a notification naming the metric, the value, the
// threshold and what to check, and comes back once a run passes.
func TestBenchmarksDelistAndRelist(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn := newTestNet(t)
	cfg := providerConfig(0)
	cfg.Provider.GPUs = append(cfg.Provider.GPUs, GPUConfig{Model: "L4-24GB", Count: 1, VRAMGB: 24, PriceUSDC: "0.50", Simulated: true, PerfFactor: 0.45})
	prov := tn.add(cfg, nil)
	renter := tn.add(testConfig(RoleRenter), nil)
	eventually(t, 15*time.Second, "first benchmark run", func() (bool, string) { return prov.bench.Latest() != nil, "" })
	a := prov.bench.Latest()
	if a.Network.RTTMilli <= 0 || a.Network.UpMbps <= 0 || a.Storage.SeqWriteMBps <= 0 || len(a.GPUs) != 2 || a.Challenge.Provider != prov.ID().String() {
		t.Fatalf("attestation: %+v", a.Attestation)
	}
	eventually(t, 10*time.Second, "H100 listed with figures, L4 delisted", func() (bool, string) {
		rows := search(t, renter, SearchFilter{})
		var h100, l4 bool
		for _, r := range rows {
			if r.Provider != prov.ID().String() {
				continue
			}
			h100 = h100 || (r.Model == "H100-80GB" && r.Bench != nil && r.Bench.PerfScore >= 98 && r.Bench.TensorTFLOPS > 700)
			l4 = l4 || r.Model == "L4-24GB"
		}
		return h100 && !l4, ""
	})
	ns, _ := prov.Notifications()
	if len(ns) != 1 || !strings.Contains(ns[0].Subject, "delisted") || !strings.Contains(ns[0].Body, "under the threshold") || !strings.Contains(ns[0].Body, "check cooling") {
		t.Fatalf("notifications: %+v", ns)
	}
	// The GPU is fixed: the next run lists it again.
	prov.cfg.Provider.GPUs[1].PerfFactor = 1
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "L4 listed again", func() (bool, string) {
		for _, r := range search(t, renter, SearchFilter{Model: "L4-24GB"}) {
			if r.Provider == prov.ID().String() {
				return true, ""
			}
		}
		return false, ""
	})
	if ns, _ := prov.Notifications(); len(ns) != 2 || !strings.Contains(ns[1].Subject, "listed again") {
		t.Fatalf("notifications after the fix: %+v", ns)
	}
	// The coordinator asks for a run: a new attestation on a fresh challenge comes back.
	fresh, err := tn.boot.ChallengeProvider(context.Background(), prov.ID())
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Seq <= a.Seq || fresh.Challenge.Nonce == a.Challenge.Nonce || prov.bench.Latest().Seq != fresh.Seq {
		t.Fatalf("challenged run: seq %d nonce %s (before: %d %s)", fresh.Seq, fresh.Challenge.Nonce, a.Seq, a.Challenge.Nonce)
	}
	if _, err := renter.ChallengeProvider(context.Background(), prov.ID()); err == nil {
		t.Fatal("a renter challenged a provider")
	}
	// An attestation replayed with an old challenge is refused by every validator.
	if _, err := protocol.CheckAttestation(a.Raw, time.Now().Add(protocol.MaxAttestationAge), renter.trust.trust); protocol.Reason(err) != "expired" {
		t.Fatalf("old attestation: %v", err)
	}
}

// TestLostGPU: a GPU that falls off the bus between runs is noticed by the hourly check,
// attested as lost, leaves the offer, gets no job and is notified with what to check; when
// it answers again it comes back.
func TestLostGPU(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn := newTestNet(t)
	cfg := providerConfig(0)
	cfg.Provider.GPUs = []GPUConfig{{Model: "H100-80GB", Count: 2, VRAMGB: 80, PriceUSDC: "2.00", Simulated: true}}
	prov := tn.add(cfg, nil)
	renter := tn.add(testConfig(RoleRenter), nil)
	offered := func(want int) {
		t.Helper()
		eventually(t, 10*time.Second, fmt.Sprintf("%d H100s offered", want), func() (bool, string) {
			for _, r := range search(t, renter, SearchFilter{Model: "H100-80GB"}) {
				if r.Provider == prov.ID().String() {
					return r.GPUs == want, fmt.Sprintf("%d offered", r.GPUs)
				}
			}
			return want == 0, "no offer"
		})
	}
	eventually(t, 15*time.Second, "first benchmark run", func() (bool, string) { return prov.bench.Latest() != nil, "" })
	offered(2)
	if prov.bench.due() {
		t.Fatal("a run is due with nothing changed")
	}

	prov.cfg.Provider.GPUs[0].Lost = 1 // GPU 1 falls off the bus
	if !prov.bench.due() {
		t.Fatal("the hourly check did not notice a lost GPU")
	}
	if _, err := prov.jobs.reserve("job-a", "H100-80GB", 2); err == nil {
		t.Fatal("a lost GPU was leased")
	}
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	offered(1)
	ns, _ := prov.Notifications()
	if len(ns) != 1 || ns[0].Subject != "GPU lost-1 (H100-80GB) delisted" || !strings.Contains(ns[0].Body, "fallen off the bus") || !strings.Contains(ns[0].Body, "Xid") {
		t.Fatalf("notifications: %+v", ns)
	}
	gpus, err := prov.jobs.reserve("job-b", "H100-80GB", 1)
	if err != nil || len(gpus) != 1 || gpus[0].Index != 0 {
		t.Fatalf("the GPU left: %+v %v", gpus, err)
	}
	prov.jobs.release("job-b")

	prov.cfg.Provider.GPUs[0].Lost = 0 // back after a reboot
	if !prov.bench.due() {
		t.Fatal("the hourly check did not notice the GPU back")
	}
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	offered(2)
	if ns, _ := prov.Notifications(); len(ns) != 2 || ns[1].Subject != "GPU lost-1 (H100-80GB) answers again" {
		t.Fatalf("notifications: %+v", ns)
	}
	if gpus, err := prov.jobs.reserve("job-c", "H100-80GB", 2); err != nil || len(gpus) != 2 {
		t.Fatalf("both GPUs back: %+v %v", gpus, err)
	}
}
