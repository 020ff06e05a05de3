package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// ErrComputeUnavailable is returned for real GPUs until the CUDA compute kernels land:
// their compute and memory figures are then reported as not measured.
var ErrComputeUnavailable = errors.New("GPU compute benchmarks on real GPUs are not available in this build (CUDA kernels not implemented yet)")

// Compute measures one GPU: FP32 and FP16 FLOPS, tensor-core FLOPS and memory bandwidth.
//
// Simulated GPUs report their model's datasheet figures times their performance factor,
// with a run-to-run variation of at most 1% that is stable for a UUID and a run number.
// Real GPUs return ErrComputeUnavailable.
func Compute(ctx context.Context, g GPUInfo, run uint64) (protocol.GPUBenchmark, error) {
	out := protocol.GPUBenchmark{UUID: g.UUID, Model: g.Model, Simulated: g.Simulated}
	if !g.Simulated {
		return out, ErrComputeUnavailable
	}
	t0 := time.Now()
	d, ok := protocol.DatasheetFor(g.Model)
	if !ok {
		return out, fmt.Errorf("no datasheet for %s: a simulated GPU needs a model on the supported list", g.Model)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", g.UUID, run)
	jitter := 1 - float64(h.Sum64()%1000)/100000 // 0.99-1.00
	f := g.PerfFactor
	if f <= 0 {
		f = 1
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	out.FP32TFLOPS = round1(d.FP32TFLOPS * f * jitter)
	out.FP16TFLOPS = round1(d.FP16TFLOPS * f * jitter)
	out.TensorTFLOPS = round1(d.TensorTFLOPS * f * jitter)
	out.MemBandwidth = round1(d.MemBandwidth * f * jitter)
	out.PerfScore = protocol.ScoreGPU(out)
	out.Below = protocol.Shortfall(out)
	out.DurationMilli = time.Since(t0).Milliseconds()
	return out, nil
}
