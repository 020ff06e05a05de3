package node

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	p2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
	"github.com/libp2p/go-libp2p/core/peer"
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
	cfg.Provider.GPUs = append(cfg.Provider.GPUs, config.GPUConfig{Model: "L4-24GB", Count: 1, VRAMGB: 24, PriceUSDC: "0.50", Simulated: true, PerfFactor: 0.45})
	prov := tn.add(cfg, nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	eventually(t, 15*time.Second, "first benchmark run", func() (bool, string) { return prov.bench.Latest() != nil, "" })
	a := prov.bench.Latest()
	if a.Network.RTTMilli <= 0 || a.Network.UpMbps <= 0 || a.Storage.SeqWriteMBps <= 0 || len(a.GPUs) != 2 || a.Challenge.Provider != prov.ID().String() {
		t.Fatalf("attestation: %+v", a.Attestation)
	}
	eventually(t, 10*time.Second, "H100 listed with figures, L4 delisted", func() (bool, string) {
		rows := search(t, renter, api.SearchFilter{})
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
	ns, _ := prov.ledger.Notifications.Notifications()
	if len(ns) != 1 || !strings.Contains(ns[0].Subject, "delisted") || !strings.Contains(ns[0].Body, "under the threshold") || !strings.Contains(ns[0].Body, "check cooling") {
		t.Fatalf("notifications: %+v", ns)
	}
	// The GPU is fixed: the next run lists it again.
	prov.cfg.Provider.GPUs[1].PerfFactor = 1
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "L4 listed again", func() (bool, string) {
		for _, r := range search(t, renter, api.SearchFilter{Model: "L4-24GB"}) {
			if r.Provider == prov.ID().String() {
				return true, ""
			}
		}
		return false, ""
	})
	if ns, _ := prov.ledger.Notifications.Notifications(); len(ns) != 2 || !strings.Contains(ns[1].Subject, "listed again") {
		t.Fatalf("notifications after the fix: %+v", ns)
	}
	// The coordinator asks for a run: a new attestation on a fresh challenge comes back.
	fresh, err := tn.boot.benchCoord.ChallengeProvider(context.Background(), prov.ID())
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Seq <= a.Seq || fresh.Challenge.Nonce == a.Challenge.Nonce || prov.bench.Latest().Seq != fresh.Seq {
		t.Fatalf("challenged run: seq %d nonce %s (before: %d %s)", fresh.Seq, fresh.Challenge.Nonce, a.Seq, a.Challenge.Nonce)
	}
	if renter.benchCoord != nil {
		t.Fatal("a renter can challenge providers")
	}
	// An attestation replayed with an old challenge is refused by every validator.
	if _, err := protocol.CheckAttestation(a.Raw, time.Now().Add(protocol.MaxAttestationAge), protocol.NewTrust(tn.boot.ID()), protocol.FirstModelsOnly); protocol.Reason(err) != "expired" {
		t.Fatalf("old attestation: %v", err)
	}
}

// TestLostGPU: a GPU lost when the provider starts is attested as lost, stays out of the
// offer and of jobs, and is notified with what to check; when it answers again the hourly
// check notices, and it is offered and leased again; when it falls off the bus again, the
// same.
func TestLostGPU(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn := newTestNet(t)
	cfg := providerConfig(0)
	cfg.Provider.GPUs = []config.GPUConfig{{Model: "H100-80GB", Count: 2, VRAMGB: 80, PriceUSDC: "2.00", Simulated: true, Lost: 1}}
	prov := tn.add(cfg, nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	offered := func(want int) {
		t.Helper()
		eventually(t, 10*time.Second, fmt.Sprintf("%d H100s offered", want), func() (bool, string) {
			for _, r := range search(t, renter, api.SearchFilter{Model: "H100-80GB"}) {
				if r.Provider == prov.ID().String() {
					return r.GPUs == want, fmt.Sprintf("%d offered", r.GPUs)
				}
			}
			return want == 0, "no offer"
		})
	}
	leasable := func(want int) {
		t.Helper()
		gpus, err := prov.jobs.Reserve("probe", "H100-80GB", want)
		if err != nil || len(gpus) != want {
			t.Fatalf("%d GPUs leasable: %+v %v", want, gpus, err)
		}
		prov.jobs.Release("probe")
		if _, err := prov.jobs.Reserve("probe", "H100-80GB", want+1); err == nil {
			t.Fatalf("%d GPUs leased, %d usable", want+1, want)
		}
	}
	notified := func(n int, subject, body string) {
		t.Helper()
		ns, _ := prov.ledger.Notifications.Notifications()
		if len(ns) != n || ns[n-1].Subject != subject || !strings.Contains(ns[n-1].Body, body) {
			t.Fatalf("notifications: %+v", ns)
		}
	}
	eventually(t, 15*time.Second, "first benchmark run", func() (bool, string) { return prov.bench.Latest() != nil, "" })
	offered(1)
	leasable(1)
	notified(1, "GPU lost-1 (H100-80GB) delisted", "fallen off the bus")
	if ns, _ := prov.ledger.Notifications.Notifications(); !strings.Contains(ns[0].Body, "Xid") {
		t.Fatalf("no hint: %s", ns[0].Body)
	}
	if prov.bench.Due() {
		t.Fatal("a run is due with nothing changed")
	}

	// A job found running on the lost GPU after a restart keeps it: when the GPU answers,
	// it is not leased to another job until that one ends.
	back := prov.cfg
	back.Provider.GPUs = []config.GPUConfig{{Model: "H100-80GB", Count: 2, VRAMGB: 80, PriceUSDC: "2.00", Simulated: true}}
	all, err := DetectGPUs(back, prov.ID())
	if err != nil {
		t.Fatal(err)
	}
	prov.jobs.Hold("running", []string{all[1].UUID})

	prov.cfg.Provider.GPUs[0].Lost = 0 // back after a reboot
	if !prov.bench.Due() {
		t.Fatal("the hourly check did not notice the GPU back")
	}
	leasable(1)
	prov.jobs.Release("running")
	leasable(2)
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	offered(2)
	notified(2, "GPU lost-1 (H100-80GB) answers again", "reaches it again")

	prov.cfg.Provider.GPUs[0].Lost = 1 // off the bus again
	if !prov.bench.Due() {
		t.Fatal("the hourly check did not notice a lost GPU")
	}
	leasable(1)
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	offered(1)
	notified(3, "GPU lost-1 (H100-80GB) delisted", "fallen off the bus")
}

// TestSlowLinkDelisted: a provider whose upload the coordinator measures at 4 Mbit/s (its
// benchmark upload slowed, as bench.simulated_upload_mbps does) is delisted: its offer is
// withdrawn with the reason, renters do not find it, jobs are refused, and a notification
// names the metric, the value, the minimum and what to check. Its own figures do not
// count: the coordinator's signed receipt does. Once a run passes it is listed again.
func TestSlowLinkDelisted(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	coordinator := testConfig(config.RoleCoordinator)
	coordinator.Coordinator.HostMinimum = config.Defaults(config.RoleCoordinator).Coordinator.HostMinimum
	tn := newTestNetWith(t, coordinator)
	cfg := providerConfig(0)
	cfg.Bench.SimulatedUploadMbps = 4
	prov := tn.add(cfg, nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	eventually(t, 20*time.Second, "first benchmark run", func() (bool, string) { return prov.bench.Latest() != nil, "" })
	a := prov.bench.Latest()
	if a.Receipt == nil || a.Receipt.UpMbps > 6 || a.Receipt.Coordinator != tn.boot.ID().String() {
		t.Fatalf("the coordinator's receipt: %+v", a.Receipt)
	}
	if !strings.HasPrefix(a.HostBelow, "up_mbps ") || !strings.Contains(a.HostBelow, "(measured by the coordinator) is under the minimum of 20 Mbit/s") {
		t.Fatalf("host_below %q", a.HostBelow)
	}
	eventually(t, 10*time.Second, "offer withdrawn", func() (bool, string) {
		so := prov.publisher.Current()
		return so != nil && strings.HasPrefix(so.Offer.Withdrawn, "delisted: up_mbps") && len(so.Offer.GPUs) == 0, fmt.Sprintf("%+v", so)
	})
	for _, r := range search(t, renter, api.SearchFilter{}) {
		if r.Provider == prov.ID().String() {
			t.Fatalf("a delisted provider found: %+v", r)
		}
	}
	if _, err := prov.jobs.Reserve("probe-job", cfg.Provider.GPUs[0].Model, 1); err == nil || !strings.Contains(err.Error(), "this provider is delisted: up_mbps") {
		t.Fatalf("a job on a delisted provider: %v", err)
	}
	ns, _ := prov.ledger.Notifications.Notifications()
	if len(ns) != 1 || !strings.Contains(ns[0].Subject, "delisted") || !strings.Contains(ns[0].Body, "under the minimum of 20 Mbit/s") || !strings.Contains(ns[0].Body, "check your internet link's upload") {
		t.Fatalf("notifications: %+v", ns)
	}

	// The link is fixed: the next run lists the provider again.
	prov.bench.SimulateUpload(0)
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "listed again", func() (bool, string) {
		for _, r := range search(t, renter, api.SearchFilter{}) {
			if r.Provider == prov.ID().String() {
				return true, ""
			}
		}
		return false, ""
	})
	if ns, _ := prov.ledger.Notifications.Notifications(); len(ns) != 2 || !strings.Contains(ns[1].Subject, "listed again") {
		t.Fatalf("notifications after the fix: %+v", ns)
	}
}

// TestBenchTurnRefusedToStrangers: a peer that is neither a certified provider nor an
// applicant asks the coordinator for its network test, to hold the one transfer turn and keep
// providers from being measured: it is refused (at the challenge or at the transfer), and an
// honest provider's run completes at once. (A certified provider that stalls holding the
// turn loses it within seconds: node/internal/benchmarks TestStalledTransferLosesTheTurn.)
func TestBenchTurnRefusedToStrangers(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn := newTestNet(t)
	prov := tn.add(providerConfig(0), nil)
	eventually(t, 20*time.Second, "first benchmark run", func() (bool, string) { return prov.bench.Latest() != nil, "" })

	hog, _ := newHost(t)
	t.Cleanup(func() { hog.Close() })
	ctx := context.Background()
	if err := hog.Connect(ctx, peer.AddrInfo{ID: tn.boot.ID(), Addrs: tn.boot.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	s, err := hog.NewStream(ctx, tn.boot.ID(), p2pprotocol.ID(protocol.BenchNetProtocol))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Reset()
	in := bufio.NewReader(s)
	// As a run does: a challenge, then the largest download.
	if err := protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "challenge"}); err != nil {
		t.Fatal(err)
	}
	var answer protocol.BenchNetMsg
	if err := protocol.ReadJSONFrame(in, protocol.MaxBenchNetAnswer, &answer); err != nil {
		t.Fatalf("the stranger's challenge: %v", err)
	}
	if answer.Error == "" {
		if err := protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "down", Size: protocol.MaxBenchTransfer}); err != nil {
			t.Fatal(err)
		}
		answer = protocol.BenchNetMsg{}
		if err := protocol.ReadJSONFrame(in, protocol.MaxBenchNetAnswer, &answer); err != nil || answer.Error == "" {
			t.Fatalf("a stranger was given the transfer turn: %v %+v", err, answer)
		}
	}
	seq := prov.bench.Latest().Seq
	a, err := prov.bench.Run(ctx, nil)
	if err != nil || a.Seq <= seq || a.Receipt == nil || a.Receipt.Bytes < protocol.MinReceiptBytes {
		t.Fatalf("an honest run after a stranger asked for the turn: %v", err)
	}
}
