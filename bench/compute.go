package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
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
func Compute(ctx context.Context, g GPUInfo, run uint64) (protocol.GPUBenchmark, error) {
	out := protocol.GPUBenchmark{UUID: g.UUID, Model: g.Model, Simulated: g.Simulated}
	t0 := time.Now()
	if !g.Simulated {
		return computeReal(ctx, g, out, t0)
	}
	d, ok := protocol.DatasheetFor(g.Model)
	if !ok {
		// Nothing to simulate from: the GPU is attested without figures (as a real GPU
		// whose figures could not be measured), and the rest of the run goes on.
		return out, fmt.Errorf("%w: no datasheet for %s: a simulated GPU needs a model on the supported list", ErrComputeUnavailable, g.Model)
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

// computeReal measures a real GPU with the CUDA kernels.
func computeReal(ctx context.Context, g GPUInfo, out protocol.GPUBenchmark, t0 time.Time) (protocol.GPUBenchmark, error) {
	r, err := runCUDA(ctx, g, nil)
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	out.FP32TFLOPS = round1(r.FP32TFLOPS)
	out.FP16TFLOPS = round1(r.FP16TFLOPS)
	out.TensorTFLOPS = round1(r.TensorTFLOPS)
	out.MemBandwidth = round1(r.MemBandwidth)
	if drop := keepAttestable(&out, r.Device); drop != nil {
		err = errors.Join(err, drop)
	}
	out.PerfScore = protocol.ScoreGPU(out)
	out.Below = protocol.Shortfall(out)
	out.DurationMilli = time.Since(t0).Milliseconds()
	return out, err
}

// maxOverDatasheet is how far over its datasheet a measured figure may be: beyond, the
// operation count or the timing is wrong, and the figure is not attested.
const maxOverDatasheet = 1.5

// keepAttestable sets to 0 the measured figures that must not be attested, and says why: a
// tensor figure where mma.sync cannot stand for the tensor cores (tensorAttested), and any
// figure over maxOverDatasheet times its datasheet, or over what an attestation may hold.
func keepAttestable(b *protocol.GPUBenchmark, dev cudaDevice) error {
	var errs []error
	if b.TensorTFLOPS > 0 && !tensorAttested(dev.CCMajor) {
		errs = append(errs, fmt.Errorf("%w: tensor_tflops not attested: the mma.sync kernel measured %.1f TFLOPS, but on compute capability %d.%d mma.sync reaches only about half of the tensor peak",
			ErrComputeUnavailable, b.TensorTFLOPS, dev.CCMajor, dev.CCMinor))
		b.TensorTFLOPS = 0
	}
	d, known := protocol.DatasheetFor(b.Model)
	for _, f := range []struct {
		name string
		v    *float64
		ref  float64
	}{
		{"fp32_tflops", &b.FP32TFLOPS, d.FP32TFLOPS}, {"fp16_tflops", &b.FP16TFLOPS, d.FP16TFLOPS},
		{"tensor_tflops", &b.TensorTFLOPS, d.TensorTFLOPS}, {"mem_bandwidth_gbps", &b.MemBandwidth, d.MemBandwidth},
	} {
		switch {
		case math.IsNaN(*f.v) || math.IsInf(*f.v, 0) || *f.v < 0 || *f.v > 1e5:
			errs = append(errs, fmt.Errorf("%w: %s %v is impossible: not attested", ErrComputeUnavailable, f.name, *f.v))
			*f.v = 0
		case known && f.ref > 0 && *f.v > maxOverDatasheet*f.ref:
			errs = append(errs, fmt.Errorf("%w: %s %.1f is over %.1f times the %s datasheet's %.1f: not attested",
				ErrComputeUnavailable, f.name, *f.v, maxOverDatasheet, d.Model, f.ref))
			*f.v = 0
		}
	}
	return errors.Join(errs...)
}
