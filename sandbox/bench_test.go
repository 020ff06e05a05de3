//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// BenchmarkBareContainerd is the same with containerd's plain create and start of the
// same image (its default spec, no limits, no checks), for the overhead of ours.
func BenchmarkBareContainerd(b *testing.B) {
	rt, ref := testRuntime(b)
	c := rt.Client()
	ctx := namespaces.WithNamespace(context.Background(), rt.Namespace())
	dir := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		logPath := filepath.Join(dir, fmt.Sprint(i))
		id := fmt.Sprintf("bare-%d", i)
		b.StartTimer()
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
		b.StopTimer()
		ch, _ := task.Wait(ctx)
		<-ch
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil {
			b.Fatal(err)
		}
		if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
