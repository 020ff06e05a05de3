//go:build linux && cgo

package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// computeReal measures a real GPU with the CUDA kernels.
func computeReal(ctx context.Context, g GPUInfo, out protocol.GPUBenchmark, t0 time.Time, models *protocol.ModelCatalogue) (protocol.GPUBenchmark, error) {
	r, err := runCUDA(ctx, g, nil)
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	out.FP32TFLOPS = round1(r.FP32TFLOPS)
	out.FP16TFLOPS = round1(r.FP16TFLOPS)
	out.TensorTFLOPS = round1(r.TensorTFLOPS)
	out.MemBandwidth = round1(r.MemBandwidth)
	d, known := models.Datasheet(out.Model)
	if drop := keepAttestable(&out, r.Device, d, known); drop != nil {
		err = errors.Join(err, drop)
	}
	out.PerfScore = models.Score(out)
	out.Below = models.Shortfall(out)
	out.DurationMilli = time.Since(t0).Milliseconds()
	return out, err
}

// maxOverDatasheet is how far over its datasheet a measured figure may be: beyond, the
// operation count or the timing is wrong, and the figure is not attested.
const maxOverDatasheet = 1.5

// keepAttestable sets to 0 the measured figures that must not be attested, and says why: a
// tensor figure where mma.sync cannot stand for the tensor cores (tensorAttested), and any
// figure over maxOverDatasheet times its datasheet, or over what an attestation may hold.
func keepAttestable(b *protocol.GPUBenchmark, dev cudaDevice, d protocol.Datasheet, known bool) error {
	var errs []error
	if b.TensorTFLOPS > 0 && !tensorAttested(dev.CCMajor) {
		errs = append(errs, fmt.Errorf("%w: tensor_tflops not attested: the mma.sync kernel measured %.1f TFLOPS, but on compute capability %d.%d mma.sync reaches only about half of the tensor peak",
			ErrComputeUnavailable, b.TensorTFLOPS, dev.CCMajor, dev.CCMinor))
		b.TensorTFLOPS = 0
	}
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
