package jobs

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// TestGPUSlots: GPUs are leased once each, per model; a GPU the probe loses or the
// benchmarks delist is leased to no new job; a job found running after a restart keeps
// its GPU even when the probe did not find it.
func TestGPUSlots(t *testing.T) {
	r := newProvider(t, nil, []bench.SimulatedGPU{{Model: "H100-80GB"}, {Model: "H100-80GB"}, {Model: "L4-24GB"}, {Model: "H100-80GB", Lost: true}})
	if _, err := r.Reserve("a", "H100-80GB", 3); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "this provider has 2") {
		t.Fatalf("three H100s of two: %v", err)
	}
	gpus, err := r.Reserve("a", "H100-80GB", 2)
	if err != nil || len(gpus) != 2 || gpus[0].UUID == gpus[1].UUID || !r.Busy(gpus[0].UUID) {
		t.Fatalf("two H100s: %+v %v", gpus, err)
	}
	if _, err := r.Reserve("b", "H100-80GB", 1); err == nil || !strings.Contains(err.Error(), "capacity: 0 of 2") {
		t.Fatalf("a third H100: %v", err)
	}
	if _, err := r.Reserve("b", "A100-80GB", 1); err == nil || !strings.Contains(err.Error(), "offers no A100-80GB") {
		t.Fatalf("a model not here: %v", err)
	}
	if l4, err := r.Reserve("b", "L4-24GB", 1); err != nil || len(l4) != 1 {
		t.Fatalf("an L4 while the H100s are leased: %v", err)
	}
	if n := r.RunningJobs(); n != 2 {
		t.Fatalf("%d jobs holding GPUs, want 2", n)
	}
	r.Release("a")
	if r.Busy(gpus[0].UUID) || r.Busy(gpus[1].UUID) {
		t.Fatal("GPU still leased after its release")
	}

	// Delisted by the benchmarks: left out.
	r.UseAttestations(attestations{&protocol.SignedAttestation{Attestation: protocol.Attestation{
		GPUs: []protocol.GPUBenchmark{{UUID: gpus[0].UUID, Below: "perf"}}}}})
	if _, err := r.Reserve("c", "H100-80GB", 2); err == nil || !strings.Contains(err.Error(), "this provider has 1") {
		t.Fatalf("a delisted GPU leased: %v", err)
	}
	if g, err := r.Reserve("c", "H100-80GB", 1); err != nil || g[0].UUID != gpus[1].UUID {
		t.Fatalf("the GPU still listed: %+v %v", g, err)
	}
	r.Release("c")
	r.UseAttestations(nil)

	// Lost to the probe: left out until it answers again, with its details refreshed.
	probe := bench.NewSimulated("x", []bench.SimulatedGPU{{Model: "H100-80GB"}})
	now, _ := probe.GPUs()
	r.Probed(nil)
	if _, err := r.Reserve("d", "H100-80GB", 1); err == nil {
		t.Fatal("a GPU leased while the probe finds none")
	}
	r.Probed(now) // a new healthy GPU gets a slot
	if g, err := r.Reserve("d", "H100-80GB", 1); err != nil || g[0].UUID != now[0].UUID {
		t.Fatalf("the GPU found again: %+v %v", g, err)
	}

	// A running job holds a GPU the runner never saw; it is not leased again when the
	// probe finds it.
	r.Hold("running", []string{"GPU-unseen"})
	if !r.Busy("GPU-unseen") {
		t.Fatal("held GPU not busy")
	}
	r.Probed(append(now, bench.GPUInfo{UUID: "GPU-unseen", Model: "H100-80GB", Simulated: true, DeviceMinor: -1}))
	if _, err := r.Reserve("e", "H100-80GB", 1); err == nil || !strings.Contains(err.Error(), "capacity: 0 of 2") {
		t.Fatalf("a held GPU leased again: %v", err)
	}
}

// TestDelistedProviderLeasesNothing: an attestation that delists the whole host (its
// network or storage below the thresholds) refuses every proposal and says why.
func TestDelistedProviderLeasesNothing(t *testing.T) {
	r := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}})
	r.UseAttestations(attestations{&protocol.SignedAttestation{Attestation: protocol.Attestation{HostBelow: "up_mbps 3 < 10"}}})
	if _, err := r.Reserve("a", "L4-24GB", 1); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "this provider is delisted: up_mbps 3 < 10") {
		t.Fatalf("a delisted host: %v", err)
	}
	r.UseAttestations(attestations{&protocol.SignedAttestation{}})
	if _, err := r.Reserve("a", "L4-24GB", 1); err != nil {
		t.Fatalf("listed again: %v", err)
	}
}

// TestLostGPUStopsItsJob: a GPU that falls off the bus under a running job stops that job
// with a "lost" reason naming the GPU and the probe's error; the renter is charged nothing
// (the provider's fault), the GPU is leased to no new job until a probe finds it again,
// and the other job runs on.
func TestLostGPUStopsItsJob(t *testing.T) {
	gpus := []bench.SimulatedGPU{{Model: "H100-80GB"}, {Model: "H100-80GB"}}
	pv := newProvider(t, nil, gpus)
	_, renter := newKey(t)
	onLost := pv.startJob(t, "00000000000000a1", renter, "H100-80GB", 1, 3600)
	other := pv.startJob(t, "00000000000000a2", renter, "H100-80GB", 1, 3600)
	pv.clk.Advance(10 * time.Minute)

	gpus[0].Lost = true // the first GPU, which the first job took
	probe := bench.NewSimulated(pv.peer.ID.String(), gpus)
	now, _ := probe.GPUs()
	if now[0].UUID != "" || onLost[0].UUID != pv.sim[0].UUID {
		t.Fatal("test set-up: the lost GPU should be the first job's")
	}
	pv.Probed(now)

	j, rec := pv.ended(t, "00000000000000a1")
	if !strings.HasPrefix(rec.Reason, ReasonGPULost) || !strings.Contains(rec.Reason, onLost[0].UUID) || !strings.Contains(rec.Reason, "fell off the bus") ||
		!strings.Contains(rec.Reason, now[0].Health.Error) {
		t.Fatalf("end reason %q: should be lost, naming the GPU and the probe's error", rec.Reason)
	}
	if !protocol.ProviderFault(rec.Reason) || rec.Seconds != 0 || rec.Amount != 0 || j.ExitReason != rec.Reason {
		t.Fatalf("a job lost to its GPU is charged %d s, %s USDC (provider's fault: %v)", rec.Seconds, rec.Amount, protocol.ProviderFault(rec.Reason))
	}
	if pv.rt.killedWith("00000000000000a2") != "" || pv.job(t, "00000000000000a2").State != ledger.JobRunning || !pv.Busy(other[0].UUID) {
		t.Fatal("the job on the healthy GPU was stopped")
	}
	eventually(t, "the lost GPU freed of its job", func() bool { return !pv.Busy(onLost[0].UUID) })
	if _, err := pv.Reserve("next", "H100-80GB", 1); err == nil || !strings.Contains(err.Error(), "capacity: 0 of 1") {
		t.Fatalf("a lost GPU leased again: %v", err)
	}
	gpus[0].Lost = false
	now, _ = bench.NewSimulated(pv.peer.ID.String(), gpus).GPUs()
	pv.Probed(now)
	if g, err := pv.Reserve("next", "H100-80GB", 1); err != nil || g[0].UUID != onLost[0].UUID {
		t.Fatalf("the GPU found again: %+v %v", g, err)
	}
}

// TestFailedJobBlamesItsGPU: a job that fails while its GPU's count of uncorrected ECC
// errors rose is put on the provider (a "lost" reason, no charge); one that fails on a
// healthy GPU is the renter's, and charged.
func TestFailedJobBlamesItsGPU(t *testing.T) {
	gpus := []bench.SimulatedGPU{{Model: "L4-24GB"}, {Model: "L4-24GB"}}
	pv := newProvider(t, nil, gpus)
	checks := 0
	pv.UseHealthCheck(func() {
		checks++
		now, _ := bench.NewSimulated(pv.peer.ID.String(), gpus).GPUs()
		pv.Probed(now)
	})
	_, renter := newKey(t)
	bad := pv.startJob(t, "00000000000000b1", renter, "L4-24GB", 1, 3600)
	pv.startJob(t, "00000000000000b2", renter, "L4-24GB", 1, 3600)
	pv.clk.Advance(time.Minute)

	if bad[0].UUID != pv.sim[0].UUID {
		t.Fatal("test set-up: the first job should have the first GPU")
	}
	gpus[0].ECCErrors = 3
	pv.rt.end("00000000000000b1", sandbox.Exit{Code: 1, Reason: sandbox.ReasonExited})
	_, rec := pv.ended(t, "00000000000000b1")
	if !strings.HasPrefix(rec.Reason, ReasonGPULost) || !strings.Contains(rec.Reason, "had 3 uncorrected ECC errors") ||
		!strings.Contains(rec.Reason, "exit code 1") || rec.Amount != 0 {
		t.Fatalf("a job failed by its GPU's memory: %q, charged %s", rec.Reason, rec.Amount)
	}

	pv.rt.end("00000000000000b2", sandbox.Exit{Code: 2, Reason: sandbox.ReasonExited})
	_, rec = pv.ended(t, "00000000000000b2")
	if rec.Reason != sandbox.ReasonExited || rec.Seconds != 60 || rec.Amount == 0 {
		t.Fatalf("a job failed on a healthy GPU: %q, %d s, %s USDC", rec.Reason, rec.Seconds, rec.Amount)
	}
	if checks != 2 {
		t.Fatalf("GPUs checked %d times, once per failed job expected", checks)
	}
}

// TestGPUCleanedBetweenRenters: a real GPU is not leased again until it is clean (no
// process left, memory cleared); one that fails to clean stays held and is tried again;
// a simulated GPU is free at once.
func TestGPUCleanedBetweenRenters(t *testing.T) {
	r := newProvider(t, nil, []bench.SimulatedGPU{{Model: "H100-80GB"}, {Model: "H100-80GB"}})
	clk := r.clk
	attempts := make(chan string, 10)
	fail := make(chan error, 10)
	r.gpus.cleanGPU = func(uuid string) error { attempts <- uuid; return <-fail }
	r.gpus.mu.Lock()
	real, sim := r.gpus.list[0].gpu.UUID, r.gpus.list[1].gpu.UUID
	r.gpus.list[0].gpu.Simulated = false
	r.gpus.list[0].job, r.gpus.list[1].job = "job-1", "job-1"
	r.gpus.mu.Unlock()
	removed := make(chan struct{})
	r.gpus.releaseAfterCleaning("job-1", removed)
	if r.Busy(sim) {
		t.Fatal("a simulated GPU is held after its job")
	}
	if r.RunningJobs() != 0 {
		t.Fatal("a GPU being cleaned counts as a running job")
	}
	select {
	case <-attempts:
		t.Fatal("a GPU was cleaned while its job's container was still there")
	case <-time.After(50 * time.Millisecond):
	}
	close(removed)
	if got := <-attempts; got != real || !r.Busy(real) {
		t.Fatalf("cleaning %s, busy %v: the real GPU should be held while it is cleaned", got, r.Busy(real))
	}
	if _, err := r.Reserve("job-2", "H100-80GB", 2); err == nil {
		t.Fatal("a GPU being cleaned leased to the next renter")
	}
	fail <- errors.New("processes [4242] still use the GPU")
	waitTimer(t, clk, 1)
	if !r.Busy(real) {
		t.Fatal("a GPU that failed to clean was freed")
	}
	clk.Advance(time.Minute)
	<-attempts
	fail <- nil
	eventually(t, "a cleaned GPU freed", func() bool { return !r.Busy(real) })
	if _, err := r.Reserve("job-2", "H100-80GB", 2); err != nil {
		t.Fatalf("both GPUs clean: %v", err)
	}
}

// TestGPUsCleanedAfterRestart: after a restart every free real GPU is cleaned before it is
// leased (a job may have ended while the node was down); simulated ones are free at once,
// and a GPU a running job holds is left to it.
func TestGPUsCleanedAfterRestart(t *testing.T) {
	r := newProvider(t, nil, []bench.SimulatedGPU{{Model: "H100-80GB"}, {Model: "H100-80GB"}, {Model: "H100-80GB"}})
	cleaned := make(chan string, 3)
	r.gpus.cleanGPU = func(uuid string) error { cleaned <- uuid; return nil }
	r.gpus.mu.Lock()
	free, held, sim := r.gpus.list[0].gpu.UUID, r.gpus.list[1].gpu.UUID, r.gpus.list[2].gpu.UUID
	r.gpus.list[0].gpu.Simulated, r.gpus.list[1].gpu.Simulated = false, false
	r.gpus.mu.Unlock()
	r.Hold("running", []string{held})

	release := make(chan struct{})
	r.gpus.cleanGPU = func(uuid string) error { cleaned <- uuid; <-release; return nil }
	r.gpus.cleanAfterRestart()
	if got := <-cleaned; got != free {
		t.Fatalf("cleaned %s, want the free real GPU %s", got, free)
	}
	if !r.Busy(free) || r.Busy(sim) || !r.Busy(held) {
		t.Fatalf("while cleaning: free real GPU busy %v (want true), simulated %v (want false), held %v (want true)", r.Busy(free), r.Busy(sim), r.Busy(held))
	}
	close(release)
	eventually(t, "the cleaned GPU freed", func() bool { return !r.Busy(free) })
	if !r.Busy(held) || len(cleaned) != 0 {
		t.Fatal("the running job's GPU was cleaned or freed")
	}
}

// TestNoGPUsRefusesJobs: a provider whose probe found no GPU refuses proposals with the
// detection's error, until a probe finds one.
func TestNoGPUsRefusesJobs(t *testing.T) {
	pv := newProvider(t, nil, nil, func(d *Deps) {
		d.Probe = func() (bench.Probe, error) { return nil, errors.New("NVML: driver not loaded") }
	})
	_, renter := newKey(t)
	p := &protocol.Proposal{Job: "00000000000000c1", Renter: renter.String(), Model: "L4-24GB", GPUs: 1, MaxSeconds: 60, MaxPrice: 1_000_000}
	if _, _, _, err := pv.decide(p, nil, pv.clk.Now()); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "GPU detection: NVML: driver not loaded") {
		t.Fatalf("no GPUs: %v", err)
	}
	now, _ := bench.NewSimulated(pv.peer.ID.String(), []bench.SimulatedGPU{{Model: "L4-24GB"}}).GPUs()
	pv.Probed(now)
	pv.pub.offer.Offer.GPUs = []protocol.OfferGPUs{{Model: "L4-24GB", Count: 1, PricePerGPUHour: 1_000_000}}
	if _, gpus, _, err := pv.decide(p, nil, pv.clk.Now()); err != nil || len(gpus) != 1 || gpus[0].UUID != now[0].UUID {
		t.Fatalf("a GPU found later: %v", err)
	}
}
