//go:build linux && cgo

package sandbox

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpunex/gpunex/bench"
)

// TestRealGPUJob runs on a machine with NVIDIA GPUs only (GPUNEX_REAL_GPU=1,
// bench/cuda/device-run.sh): a job holding the first GPU runs the host's nvidia-smi -L and
// must list exactly that GPU, through the host's CDI spec where there is one (nvidia-ctk
// cdi generate), else through the device rules.
func TestRealGPUJob(t *testing.T) {
	if os.Getenv("GPUNEX_REAL_GPU") != "1" {
		t.Skip("set GPUNEX_REAL_GPU=1 on a machine with NVIDIA GPUs (bench/cuda/device-run.sh)")
	}
	probe, err := bench.OpenNVML()
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := probe.GPUs()
	probe.Close()
	if err != nil || len(gpus) == 0 {
		t.Fatalf("NVML lists %d GPUs: %v", len(gpus), err)
	}
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := testRuntime(t)
	// busybox plus nvidia-smi and the C libraries it loads (the driver's own libraries
	// come from CDI or the device rules).
	out, err := exec.Command("ldd", smi).Output()
	if err != nil {
		t.Fatal(err)
	}
	files := []string{smi}
	for _, p := range regexp.MustCompile(`(/\S+\.so[.\d]*)`).FindAllString(string(out), -1) {
		if !strings.Contains(p, "nvidia") && !strings.Contains(p, "libcuda") {
			files = append(files, p)
		}
	}
	var hdrs []tar.Header
	var contents [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, tar.Header{Name: strings.TrimPrefix(f, "/"), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))})
		contents = append(contents, b)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for i, h := range hdrs {
		h.ModTime = imageEpoch
		tw.WriteHeader(&h)
		tw.Write(contents[i])
	}
	tw.Close()
	var archive bytes.Buffer
	if _, err := busyboxImageWith(&archive, "gpunex.test/nvidia-smi:1", layer.Bytes()); err != nil {
		t.Fatal(err)
	}
	ref, _, err := rt.ImportImage(t.Context(), &archive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.dropImage(t.Context(), ref) })
	g := gpus[0]
	_, viaCDI := rt.gpus.names([]GPU{{UUID: g.UUID}})
	t.Logf("GPU %s (%s), minor %d, through CDI: %v", g.UUID, g.Name, g.DeviceMinor, viaCDI)
	s := &suite{rt: rt, image: ref}
	spec := s.spec(t, filepath.Join("/", strings.TrimPrefix(smi, "/")), "-L")
	spec.GPUs = []GPU{{Index: g.Index, UUID: g.UUID, Minor: g.DeviceMinor}}
	spec.MemoryBytes = 1 << 30
	exit, log := s.run(t, rt, spec)
	t.Logf("nvidia-smi -L in the job:\n%s", log)
	wantExit(t, exit, 0, ReasonExited, log)
	if n := strings.Count(log, "GPU-"); n != 1 || !strings.Contains(log, g.UUID) {
		t.Fatalf("the job should see exactly its GPU %s; it lists %d:\n%s", g.UUID, n, log)
	}
}
