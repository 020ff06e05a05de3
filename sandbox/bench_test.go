//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
)

// waitFirstLine polls a log file until something is in it.
func waitFirstLine(b *testing.B, path string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err := os.Stat(path); err == nil && st.Size() > 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("nothing logged in %s within 30 s", path)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// BenchmarkStartToRunning measures Start of a job on a cached image until its process
// has written its first log line: the latency a renter sees, with the full sandbox spec
// (user namespace, its own network namespace with only loopback).
func BenchmarkStartToRunning(b *testing.B) {
	rt, ref := testRuntime(b)
	benchmarkStart(b, rt, ref, false)
}

// BenchmarkStartToRunningNoUserns is BenchmarkStartToRunning without user namespaces (what
// they cost).
func BenchmarkStartToRunningNoUserns(b *testing.B) {
	rt, ref := testRuntime(b)
	benchmarkStart(b, newInstanceWith(b, rt.Namespace(), ContainerdOptions{NoUserNamespaces: true}), ref, false)
}

// BenchmarkStartToRunningEgress is the same for a job with egress: its network namespace
// is connected through CNI (veth, address, NAT) before it starts.
func BenchmarkStartToRunningEgress(b *testing.B) {
	rt, ref := testRuntime(b)
	c := newInstanceWith(b, rt.Namespace(), ContainerdOptions{
		Network: NetworkOptions{Policy: EgressPublicOnly, Name: fmt.Sprintf("b%d", os.Getpid()%100000), Subnet: "10.231.90.0/24"}})
	b.Cleanup(func() { c.RemoveNetworkRules() })
	benchmarkStart(b, c, ref, true)
}

func benchmarkStart(b *testing.B, rt *Containerd, ref string, egress bool) {
	ctx := context.Background()
	dir := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		jd := filepath.Join(dir, fmt.Sprint(i))
		os.MkdirAll(filepath.Join(jd, "out"), 0o700)
		spec := Spec{ID: fmt.Sprintf("bench-%d", i), Image: ref, Args: []string{"echo", "ready"}, Egress: egress,
			MemoryBytes: 64 << 20, CPUMillis: 1000, Pids: 64, ScratchBytes: 16 << 20, WallClock: time.Minute,
			OutputDir: filepath.Join(jd, "out"), LogPath: filepath.Join(jd, "log")}
		b.StartTimer()
		if err := rt.Start(ctx, spec); err != nil {
			b.Fatal(err)
		}
		waitFirstLine(b, spec.LogPath)
		b.StopTimer()
		if _, err := rt.Wait(ctx, spec.ID); err != nil {
			b.Fatal(err)
		}
		if err := rt.Remove(ctx, spec.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkStartVsBare interleaves, in each iteration, a bare containerd start
// (bareStart), a job's start and a job's start with egress, so that the machine's drift
// (other load, caches) falls on all three alike; it reports each one's median and the
// ratios to bare, which is the figure the sandbox is held to (1.2 x). The pool of
// namespaces for jobs with egress is filled by a first job, outside the timing: its start
// is reported as first-egress-ms.
func BenchmarkStartVsBare(b *testing.B) {
	rt, ref := testRuntime(b)
	c := newInstanceWith(b, rt.Namespace(), ContainerdOptions{
		Network: NetworkOptions{Policy: EgressPublicOnly, Name: fmt.Sprintf("v%d", os.Getpid()%100000), Subnet: "10.231.91.0/24"}})
	b.Cleanup(func() { c.RemoveNetworkRules() })
	ctx := context.Background()
	dir := b.TempDir()
	seq := 0
	job := func(egress bool) time.Duration {
		seq++
		jd := filepath.Join(dir, fmt.Sprint(seq))
		os.MkdirAll(filepath.Join(jd, "out"), 0o700)
		spec := Spec{ID: fmt.Sprintf("vs-%d", seq), Image: ref, Args: []string{"echo", "ready"}, Egress: egress,
			MemoryBytes: 64 << 20, CPUMillis: 1000, Pids: 64, ScratchBytes: 16 << 20, WallClock: time.Minute,
			OutputDir: filepath.Join(jd, "out"), LogPath: filepath.Join(jd, "log")}
		start := time.Now()
		if err := c.Start(ctx, spec); err != nil {
			b.Fatal(err)
		}
		waitFirstLine(b, spec.LogPath)
		took := time.Since(start)
		if _, err := c.Wait(ctx, spec.ID); err != nil {
			b.Fatal(err)
		}
		if err := c.Remove(ctx, spec.ID); err != nil {
			b.Fatal(err)
		}
		return took
	}
	first := job(true)
	for deadline := time.Now().Add(20 * time.Second); len(c.nsPool) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	var bare, plain, egress []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bare = append(bare, bareStart(b, rt, ref, filepath.Join(dir, fmt.Sprintf("bare-%d", i)), fmt.Sprintf("vs-bare-%d", i), nil))
		plain = append(plain, job(false))
		egress = append(egress, job(true))
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Millisecond)
	}
	mb, mp, me := median(bare), median(plain), median(egress)
	b.ReportMetric(mb, "bare-ms")
	b.ReportMetric(mp, "job-ms")
	b.ReportMetric(me, "egress-job-ms")
	b.ReportMetric(mp/mb, "job-x-bare")
	b.ReportMetric(me/mb, "egress-x-bare")
	b.ReportMetric(float64(first)/float64(time.Millisecond), "first-egress-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkBareContainerd is the same with containerd's plain create and start of the
// same image (its default spec, no limits, no checks), for the overhead of ours.
func BenchmarkBareContainerd(b *testing.B) {
	rt, ref := testRuntime(b)
	dir := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bareStart(b, rt, ref, filepath.Join(dir, fmt.Sprint(i)), fmt.Sprintf("bare-%d", i), b.StopTimer)
		b.StartTimer()
	}
}

// bareStart creates and starts a container of ref with containerd's default spec, waits
// for its first log line, and returns how long that took; running is called then, before
// the container is deleted.
func bareStart(b *testing.B, rt *Containerd, ref, logPath, id string, running func()) time.Duration {
	c := rt.Client()
	ctx := namespaces.WithNamespace(context.Background(), rt.Namespace())
	start := time.Now()
	img, err := c.GetImage(ctx, ref)
	if err != nil {
		b.Fatal(err)
	}
	ctr, err := c.NewContainer(ctx, id, client.WithImage(img), client.WithNewSnapshot(id, img),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("echo", "ready")))
	if err != nil {
		b.Fatal(err)
	}
	task, err := ctr.NewTask(ctx, cio.LogFile(logPath))
	if err != nil {
		b.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		b.Fatal(err)
	}
	waitFirstLine(b, logPath)
	took := time.Since(start)
	if running != nil {
		running()
	}
	ch, _ := task.Wait(ctx)
	<-ch
	if _, err := task.Delete(ctx, client.WithProcessKill); err != nil {
		b.Fatal(err)
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		b.Fatal(err)
	}
	return took
}
