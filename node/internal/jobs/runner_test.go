package jobs

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// testRunner is a provider's job runner without a sandbox, over simulated GPUs.
func testRunner(t *testing.T, gpus []bench.SimulatedGPU, trusted ...peer.ID) *Runner {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	r, err := NewRunner(Deps{
		Peer: &p2p.Peer{ID: id, Key: key}, Ledger: l, Clock: clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)),
		Log: quiet(), Metrics: metrics.New(func() float64 { return 0 }, func() float64 { return 0 }),
		Jobs: config.JobsConfig{ProposalsPerMinute: 3}, Trusted: trusted,
		RuntimeErr: errors.New("no containerd here"), Dir: filepath.Join(t.TempDir(), "jobs"),
		Probe: func() (bench.Probe, error) { return bench.NewSimulated(id.String(), gpus), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type attestations struct{ a *protocol.SignedAttestation }

func (a attestations) Latest() *protocol.SignedAttestation { return a.a }

// TestGPUSlots: GPUs are leased once each, per model; a GPU the probe loses or the
// benchmarks delist is leased to no new job; a job found running after a restart keeps
// its GPU even when the probe did not find it.
func TestGPUSlots(t *testing.T) {
	r := testRunner(t, []bench.SimulatedGPU{{Model: "H100-80GB"}, {Model: "H100-80GB"}, {Model: "L4-24GB"}, {Model: "H100-80GB", Lost: true}})
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
	r.Release("a")
	if r.Busy(gpus[0].UUID) {
		t.Fatal("GPU still leased after its release")
	}

	// Delisted by the benchmarks: left out.
	r.UseAttestations(attestations{&protocol.SignedAttestation{Attestation: protocol.Attestation{
		GPUs: []protocol.GPUBenchmark{{UUID: gpus[0].UUID, Below: "perf"}}}}})
	if _, err := r.Reserve("c", "H100-80GB", 2); err == nil || !strings.Contains(err.Error(), "this provider has 1") {
		t.Fatalf("a delisted GPU leased: %v", err)
	}
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

// TestRefusedWithoutRuntime: a provider whose sandbox is missing refuses every proposal
// and says why.
func TestRefusedWithoutRuntime(t *testing.T) {
	r := testRunner(t, []bench.SimulatedGPU{{Model: "H100-80GB"}})
	_, _, _, err := r.decide(&protocol.Proposal{Job: "00000000000000aa", Model: "H100-80GB", GPUs: 1}, nil, r.clock.Now())
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "cannot run jobs right now: no containerd here") {
		t.Fatalf("without a runtime: %v", err)
	}
}

// TestReleaseAnswer: a job that never got a lease here may have its hold released (and is
// then refused for good); one that ran may not.
func TestReleaseAnswer(t *testing.T) {
	r := testRunner(t, nil)
	if a := r.ReleaseAnswer("00000000000000aa"); !a.Release {
		t.Fatalf("unknown job: %+v", a)
	}
	if a := r.ReleaseAnswer("00000000000000aa"); !a.Release {
		t.Fatalf("released job asked again: %+v", a)
	}
	now := r.clock.Now()
	if err := r.ledger.CreateJob(ledger.Job{ID: "00000000000000bb", Side: "provider", State: ledger.JobRunning, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if a := r.ReleaseAnswer("00000000000000bb"); a.Release || !strings.Contains(a.Reason, "its final receipt settles the hold") {
		t.Fatalf("running job: %+v", a)
	}
}

// TestViewJobCountsToNow: a running job's seconds are counted to the time given.
func TestViewJobCountsToNow(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := viewJob(ledger.Job{ID: "00000000000000aa", State: ledger.JobRunning, StartedAt: start}, start.Add(90*time.Second))
	if v.Seconds != 90 {
		t.Fatalf("seconds: %d", v.Seconds)
	}
}

// TestWriteTar: the output archive holds the job's regular files and folders, never what
// a link points to.
func TestWriteTar(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("not yours"), 0o600)
	os.MkdirAll(filepath.Join(dir, "sub"), 0o700)
	os.WriteFile(filepath.Join(dir, "sub", "answer.txt"), []byte("42\n"), 0o600)
	if err := os.Symlink(secret, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeTar(&buf, dir); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "sub/answer.txt" {
			if b, _ := io.ReadAll(tr); string(b) != "42\n" {
				t.Fatalf("answer.txt = %q", b)
			}
		}
	}
	if strings.Join(names, ",") != "sub,sub/answer.txt" {
		t.Fatalf("archive: %v", names)
	}
}

// TestRetention: an ended job's folder stays for jobs.retention, then goes; a running
// job's folder stays whatever its age.
func TestRetention(t *testing.T) {
	r := testRunner(t, nil)
	r.cfg.Retention = config.Duration{Duration: 24 * time.Hour}
	clk := r.clock.(*clock.Fake)
	for _, j := range []ledger.Job{
		{ID: "ended", Side: "provider", State: ledger.JobEnded, UpdatedAt: clk.Now()},
		{ID: "running", Side: "provider", State: ledger.JobRunning, UpdatedAt: clk.Now()},
	} {
		if err := r.ledger.PutJob(j); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(r.jobDir(j.ID), "output"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(id string) bool { _, err := os.Stat(r.jobDir(id)); return err == nil }
	clk.Advance(23 * time.Hour)
	r.removeExpiredFolders()
	if !exists("ended") || !exists("running") {
		t.Fatal("a folder went before the retention period")
	}
	clk.Advance(2 * time.Hour)
	r.removeExpiredFolders()
	if exists("ended") {
		t.Fatal("an ended job's folder outlived the retention period")
	}
	if !exists("running") {
		t.Fatal("a running job's folder was deleted")
	}
}

// TestGPUCleanedBetweenRenters: a real GPU is not leased again until it is clean (no
// process left, memory cleared); one that fails to clean stays held and is tried again;
// a simulated GPU is free at once.
func TestGPUCleanedBetweenRenters(t *testing.T) {
	r := testRunner(t, []bench.SimulatedGPU{{Model: "H100-80GB"}, {Model: "H100-80GB"}})
	clk := r.clock.(*clock.Fake)
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
	select {
	case <-attempts:
		t.Fatal("a GPU was cleaned while its job's container was still there")
	case <-time.After(50 * time.Millisecond):
	}
	close(removed)
	if got := <-attempts; got != real || !r.Busy(real) {
		t.Fatalf("cleaning %s, busy %v: the real GPU should be held while it is cleaned", got, r.Busy(real))
	}
	fail <- errors.New("processes [4242] still use the GPU")
	for clk.Waiters() == 0 {
		time.Sleep(time.Millisecond)
	}
	if !r.Busy(real) {
		t.Fatal("a GPU that failed to clean was freed")
	}
	clk.Advance(time.Minute)
	<-attempts
	fail <- nil
	for deadline := time.Now().Add(5 * time.Second); r.Busy(real); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a cleaned GPU stays held")
		}
	}
}
