package benchmarks

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
)

var (
	h100        = bench.SimulatedGPU{Model: "H100-80GB"}
	lostH100    = bench.SimulatedGPU{Model: "H100-80GB", Lost: true}
	throttledL4 = bench.SimulatedGPU{Model: "L4-24GB", PerfFactor: 0.45}
	l4          = bench.SimulatedGPU{Model: "L4-24GB"}
)

// TestRunSignsAnAttestation: a run measures every GPU, the storage and the link (at least
// protocol.MinBenchTransfer each way, whatever bench.network_mb) against the coordinator's
// challenge, and signs an attestation that any validator trusting that
// coordinator accepts: the coordinator's receipt inside, a GPU under its threshold delisted
// with the reason, the host listed. The run is kept (ledger, history), the publisher woken,
// the job runner told what the probe found, and the coordinator keeps the link it measured.
func TestRunSignsAnAttestation(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newTestProvider(t, clk, coord, h100, throttledL4)
	var steps []string
	a, err := prov.Run(context.Background(), func(step, of int, what string) {
		if of != 4 || step != len(steps)+1 {
			t.Errorf("progress step %d of %d after %d steps", step, of, len(steps))
		}
		steps = append(steps, what)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 4 || !strings.HasPrefix(steps[0], "network and challenge (coordinator "+coord.peer.ID.String()) || steps[3] != "storage" {
		t.Fatalf("progress: %q", steps)
	}

	v, err := protocol.CheckAttestation(a.Raw, clk.Now(), protocol.NewTrust(coord.peer.ID), protocol.FirstModelsOnly)
	if err != nil {
		t.Fatalf("a validator trusting the coordinator refuses the attestation: %v", err)
	}
	if _, err := protocol.CheckAttestation(a.Raw, clk.Now(), protocol.NewTrust(newTestPeer(t).ID), protocol.FirstModelsOnly); protocol.Reason(err) != "untrusted" {
		t.Fatalf("a validator trusting another coordinator: %v", err)
	}
	switch {
	case v.Signer != prov.peer.ID || v.Provider != prov.peer.ID.String():
		t.Fatalf("signed by %s for %s", v.Signer, v.Provider)
	case v.Challenge.Coordinator != coord.peer.ID.String() || v.Challenge.Provider != prov.peer.ID.String():
		t.Fatalf("challenge: %+v", v.Challenge)
	case v.Receipt == nil || v.Receipt.Bytes != protocol.MinBenchTransfer || v.Receipt.RTTSamples < protocol.MinRTTSamples || v.Receipt.UpMbps <= 0 || v.Receipt.DownMbps <= 0:
		t.Fatalf("the coordinator's receipt: %+v", v.Receipt)
	case v.HostBelow != "":
		t.Fatalf("host delisted on loopback: %s", v.HostBelow)
	case v.Network.Peer != coord.peer.ID.String() || v.Network.RTTMilli <= 0 || v.Storage.SeqWriteMBps <= 0:
		t.Fatalf("own figures: network %+v, storage %+v", v.Network, v.Storage)
	case v.DriverVersion != "simulated" || len(v.GPUs) != 2:
		t.Fatalf("driver %q, %d GPUs", v.DriverVersion, len(v.GPUs))
	}
	if g := v.GPUs[0]; g.Model != "H100-80GB" || g.PerfScore < 98 || g.Below != "" || g.TensorTFLOPS < 700 {
		t.Fatalf("the nominal H100: %+v", g)
	}
	if g := v.GPUs[1]; g.Model != "L4-24GB" || !strings.HasPrefix(g.Below, "tensor_tflops ") || !strings.Contains(g.Below, "under the threshold") {
		t.Fatalf("the throttled L4: %+v", g)
	}

	if raw, _ := prov.ledger.Provider.OwnAttestation(); string(raw) != string(a.Raw) || prov.Latest() != a {
		t.Fatal("the attestation is not the one kept")
	}
	if points, _ := prov.ledger.History.History(ledger.HistoryBench, testStart.Add(-time.Hour)); len(points) != 1 {
		t.Fatalf("%d runs in the history", len(points))
	}
	if prov.publisher.pokes() != 1 || len(prov.leases.probed) != 2 {
		t.Fatalf("publisher woken %d times; the job runner told of %d GPUs", prov.publisher.pokes(), len(prov.leases.probed))
	}
	if m, ok := coord.links.of(prov.peer.ID); !ok || m.Bytes != protocol.MinBenchTransfer || m.UpMbps != v.Receipt.UpMbps {
		t.Fatalf("the coordinator's measurement of the link: %+v %v", m, ok)
	}
}

// TestRunNeedsACoordinator: a provider that trusts no coordinator cannot benchmark, and
// says what to set.
func TestRunNeedsACoordinator(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newTestProvider(t, clk, coord, h100)
	d := prov.deps(t, coord)
	d.Trusted = nil
	if _, err := NewRunner(d).Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "set trust.coordinators") {
		t.Fatalf("a run without a coordinator: %v", err)
	}
}

// TestRunAgainstAnOldCoordinator: a coordinator that does not speak this node's bench-net
// protocol fails the run with what to look at.
func TestRunAgainstAnOldCoordinator(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	coord.peer.Host.RemoveStreamHandler(libp2pprotocol.ID(protocol.BenchNetProtocol))
	prov := newTestProvider(t, clk, coord, h100)
	if _, err := prov.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "a coordinator older than this node does not speak it") {
		t.Fatalf("a run against an old coordinator: %v", err)
	}
}

// TestRunScoredWithTheChallengesCatalogue: the coordinator's latest model catalogue goes
// with its challenge; the provider takes it and scores the run with it, so that a GPU that
// passes under the compiled-in catalogue is delisted under the coordinator's, which lacks
// its model.
func TestRunScoredWithTheChallengesCatalogue(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	coord.models.add(signCatalogue(t, coord.peer.Key, 1, func(e protocol.ModelEntry) bool { return e.Model != "H100-80GB" }))
	prov := newTestProvider(t, clk, coord, h100)
	a := prov.run(t)
	if a.Challenge.ModelsSeq != 1 || prov.models.taken != 1 || prov.models.source != "bench-net" {
		t.Fatalf("catalogue %d named, %d taken from %q", a.Challenge.ModelsSeq, prov.models.taken, prov.models.source)
	}
	if g := a.GPUs[0]; !strings.HasPrefix(g.Below, protocol.NotInCatalogue) || !strings.Contains(g.Below, "catalogue 1 of") || g.PerfScore != 0 {
		t.Fatalf("the H100 under the coordinator's catalogue: %+v", g)
	}
	// A second run: the catalogue held already is taken again without complaint.
	if b := prov.run(t); b.Challenge.ModelsSeq != 1 || prov.models.taken != 1 {
		t.Fatalf("second run: catalogue %d, taken %d times", b.Challenge.ModelsSeq, prov.models.taken)
	}
}

// TestNoticesOnDelistingAndListingAgain: the operator is told once of each change, GPU by
// GPU (under a threshold, lost, back), and of the whole host under the coordinator's
// minimum; a run that changes nothing tells nothing.
func TestNoticesOnDelistingAndListingAgain(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newTestProvider(t, clk, coord, h100, throttledL4)
	want := func(n int, subject, body string) {
		t.Helper()
		ns := prov.notices(t)
		if len(ns) != n || !strings.Contains(ns[n-1], subject) || !strings.Contains(ns[n-1], body) {
			t.Fatalf("notices: want %d, the last with %q and %q: %q", n, subject, body, ns)
		}
	}
	a := prov.run(t)
	l4ID := a.GPUs[1].UUID
	want(1, "GPU "+l4ID+" (L4-24GB) delisted", "under the threshold of 60.5 TFLOPS")
	if got := prov.Delisted(); len(got) != 1 || got["L4-24GB"] != 1 {
		t.Fatalf("delisted: %v", got)
	}
	prov.run(t)
	want(1, "delisted", "") // the same state: nothing new

	prov.setGPUs(h100, l4)
	prov.run(t)
	want(2, "GPU "+l4ID+" (L4-24GB) listed again", "performance score")
	if got := prov.Delisted(); len(got) != 0 {
		t.Fatalf("delisted after the fix: %v", got)
	}

	prov.setGPUs(h100, lostH100)
	prov.run(t)
	want(3, "GPU lost-1 (H100-80GB) delisted", "fallen off the bus")
	prov.setGPUs(h100, h100)
	prov.run(t)
	want(4, "GPU lost-1 (H100-80GB) answers again", "back in your offer once its benchmarks pass")

	coord.setMinimum(protocol.HostMinimum{UpMbps: 1e6, DownMbps: 1, MaxRTTMilli: 10_000})
	if a := prov.run(t); !strings.HasPrefix(a.HostBelow, "up_mbps ") {
		t.Fatalf("host_below %q", a.HostBelow)
	}
	want(5, "this provider is delisted: its link or disk is under the minimum", "up_mbps ")
	if got := prov.Delisted(); got["H100-80GB"] != 2 {
		t.Fatalf("a delisted host's GPUs: %v", got)
	}
	coord.setMinimum(lenientMinimum)
	prov.run(t)
	want(6, "this provider is listed again", "pass the host minimums")

	alerts := prov.alerts.all()
	if len(alerts) != 6 || !strings.HasPrefix(alerts[0], "benchmarks: GPU "+l4ID) {
		t.Fatalf("alerts: %q", alerts)
	}
}

// TestLeasedGPUsLeftAlone: a GPU leased to a job is not benchmarked: without an earlier
// run it is attested without figures, otherwise with its previous ones.
func TestLeasedGPUsLeftAlone(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newTestProvider(t, clk, coord, h100, h100)
	p, _ := prov.probe()
	gpus, _ := p.GPUs()
	leased := gpus[1].UUID
	prov.leases.lease(leased)
	a := prov.run(t)
	if g := a.GPUs[1]; g.UUID != leased || g.TensorTFLOPS != 0 || g.PerfScore != 0 || g.Below != "" {
		t.Fatalf("a GPU leased before any run: %+v", g)
	}
	if g := a.GPUs[0]; g.TensorTFLOPS == 0 {
		t.Fatalf("the free GPU was not measured: %+v", g)
	}

	prov.leases = &leases{}
	prov.Runner.jobs = prov.leases
	measured := prov.run(t).GPUs[1]
	if measured.TensorTFLOPS == 0 {
		t.Fatal("the GPU, free again, was not measured")
	}
	prov.leases.lease(leased)
	prov.setGPUs(h100, bench.SimulatedGPU{Model: "H100-80GB", PerfFactor: 0.3}) // were it measured, it would be delisted
	if g := prov.run(t).GPUs[1]; g != measured {
		t.Fatalf("a leased GPU's entry: %+v, its previous: %+v", g, measured)
	}
}

// TestRunDue: a run is due when none is held, once bench.interval has passed, after a
// driver change, when a GPU falls off the bus or answers again, and when asked; not
// otherwise.
func TestRunDue(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newTestProvider(t, clk, coord, h100, h100)
	due := func(want bool, why string) {
		t.Helper()
		if prov.Due() != want {
			t.Fatalf("%s: due %v", why, !want)
		}
	}
	due(true, "no attestation held")
	if len(prov.leases.probed) != 2 {
		t.Fatal("the check did not hand the probe's GPUs to the job runner")
	}
	prov.run(t)
	due(false, "just ran")
	clk.Advance(24*time.Hour - time.Minute)
	due(false, "within bench.interval")
	clk.Advance(time.Minute)
	due(true, "bench.interval passed")
	prov.run(t)
	prov.setDriver("550.54.15")
	due(true, "driver changed")
	prov.run(t)
	due(false, "ran on the new driver")
	prov.setGPUs(h100, lostH100)
	due(true, "a GPU fell off the bus")
	prov.run(t)
	due(false, "the lost GPU attested")
	prov.setGPUs(h100, h100)
	due(true, "the lost GPU answers again")
	prov.run(t)
	prov.Wake()
	due(true, "asked for a run")
	due(true, "asked for a run, still")
	prov.run(t)
	due(false, "the asked run done")
}

// TestLoopRunsWhenDue: the loop runs at once when the node has a peer, then checks every
// hour (at most bench.interval) and runs when the interval has passed, or at once when
// woken.
func TestLoopRunsWhenDue(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newTestProvider(t, clk, coord, h100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { prov.Loop(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	seq := func() uint64 {
		if a := prov.Latest(); a != nil {
			return a.Seq
		}
		return 0
	}
	waiting := func(what string) {
		t.Helper()
		waitUntil(t, what, func() bool { return clk.Waiters() == 1 })
	}
	waiting("the first run, then the hourly check")
	first := seq()
	if first == 0 {
		t.Fatal("no run at start")
	}
	clk.Advance(time.Hour)
	waiting("the hourly check")
	if seq() != first {
		t.Fatal("a run an hour after the first, with a day's interval")
	}
	clk.Advance(23 * time.Hour)
	waitUntil(t, "the run a day later", func() bool { return seq() > first })
	waiting("the next check")
	second := seq()
	prov.Wake()
	waitUntil(t, "the run asked for", func() bool { return seq() > second })
}

// TestAttestationKeptAcrossRestart: a restarted runner holds the attestation of the ledger
// while it is valid, and none once it has expired.
func TestAttestationKeptAcrossRestart(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newTestProvider(t, clk, coord, h100)
	a := prov.run(t)
	d := prov.deps(t, coord)
	if b := NewRunner(d).Latest(); b == nil || b.Seq != a.Seq {
		t.Fatalf("after a restart: %+v", b)
	}
	if prov.Due() {
		t.Fatal("a run is due after a restart with a valid attestation")
	}
	clk.Advance(protocol.MaxAttestationAge)
	if b := NewRunner(d).Latest(); b != nil {
		t.Fatal("an expired attestation held after a restart")
	}
}

// TestCoordinatorAsksForARun: a trusted coordinator's request runs the benchmarks and gets
// the new attestation, on its own challenge; another coordinator's request is refused.
func TestCoordinatorAsksForARun(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newTestProvider(t, clk, coord, h100)
	a, err := coord.ChallengeProvider(context.Background(), prov.peer.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Signer != prov.peer.ID || a.Challenge.Coordinator != coord.peer.ID.String() || prov.Latest() == nil || prov.Latest().Seq != a.Seq {
		t.Fatalf("the challenged run: %+v", a.Attestation)
	}
	other := newTestCoordinator(t, clk)
	connect(t, other.peer, prov.peer)
	if _, err := other.ChallengeProvider(context.Background(), prov.peer.ID); err == nil || !strings.Contains(err.Error(), "only a trusted coordinator") {
		t.Fatalf("an untrusted coordinator's request: %v", err)
	}
}

// waitUntil polls cond (another goroutine's work, started by the fake clock) for a few
// seconds.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunRefusedUntilApplied: a provider with neither certificate nor application gets no
// transfer turn, and is told to apply; its loop tries again after standingRetry, then twice
// as long, and at once when its application or certificate changes (StandingChanged),
// which gets it measured as an applicant once its application is open.
func TestRunRefusedUntilApplied(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	prov := newUncertifiedProvider(t, clk, coord, h100)
	refusals := func(n float64) func() bool {
		return func() bool {
			return testutil.ToFloat64(coord.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "not_provider")) == n && clk.Waiters() > 0
		}
	}
	if _, err := prov.Run(context.Background(), nil); !errors.Is(err, ErrNotProvider) || !strings.Contains(err.Error(), "apply first (gpunex apply)") {
		t.Fatalf("a run before applying: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { prov.Loop(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "the loop's first run, refused", refusals(2))
	clk.Advance(standingRetry)
	waitUntil(t, "a retry after standingRetry, refused", refusals(3))
	clk.Advance(2 * standingRetry)
	waitUntil(t, "a retry twice as long after, refused", refusals(4))
	prov.StandingChanged()
	waitUntil(t, "a run as soon as the standing changed, refused", refusals(5))
	if prov.Latest() != nil || !prov.refusedNow() {
		t.Fatal("measured without applying")
	}

	coord.reviews.apply("0123456789ab", prov.peer.ID, protocol.StatusPending)
	if err := prov.ledger.Applicant.SetOwnApplication(ledger.OwnApplication{ID: "0123456789ab", Coordinator: coord.peer.ID.String(), Status: protocol.StatusPending}); err != nil {
		t.Fatal(err)
	}
	prov.StandingChanged()
	waitUntil(t, "the applicant's run", func() bool { return prov.Latest() != nil })
	if prov.refusedNow() {
		t.Fatal("still marked refused after a run")
	}
}

func (tp *testProvider) refusedNow() bool {
	tp.Runner.mu.Lock()
	defer tp.Runner.mu.Unlock()
	return tp.Runner.refused
}
