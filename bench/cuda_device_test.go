//go:build linux && cgo

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// Targets of issue 4 for the real kernels, as fractions of the datasheet
// (shared/GPU_DATASHEETS.md): tensor FP16 70%, memory bandwidth 80%.
const (
	targetTensor    = 0.70
	targetBandwidth = 0.80
)

// TestCUDADevice runs the kernels on every GPU NVML lists and prints each figure against
// its datasheet, the targets and the delisting thresholds. It runs only where
// GPUNEX_CUDA_DEVICE=1 (bench/cuda/device-run.sh), on a machine with NVIDIA GPUs; it fails
// when a kernel fails, when a figure is above its datasheet by more than 15% (a wrong
// operation count or timing), or when a GPU's suite takes 2 minutes or more. Figures under
// the targets are reported, not failed: they are the finding of the run.
func TestCUDADevice(t *testing.T) {
	if os.Getenv("GPUNEX_CUDA_DEVICE") != "1" {
		t.Skip("set GPUNEX_CUDA_DEVICE=1 on a machine with NVIDIA GPUs (bench/cuda/device-run.sh)")
	}
	if err := loadCUDA(); err != nil {
		t.Fatal(err)
	}
	if missing := cudaMissingFunctions(); len(missing) > 0 {
		t.Logf("optional driver functions missing: %v", missing)
	}
	p, err := OpenNVML()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	gpus, err := p.GPUs()
	if err != nil || len(gpus) == 0 {
		t.Fatalf("NVML: %d GPUs, %v", len(gpus), err)
	}
	for _, g := range gpus {
		if g.Health.Error != "" {
			t.Errorf("GPU %d: %s", g.Index, g.Health.Error)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		t0 := time.Now()
		r, err := runCUDA(ctx, g, t.Logf)
		took := time.Since(t0)
		if err != nil {
			t.Errorf("GPU %d %s: %v", g.Index, g.UUID, err)
		}
		if took >= 2*time.Minute {
			t.Errorf("GPU %d: the suite took %s", g.Index, took)
		}
		// What the node attests: Compute, as the node calls it.
		b, cerr := Compute(ctx, g, 1, nil)
		cancel()
		js, _ := json.Marshal(b)
		t.Logf("GPU %d %s %s: suite %s; attested %s (error: %v)", g.Index, g.Model, g.UUID, took.Round(time.Millisecond), js, cerr)
		d, ok := protocol.FirstModels().Datasheet(g.Model)
		if !ok {
			t.Logf("GPU %d: no datasheet for %s: figures FP32 %.1f, FP16 %.1f, tensor %.1f TFLOPS, %.0f GB/s",
				g.Index, g.Model, r.FP32TFLOPS, r.FP16TFLOPS, r.TensorTFLOPS, r.MemBandwidth)
			continue
		}
		fmt.Printf("\nGPU %d %s (%s), compute capability %d.%d, suite %s\n", g.Index, g.Model, g.UUID, r.Device.CCMajor, r.Device.CCMinor, took.Round(time.Millisecond))
		fmt.Printf("%-20s %10s %10s %8s %8s %10s  %s\n", "FIGURE", "MEASURED", "DATASHEET", "PERCENT", "TARGET", "THRESHOLD", "VERDICT")
		for _, f := range []struct {
			name           string
			got, ref       float64
			target, thresh float64
		}{
			{"fp32_tflops", r.FP32TFLOPS, d.FP32TFLOPS, 0, protocol.ThresholdFP32},
			{"fp16_tflops", r.FP16TFLOPS, d.FP16TFLOPS, 0, 0},
			{"tensor_tflops", r.TensorTFLOPS, d.TensorTFLOPS, targetTensor, protocol.ThresholdTensor},
			{"mem_bandwidth_gbps", r.MemBandwidth, d.MemBandwidth, targetBandwidth, protocol.ThresholdBandwidth},
		} {
			frac := f.got / f.ref
			verdict := "-"
			switch {
			case f.got == 0:
				verdict = "NOT MEASURED"
			case frac > 1.15:
				verdict = "ABOVE DATASHEET: operation count or timing wrong"
				t.Errorf("GPU %d %s: %.1f is %.0f%% of the datasheet's %.1f", g.Index, f.name, f.got, frac*100, f.ref)
			case f.thresh > 0 && frac < f.thresh:
				verdict = "UNDER THE DELISTING THRESHOLD"
			case f.target > 0 && frac < f.target:
				verdict = "under target"
			case f.target > 0:
				verdict = "meets target"
			}
			pct := func(x float64) string {
				if x == 0 {
					return "-"
				}
				return fmt.Sprintf("%.0f%%", x*100)
			}
			fmt.Printf("%-20s %10.1f %10.1f %8s %8s %10s  %s\n", f.name, f.got, f.ref, pct(frac), pct(f.target), pct(f.thresh), verdict)
		}
		if r.TensorTFLOPS > 0 && !tensorAttested(r.Device.CCMajor) {
			fmt.Printf("tensor_tflops is not attested on compute capability %d.x (mma.sync): the node attests 0\n", r.Device.CCMajor)
		}
	}
}
