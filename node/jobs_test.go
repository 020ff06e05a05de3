package node

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/node/internal/jobs"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// containerd for the job tests: one private daemon for the package, started on first use.
var (
	ctrdOnce sync.Once
	ctrd     *sandbox.Daemon
	ctrdErr  error
	ctrdDir  string
)

// testRuntime returns a containerd runtime in its own namespace, or skips (fails when
// GPUNEX_REQUIRE_CONTAINERD=1) where containerd cannot run.
func testRuntime(t testing.TB) sandbox.Runtime {
	t.Helper()
	return testRuntimeWith(t, sandbox.NetworkOptions{})
}

// testRuntimeWith is testRuntime whose jobs with egress get network n.
func testRuntimeWith(t testing.TB, n sandbox.NetworkOptions) *sandbox.Containerd {
	t.Helper()
	ctrdOnce.Do(func() {
		ctrdDir, ctrdErr = os.MkdirTemp("", "gpunex-ctrd-")
		if ctrdErr == nil {
			ctrd, ctrdErr = sandbox.StartContainerd(context.Background(), ctrdDir)
		}
	})
	if ctrdErr != nil {
		if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
			t.Fatalf("containerd is required (GPUNEX_REQUIRE_CONTAINERD=1): %v", ctrdErr)
		}
		t.Skipf("containerd not available: %v", ctrdErr)
	}
	ns := fmt.Sprintf("gpunex-test-%d", time.Now().UnixNano())
	rt, err := sandbox.NewContainerd(context.Background(), sandbox.ContainerdOptions{Address: ctrd.Address(), Namespace: ns, Network: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func TestMain(m *testing.M) {
	sandbox.RunLoggerIfInvoked() // the jobs' logger is this test binary
	code := m.Run()
	if ctrd != nil {
		ctrd.Stop()
		os.RemoveAll(ctrdDir)
	}
	os.Exit(code)
}

// busyboxArchive writes the test image archive and returns its path.
func busyboxArchive(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "busybox.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := sandbox.BusyboxImage(f, "gpunex.test/busybox:1"); err != nil {
		t.Fatal(err)
	}
	return path
}

// jobNet is a network with a certified provider running jobs in containerd.
func jobNet(t testing.TB, gpus int) (renter, prov *Node) {
	t.Helper()
	_, renter, prov = jobNetWith(t, gpus)
	return renter, prov
}

// jobNetWith is jobNet that also returns the network (its coordinator is tn.boot).
func jobNetWith(t testing.TB, gpus int) (tn *testNet, renter, prov *Node) {
	t.Helper()
	return jobNetConfig(t, gpus, testRuntime(t), nil)
}

// jobNetConfig is jobNetWith on runtime rt, with the provider's configuration changed by
// edit (when not nil) before it starts.
func jobNetConfig(t testing.TB, gpus int, rt sandbox.Runtime, edit func(*config.Config)) (tn *testNet, renter, prov *Node) {
	t.Helper()
	tn = newTestNet(t)
	cfg := providerConfig(0)
	cfg.Provider.GPUs[0].Count = gpus
	cfg.Jobs.MemoryMBPerGPU, cfg.Jobs.ScratchMB, cfg.Jobs.Pids = 64, 16, 64
	if edit != nil {
		edit(&cfg)
	}
	prov = tn.addWith(cfg, Deps{Sandbox: rt, JobsDir: t.TempDir()})
	renter = tn.add(testConfig(config.RoleRenter), nil)
	eventually(t, 10*time.Second, "provider's offer found", func() (bool, string) {
		_, ok := searchHas(t, renter, prov.ID())
		return ok, ""
	})
	return tn, renter, prov
}

func offerOf(p *Node) string {
	return protocol.OfferID(p.ID(), p.cfg.Provider.GPUs[0].Model)
}

// TestJobEndToEnd: a renter runs a job on a provider: negotiation, lease signed by both,
// image archive streamed and checked, output streamed, exit code and cost reported,
// receipt signed by the provider and countersigned by the renter, output fetched.
func TestJobEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	renter, prov := jobNet(t, 2)
	archive := busyboxArchive(t)
	ctx := context.Background()
	v, err := renter.renter.ProposeJob(ctx, api.JobRequest{
		Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: archive,
		Args: []string{"sh", "-c", "echo hello from the sandbox; echo gpus=$GPUNEX_VISIBLE_GPUS; echo 42 > /output/answer.txt; exit 3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != "running" || len(v.GPUUUIDs) != 1 {
		t.Fatalf("started job: %+v", v)
	}
	var out bytes.Buffer
	final, err := renter.renter.JobLogs(ctx, v.ID, true, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "hello from the sandbox") || !strings.Contains(out.String(), "gpus="+v.GPUUUIDs[0]) {
		t.Fatalf("output: %q", out.String())
	}
	if final.State != "ended" || final.ExitCode != 3 || final.ExitReason != "exited" || !final.Countersign {
		t.Fatalf("final: %+v", final)
	}
	if final.Cost != protocol.Cost(final.Price, 1, final.Seconds) {
		t.Fatalf("cost %d for %d s at %d", final.Cost, final.Seconds, final.Price)
	}
	eventually(t, 5*time.Second, "provider keeps the countersigned receipt", func() (bool, string) {
		j, err := prov.ledger.Jobs.GetJob(v.ID)
		return err == nil && len(j.ReceiptCountersig) > 0 && string(j.Receipt) == string(final.Receipt), ""
	})
	var tarBuf bytes.Buffer
	if err := renter.renter.FetchOutput(ctx, v.ID, &tarBuf); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&tarBuf)
	h, err := tr.Next()
	if err != nil || h.Name != "answer.txt" {
		t.Fatalf("output archive: %v %v", h, err)
	}
	if b, _ := io.ReadAll(tr); string(b) != "42\n" {
		t.Fatalf("answer.txt = %q", b)
	}
	// The GPUs are free again.
	if prov.jobs.Busy(v.GPUUUIDs[0]) {
		t.Fatal("GPU still reserved after the job ended")
	}
}

// TestJobRefusals: a proposal for more GPUs than offered, under the price, or with an image
// archive that does not match its digest is refused with a reason, and the provider goes on
// serving others.
func TestJobRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	renter, prov := jobNet(t, 1)
	archive := busyboxArchive(t)
	ctx := context.Background()
	_, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 2, MaxSeconds: 60, ImageArchive: archive, Args: []string{"true"}})
	if !errors.Is(err, jobs.ErrRefused) || !strings.Contains(err.Error(), "2 x H100-80GB asked, 1 offered") {
		t.Fatalf("too many GPUs: %v", err)
	}
	_, err = renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, MaxPrice: "0.01", ImageArchive: archive, Args: []string{"true"}})
	if !errors.Is(err, jobs.ErrRefused) || !strings.Contains(err.Error(), "counters at") {
		t.Fatalf("under the price: %v", err)
	}
	// A job naming a file that is not an image (as a job file from someone else might: a
	// key) is refused on the renter's side, before the provider hears of it.
	key := filepath.Join(t.TempDir(), "id_ed25519")
	os.WriteFile(key, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600)
	before, _ := prov.ledger.Jobs.Jobs()
	_, err = renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: key, Args: []string{"true"}})
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "not an image archive") {
		t.Fatalf("a key file as the image archive: %v", err)
	}
	if after, _ := prov.ledger.Jobs.Jobs(); len(after) != len(before) {
		t.Fatalf("the provider heard of a job whose archive is a key file: %d jobs, then %d", len(before), len(after))
	}
	// A renter that sends other bytes than the archive it proposed.
	if err := proposeWithWrongArchive(ctx, renter, prov, archive); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("wrong archive: %v", err)
	}
	// Still serving: a good proposal runs.
	v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Args: []string{"echo", "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	if final, err := renter.renter.JobLogs(ctx, v.ID, true, io.Discard); err != nil || final.ExitCode != 0 {
		t.Fatalf("job after refusals: %+v %v", final, err)
	}
	if got := prov.metrics.JobProposals.WithLabelValues("image_digest"); got == nil {
		t.Fatal("no metric")
	}
}

// proposeWithWrongArchive negotiates like ProposeJob but streams bytes whose digest differs
// from the proposal's.
func proposeWithWrongArchive(ctx context.Context, renter, prov *Node, archive string) error {
	data, err := os.ReadFile(archive)
	if err != nil {
		return err
	}
	digest := sha256.Sum256(data)
	sum, size := hex.EncodeToString(digest[:]), int64(len(data))
	so, _ := renter.book.Get(prov.ID())
	p := protocol.Proposal{
		Version: protocol.JobVersion, Job: "00000000000000aa", Renter: renter.ID().String(), Provider: prov.ID().String(),
		IssuedAt: time.Now().UTC(), Model: so.Offer.GPUs[0].Model, GPUs: 1, MaxSeconds: 60, MaxPrice: so.Offer.GPUs[0].PricePerGPUHour,
		Image: protocol.Image{ArchiveSHA256: sum, ArchiveSize: size}, Args: []string{"true"},
	}
	praw, _ := protocol.Seal(protocol.KindProposal, p, renter.peer.Key)
	s, err := renter.peer.Host.NewStream(ctx, prov.ID(), protocol.JobProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	in := bufio.NewReader(s)
	protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "propose", Record: praw})
	var m protocol.JobMsg
	err = protocol.ReadJSONFrame(in, protocol.MaxJobFrame, &m)
	if err != nil || m.Type != "accept" {
		return fmt.Errorf("not accepted: %v %+v", err, m)
	}
	cs, _ := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{Version: protocol.JobVersion, Of: protocol.KindLease,
		SHA256: protocol.RecordSHA256(m.Record), Job: p.Job, Signer: renter.ID().String(), SignedAt: time.Now().UTC()}, renter.peer.Key)
	protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "countersign", Record: cs})
	data[len(data)/2] ^= 0xff
	s.Write(data)
	m = protocol.JobMsg{}
	err = protocol.ReadJSONFrame(in, protocol.MaxJobFrame, &m)
	if err != nil {
		return err
	}
	if m.Type == "started" {
		return nil
	}
	return errors.New(m.Reason)
}

// TestJobConcurrentProposals: proposals racing for the same GPUs never double-book them.
func TestJobConcurrentProposals(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	renter, prov := jobNet(t, 2)
	archive := busyboxArchive(t)
	ctx := context.Background()
	var mu sync.Mutex
	var started []api.JobView
	var refused []error
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Args: []string{"sleep", "30"}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused = append(refused, err)
			} else {
				started = append(started, v)
			}
		}()
	}
	wg.Wait()
	if len(started) != 2 {
		t.Fatalf("%d jobs started on 2 GPUs (refusals: %v)", len(started), refused)
	}
	if started[0].GPUUUIDs[0] == started[1].GPUUUIDs[0] {
		t.Fatal("one GPU leased twice")
	}
	for _, err := range refused {
		if !strings.Contains(err.Error(), "capacity") {
			t.Fatalf("refusal: %v", err)
		}
	}
	// Cancelled by the renter: stopped, said why, receipt written.
	for _, v := range started {
		if _, err := renter.renter.CancelJob(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
		final, err := renter.renter.JobLogs(ctx, v.ID, true, io.Discard)
		if err != nil || final.ExitReason != "cancelled by the renter" || len(final.Receipt) == 0 {
			t.Fatalf("cancelled job: %+v %v", final, err)
		}
	}
}

// BenchmarkJobStart: from the renter's proposal to the job's process running on the
// provider (negotiation, lease signed by both, image already held, container started), on
// loopback with containerd. Reports the median and 95th percentile.
func BenchmarkJobStart(b *testing.B) {
	// The benchmark proposes faster than a renter should.
	_, renter, prov := jobNetConfig(b, 1, testRuntime(b), func(c *config.Config) { c.Jobs.ProposalsPerMinute = 1 << 20 })
	archive := busyboxArchive(b)
	ctx := context.Background()
	run := func() time.Duration {
		t0 := time.Now()
		v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Args: []string{"true"}})
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := renter.renter.JobLogs(ctx, v.ID, true, io.Discard); err != nil {
			b.Fatal(err)
		}
		eventually(b, 10*time.Second, "GPU free", func() (bool, string) { return !prov.jobs.Busy(v.GPUUUIDs[0]), "" })
		return d
	}
	run() // the first run imports the image
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ds = append(ds, run())
	}
	b.StopTimer()
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(ds[len(ds)*95/100].Microseconds())/1000, "ms-p95")
}

// TestJobEnds: a job outliving its lease is stopped with "lease expired"; a job running
// when the provider shuts down is stopped with "provider shutting down"; both get a final
// receipt and free their GPUs.
func TestJobEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	tn, renter, prov := jobNetWith(t, 2)
	// Funds at the coordinator: the jobs run against escrow holds, so their reports count.
	tn.boot.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	waitCertified(t, tn.boot, prov)
	archive := busyboxArchive(t)
	ctx := context.Background()
	short, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 2, ImageArchive: archive, Args: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	long, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Args: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	final, err := renter.renter.JobLogs(ctx, short.ID, true, io.Discard)
	if err != nil || final.ExitReason != "lease expired" || final.Seconds > 3 || !final.Countersign {
		t.Fatalf("expired lease: %+v %v", final, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	prov.Close(cctx)
	j, err := prov.ledger.Jobs.GetJob(long.ID)
	if err != nil || j.State != "ended" || j.ExitReason != "provider shutting down" || len(j.Receipt) == 0 {
		t.Fatalf("job at shutdown: %+v %v", j, err)
	}
	// The coordinator got both receipts: the shutdown counts against the provider; the
	// expired lease is no fault of it, and a job of a few seconds that ended well does not
	// count at all (money.MinCountedGPUSeconds).
	coord := tn.boot
	eventually(t, 10*time.Second, "coordinator scores job completion", func() (bool, string) {
		st, _ := coord.ledger.Reliability.UpdateReliability(prov.ID().String(), func(*ledger.ReliabilityState) error { return nil })
		c := st.Reliability.Completion
		events := strings.Join(st.Events, ";")
		return c.Total > 0.99 && c.Total < 1.01 && c.Good < 0.01 && strings.Contains(events, "interrupted: provider shutting down") && !strings.Contains(events, "lease expired"),
			fmt.Sprintf("%+v %v", c, st.Events)
	})
}

// TestJobTwentyConcurrent: twenty jobs proposed at once on a 20-GPU provider all run and
// all end with their receipts.
func TestJobTwentyConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	renter, prov := jobNet(t, 20)
	archive := busyboxArchive(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: archive,
				Args: []string{"sh", "-c", fmt.Sprintf("echo job %d; sleep 1", i)}})
			if err != nil {
				errs <- err
				return
			}
			var out bytes.Buffer
			final, err := renter.renter.JobLogs(ctx, v.ID, true, &out)
			if err == nil && (final.ExitCode != 0 || !final.Countersign || !strings.Contains(out.String(), fmt.Sprintf("job %d", i))) {
				err = fmt.Errorf("job %d: %+v %q", i, final, out.String())
			}
			if err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestLeasedGPUNotBenchmarked: a benchmark run during a lease leaves the leased GPU alone
// (its previous figures are kept) and measures the free one.
func TestLeasedGPUNotBenchmarked(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	renter, prov := jobNet(t, 2)
	ctx := context.Background()
	if _, err := prov.bench.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: busyboxArchive(t), Args: []string{"sleep", "20"}})
	if err != nil {
		t.Fatal(err)
	}
	// A run once the GPU is leased (the node's own benchmark loop may have had a run in
	// flight when the lease began, measuring the GPU just before it; runs take turns, so this
	// one starts after it): from now on, every run must keep the leased GPU's figures.
	before, err := prov.bench.Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	after, err := prov.bench.Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	figures := func(a *protocol.SignedAttestation, uuid string) protocol.GPUBenchmark {
		for _, g := range a.GPUs {
			if g.UUID == uuid {
				return g
			}
		}
		t.Fatalf("GPU %s missing from attestation %d", uuid, a.Seq)
		return protocol.GPUBenchmark{}
	}
	probe, _ := OpenProbe(prov.cfg, prov.ID())
	gpus, _ := probe.GPUs()
	leased := v.GPUUUIDs[0]
	if len(gpus) != 2 || (gpus[0].UUID != leased && gpus[1].UUID != leased) {
		t.Fatalf("the leased GPU %s is not one the probe reports: %+v", leased, gpus)
	}
	for _, g := range gpus {
		b, a := figures(before, g.UUID), figures(after, g.UUID)
		if g.UUID == leased && a != b {
			t.Fatalf("leased GPU benchmarked during its lease: %+v then %+v", b, a)
		}
		if g.UUID != leased && a == b {
			t.Fatalf("free GPU not measured again: %+v", a)
		}
	}
	renter.renter.CancelJob(ctx, v.ID)
}

// TestRenterVanishes: a renter whose node goes away mid-job stops countersigning; the
// provider stops the job (jobs.unmetered_stop) instead of running it unpaid, and the
// coordinator charges, once the dispute window has passed, what the renter's checkpoints
// prove plus one interval: never the receipt's longer claim, never nothing.
func TestRenterVanishes(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	rt := testRuntime(t)
	tn := newTestNet(t)
	cfg := providerConfig(0)
	cfg.Provider.GPUs[0].Count, cfg.Provider.GPUs[0].PriceUSDC = 1, "36.00" // 10,000 micro-USDC a second
	cfg.Jobs.MemoryMBPerGPU, cfg.Jobs.ScratchMB, cfg.Jobs.Pids = 64, 16, 64
	cfg.Jobs.UnmeteredStop = config.Duration{Duration: 5 * time.Second} // renters in tests countersign every second
	prov := tn.addWith(cfg, Deps{Sandbox: rt, JobsDir: t.TempDir()})
	renter := tn.add(testConfig(config.RoleRenter), nil)
	tn.boot.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	eventually(t, 10*time.Second, "provider's offer found", func() (bool, string) {
		_, ok := searchHas(t, renter, prov.ID())
		return ok, ""
	})
	waitCertified(t, tn.boot, prov)
	ctx := context.Background()
	v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 600, ImageArchive: busyboxArchive(t), Args: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "two checkpoints countersigned", func() (bool, string) {
		j, _ := prov.ledger.Jobs.GetJob(v.ID)
		return j.CheckpointSeconds >= 2, fmt.Sprint(j.CheckpointSeconds)
	})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	renter.Close(cctx) // the renter's node goes away
	cancel()
	var j ledger.Job
	eventually(t, 20*time.Second, "the provider stops the unmetered job", func() (bool, string) {
		j, _ = prov.ledger.Jobs.GetJob(v.ID)
		return j.State == ledger.JobEnded, j.State + " " + j.ExitReason
	})
	if j.ExitReason != jobs.ReasonUnmetered || len(j.ReceiptCountersig) != 0 {
		t.Fatalf("the job's end: %q, countersigned %v", j.ExitReason, len(j.ReceiptCountersig) > 0)
	}
	rec, _, _ := protocol.OpenReceipt(j.Receipt)
	coord := tn.boot
	eventually(t, 20*time.Second, "the receipt reported, its charge pending", func() (bool, string) {
		h, _ := coord.ledger.Escrow.GetHold(v.ID)
		return h.State == ledger.HoldPending, h.State
	})
	rep, _ := coord.ledger.Escrow.GetJobReport(v.ID, prov.ID().String())
	es, err := coord.ledger.Escrow.ChargeDue(time.Now().Add(coord.cfg.Settlement.DisputeWindow.Duration + time.Minute))
	if err != nil || len(es) != 1 {
		t.Fatalf("after the dispute window: %+v %v", es, err)
	}
	want := protocol.Cost(rec.Price, 1, min(rec.Seconds, rep.CheckpointSeconds+60))
	if es[0].Charge != want || es[0].Rule != protocol.RuleCheckpoint || rep.CheckpointSeconds < 2 {
		t.Fatalf("charged %s under %s; the checkpoints prove %d s, the receipt says %d s: want %s", es[0].Charge, es[0].Rule, rep.CheckpointSeconds, rec.Seconds, want)
	}
}

// TestJobEgress: a provider whose jobs get a network says so in its offer and renters
// filter on it; a job with egress there gets its own interface on the jobs' network and
// the provider's nameservers. A provider giving none is left out of the filtered search,
// and a job with egress there is refused with the reason.
func TestJobEgress(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	rt := testRuntimeWith(t, sandbox.NetworkOptions{Policy: protocol.EgressPublicOnly, Name: fmt.Sprintf("n%d", os.Getpid()%100000),
		Subnet: "10.231.81.0/24", DNS: []string{"192.0.2.53"}})
	t.Cleanup(func() { rt.RemoveNetworkRules() })
	tn, renter, prov := jobNetConfig(t, 1, rt, nil)
	if st := prov.Status(time.Now()).Sandbox; st == nil || st.Egress != protocol.EgressPublicOnly || st.Error != "" {
		t.Fatalf("the provider's status should show its egress policy: %+v", st)
	}
	cfg := providerConfig(0)
	cfg.Jobs.MemoryMBPerGPU, cfg.Jobs.ScratchMB, cfg.Jobs.Pids = 64, 16, 64
	closed := tn.addWith(cfg, Deps{Sandbox: testRuntime(t), JobsDir: t.TempDir()})
	ctx := context.Background()
	eventually(t, 10*time.Second, "both offers found, one with egress", func() (bool, string) {
		_, all := searchHas(t, renter, closed.ID())
		rows := search(t, renter, api.SearchFilter{Egress: true})
		var with []string
		for _, r := range rows {
			with = append(with, r.Provider+"="+r.Egress)
		}
		return all && len(rows) == 1 && rows[0].Provider == prov.ID().String() && rows[0].Egress == protocol.EgressPublicOnly,
			fmt.Sprintf("egress rows %v", with)
	})
	archive := busyboxArchive(t)
	v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Egress: true,
		Args: []string{"sh", "-c", "ip -4 -o addr show eth0; cat /etc/resolv.conf"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if final, err := renter.renter.JobLogs(ctx, v.ID, true, &out); err != nil || final.ExitCode != 0 {
		t.Fatalf("job with egress: %+v %v; output:\n%s", final, err, out.String())
	}
	if !strings.Contains(out.String(), "inet 10.231.81.") || !strings.Contains(out.String(), "nameserver 192.0.2.53") {
		t.Fatalf("a job with egress should have an address on the jobs' network and the provider's nameservers; output:\n%s", out.String())
	}
	_, err = renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(closed), GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Egress: true, Args: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "gives jobs no network") {
		t.Fatalf("a job with egress on a provider giving none: %v; want the reason", err)
	}
}

// TestGreedyProviderOutput: a provider that answers a fetch with more output than the
// job's /output can hold (here: zeros without end) gets cut off: the renter's node takes
// at most twice the lease's scratch size and 64 MiB, then says why.
func TestGreedyProviderOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	renter, prov := jobNet(t, 1)
	ctx := context.Background()
	v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: busyboxArchive(t), Args: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := renter.renter.JobLogs(ctx, v.ID, true, io.Discard); err != nil {
		t.Fatal(err)
	}
	// The provider turns greedy: every control request is answered with zeros.
	prov.peer.Handle(protocol.JobControlProtocol, func(s network.Stream) {
		defer s.Reset()
		zeros := make([]byte, 1<<20)
		for {
			if _, err := s.Write(zeros); err != nil {
				return
			}
		}
	})
	var got byteCounter
	err = renter.renter.FetchOutput(ctx, v.ID, &got)
	limit := jobs.OutputFetchLimit(prov.cfg.Jobs.ScratchMB << 20)
	if !errors.Is(err, protocol.ErrTooLarge) || got.n > limit+1 || got.n < limit {
		t.Fatalf("fetching endless output: %v after %d bytes; want ErrTooLarge once %d bytes are in", err, got.n, limit)
	}
}

type byteCounter struct{ n int64 }

func (w *byteCounter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// TestGPULostDuringJob: a GPU that falls off the bus under a running job stops it with a
// reason naming the GPU (the hourly check noticed); a job that fails by itself while its
// GPU is lost is put on the GPU too (checked at its end). Both are the provider's fault:
// the renter is charged no more than the usage it countersigned, and the coordinator counts
// them against its job completion.
func TestGPULostDuringJob(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	tn, renter, prov := jobNetWith(t, 1)
	tn.boot.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "test", Renter: renter.ID().String(), Amount: 100_000_000})
	waitCertified(t, tn.boot, prov)
	archive := busyboxArchive(t)
	ctx := context.Background()
	run := func(args ...string) api.JobView {
		t.Helper()
		j, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 120, ImageArchive: archive, Args: args})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	lose := func(lost bool) {
		n := 0
		if lost {
			n = 1
		}
		prov.cfg.Provider.GPUs[0].Lost = n
	}

	// Off the bus under a running job: the hourly check stops it.
	j := run("sleep", "60")
	time.Sleep(time.Second)
	lose(true)
	prov.bench.Due() // the hourly check
	final, err := renter.renter.JobLogs(ctx, j.ID, true, io.Discard)
	if err != nil || !strings.HasPrefix(final.ExitReason, "lost: GPU ") || !strings.Contains(final.ExitReason, "fell off the bus during the job") || final.Seconds > final.MeteredSeconds {
		t.Fatalf("a job whose GPU fell off the bus: %+v %v", final, err)
	}

	// Back, then lost again while a job fails by itself: its end puts it on the GPU.
	lose(false)
	prov.bench.Due()
	j2 := run("sh", "-c", "sleep 2; exit 3")
	time.Sleep(500 * time.Millisecond)
	lose(true)
	final2, err := renter.renter.JobLogs(ctx, j2.ID, true, io.Discard)
	if err != nil || !strings.Contains(final2.ExitReason, "failed during the job") || !strings.Contains(final2.ExitReason, "exit code 3") || final2.Seconds > final2.MeteredSeconds {
		t.Fatalf("a job that failed on a lost GPU: %+v %v", final2, err)
	}

	// Back, and its memory fails under a job (uncorrected ECC errors, which end the job's
	// CUDA context): the job's end is put on the GPU too.
	lose(false)
	prov.bench.Due()
	j3 := run("sh", "-c", "sleep 2; exit 5")
	time.Sleep(500 * time.Millisecond)
	prov.cfg.Provider.GPUs[0].ECCErrors = 2
	final3, err := renter.renter.JobLogs(ctx, j3.ID, true, io.Discard)
	if err != nil || !strings.Contains(final3.ExitReason, "had 2 uncorrected ECC errors during the job") || !strings.Contains(final3.ExitReason, "exit code 5") || final3.Seconds > final3.MeteredSeconds {
		t.Fatalf("a job that failed on a GPU with ECC errors: %+v %v", final3, err)
	}
	// The count stays at 2: the next job that fails by itself is its own.
	j4 := run("sh", "-c", "exit 6")
	final4, err := renter.renter.JobLogs(ctx, j4.ID, true, io.Discard)
	if err != nil || strings.HasPrefix(final4.ExitReason, "lost") || final4.ExitCode != 6 {
		t.Fatalf("a job that failed by itself after the ECC errors: %+v %v", final4, err)
	}
	// A report the coordinator could not take at once is sent again every 15 s.
	eventually(t, 90*time.Second, "coordinator counts the three faults against the provider", func() (bool, string) {
		st, _ := tn.boot.ledger.Reliability.UpdateReliability(prov.ID().String(), func(*ledger.ReliabilityState) error { return nil })
		c := st.Reliability.Completion
		// Three faults; the fourth job's receipt says "exited" (checked above), which the
		// coordinator never counts against the provider.
		return c.Total > 2.99 && c.Good < 0.01+c.Total-2.99 && strings.Contains(strings.Join(st.Events, ";"), "uncorrected ECC errors"), fmt.Sprintf("%+v %v", c, st.Events)
	})
}
