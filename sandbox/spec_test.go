//go:build linux

package sandbox

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestSeccompNativeOnly: a job's seccomp filter names only the node's own architecture,
// so 32-bit system calls (the kernel's compat layer) are refused rather than allowed by
// containerd's default list, and ptrace is not in the allowed calls.
func TestSeccompNativeOnly(t *testing.T) {
	arch, ok := nativeSeccompArch[runtime.GOARCH]
	if !ok {
		t.Skipf("no native seccomp architecture known for %s", runtime.GOARCH)
	}
	spec := Spec{ID: "seccomp", Image: "x", Args: []string{"true"}, MemoryBytes: 64 << 20, CPUMillis: 100, Pids: 8,
		ScratchBytes: 1 << 20, WallClock: time.Minute, OutputDir: t.TempDir(), LogPath: t.TempDir() + "/log"}
	opts, err := specOpts(ocispec.Image{}, spec, t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := namespaces.WithNamespace(context.Background(), "test")
	s, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: spec.ID}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if s.Linux.Seccomp == nil {
		t.Fatal("no seccomp profile in a job's spec")
	}
	if got := s.Linux.Seccomp.Architectures; len(got) != 1 || got[0] != arch {
		t.Errorf("seccomp architectures %v, want only %s", got, arch)
	}
	for _, sc := range s.Linux.Seccomp.Syscalls {
		if sc.Action == "SCMP_ACT_ALLOW" && slices.Contains(sc.Names, "ptrace") {
			t.Errorf("ptrace is allowed by %+v", sc)
		}
	}
}
