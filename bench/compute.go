package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// ErrComputeUnavailable is wrapped by the errors of real-GPU figures that could not be
// measured: no CUDA driver (libcuda.so.1), a GPU CUDA does not see, a kernel that failed.
// The figures not measured are then 0; the others stand.
var ErrComputeUnavailable = errors.New("GPU figures not measured")

// Compute measures one GPU: FP32 and FP16 FLOPS, tensor-core FLOPS and memory bandwidth.
//
// Simulated GPUs report their model's datasheet figures times their performance factor,
// with a run-to-run variation of at most 1% that is stable for a UUID and a run number.
//
// Real GPUs run CUDA kernels (gpu.go), through the driver's libcuda.so.1 loaded at run
// time. Where some figure could not be measured the result holds the others (0 for the
// missing ones, with the score over those measured) and the error, which wraps
// ErrComputeUnavailable, says why; where the driver is missing, every figure is 0. The
// tensor figure is left at 0 on GPUs where the mma.sync kernel cannot stand for the tensor
// cores (tensorAttested), with an error that gives the figure measured.
//
// Scores and delisting reasons follow from models, the model catalogue of the challenge
// (nil: the compiled-in one).
func Compute(ctx context.Context, g GPUInfo, run uint64, models *protocol.ModelCatalogue) (protocol.GPUBenchmark, error) {
	if models == nil {
		models = protocol.FirstModels()
	}
	out := protocol.GPUBenchmark{UUID: g.UUID, Model: g.Model, Simulated: g.Simulated}
	t0 := time.Now()
	if !g.Simulated {
		return computeReal(ctx, g, out, t0, models)
	}
	d, ok := models.Datasheet(g.Model)
	if !ok {
		// Nothing to simulate from: the GPU is attested without figures (as a real GPU
		// whose figures could not be measured), and the rest of the run goes on.
		out.Below = models.Shortfall(out)
		return out, fmt.Errorf("%w: no datasheet for %s: a simulated GPU needs a model of the catalogue", ErrComputeUnavailable, g.Model)
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
	out.PerfScore = models.Score(out)
	out.Below = models.Shortfall(out)
	out.DurationMilli = time.Since(t0).Milliseconds()
	return out, nil
}
