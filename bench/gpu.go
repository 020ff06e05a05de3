//go:build linux && cgo

package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// The real-GPU benchmarks: hand-written PTX kernels (cuda/*.ptx) JIT-compiled by the
// driver and timed with CUDA events. See docs/benchmarks.md.

var (
	//go:embed cuda/fma.ptx
	fmaPTX string
	//go:embed cuda/mma.ptx
	mmaPTX string
)

// FLOPs per thread per loop iteration of each kernel: these follow from the PTX (16 chains
// x 8 rounds of fma.rn.f32; the same of fma.rn.f16x2, two FMAs each; 8 mma.m16n8k16 of
// 16x8x16 FMAs per warp of 32 threads). TestEmbeddedPTX counts the instructions.
const (
	fp32FLOPsPerIter   = 16 * 8 * 2
	fp16FLOPsPerIter   = 16 * 8 * 2 * 2
	tensorFLOPsPerIter = 8 * 16 * 8 * 16 * 2 / 32
)

// Sizes and times of a run.
const (
	kernelBlock      = 256     // threads per block, every kernel
	computeWaves     = 2       // compute grids hold this many full GPUs of blocks
	calibrateSeconds = 0.010   // a compute launch is calibrated until it takes this long
	launchSeconds    = 0.050   // then sized to take about this long
	timedRuns        = 5       // timed runs per figure; the best counts
	maxIters         = 1 << 30 // loop count beyond which a kernel is taken not to scale
	copyRunSeconds   = 0.020   // a timed copy run repeats the copy to take about this long
	copyBufferMax    = 1 << 30 // bytes per copy buffer (source and destination)
	copyBufferMin    = 256 << 20
	copyPattern      = 0x3c3c3c3c
)

// cudaMu serialises real-GPU runs: two at once would measure each other.
var cudaMu sync.Mutex

// cudaResult is what the kernels measured on one GPU. A figure of 0 was not measured.
type cudaResult struct {
	Device       cudaDevice
	FP32TFLOPS   float64
	FP16TFLOPS   float64
	TensorTFLOPS float64 // measured with mma.sync; see tensorAttested
	MemBandwidth float64 // GB/s
}

// runCUDA runs the kernels on the GPU with g's UUID (or, where CUDA cannot tell UUIDs, its
// PCI bus ID). The result holds what was measured; err says what was not, and wraps
// ErrComputeUnavailable unless ctx ended. logf, when not nil, gets the details.
func runCUDA(ctx context.Context, g GPUInfo, logf func(format string, args ...any)) (cudaResult, error) {
	var res cudaResult
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := loadCUDA(); err != nil {
		return res, err
	}
	cudaMu.Lock()
	defer cudaMu.Unlock()
	// A CUDA context is current on one OS thread: keep this goroutine on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unavailable := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: GPU %s: %v", ErrComputeUnavailable, g.UUID, err)
	}
	devs, err := cudaDevices()
	if err != nil {
		return res, unavailable(err)
	}
	dev, err := matchCUDADevice(devs, g.UUID, g.PCIBusID)
	if err != nil {
		return res, unavailable(err)
	}
	res.Device = dev
	version, _ := cudaDriverVersion()
	logf("%s %s: CUDA device %d, compute capability %d.%d, %d SMs, %d MHz, memory %d MHz x %d bits, CUDA driver %d",
		g.UUID, dev.Name, dev.Ordinal, dev.CCMajor, dev.CCMinor, dev.SMs, dev.ClockKHz/1000, dev.MemClockKHz/1000, dev.MemBusWidth, version)
	cc, err := newCUDAContext(dev)
	if err != nil {
		return res, unavailable(err)
	}
	defer cc.Close()
	fma, err := cc.LoadModule("fma.ptx", fmaPTX)
	if err != nil {
		return res, unavailable(err)
	}
	defer fma.Close()

	var failed []error
	step := func(what string, f func() (float64, error)) float64 {
		if ctx.Err() != nil {
			return 0
		}
		v, err := f()
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", what, err))
			logf("%s: %v", what, err)
			return 0
		}
		return v
	}
	res.FP32TFLOPS = step("fp32_tflops", func() (float64, error) {
		return measureFLOPS(ctx, fma, "fma_f32", fp32FLOPsPerIter, dev, logf)
	})
	res.FP16TFLOPS = step("fp16_tflops", func() (float64, error) {
		return measureFLOPS(ctx, fma, "fma_f16x2", fp16FLOPsPerIter, dev, logf)
	})
	if dev.CCMajor >= 8 {
		res.TensorTFLOPS = step("tensor_tflops", func() (float64, error) {
			mma, err := cc.LoadModule("mma.ptx", mmaPTX)
			if err != nil {
				return 0, err
			}
			defer mma.Close()
			return measureFLOPS(ctx, mma, "mma_f16", tensorFLOPsPerIter, dev, logf)
		})
	} else {
		failed = append(failed, fmt.Errorf("tensor_tflops: mma.sync.m16n8k16 needs compute capability 8.0, this GPU has %d.%d", dev.CCMajor, dev.CCMinor))
	}
	res.MemBandwidth = step("mem_bandwidth_gbps", func() (float64, error) {
		return measureCopy(ctx, cc, fma, dev, logf)
	})
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if len(failed) > 0 {
		return res, unavailable(errors.Join(failed...))
	}
	return res, nil
}

// tensorAttested says whether the mma.sync kernel's figure stands for a GPU's tensor cores.
// On Hopper (9.x) and data-centre Blackwell (10.x) mma.sync reaches about half of the
// tensor peak, which needs wgmma or tcgen05: attesting its figure would put healthy GPUs
// near the delisting threshold, so it is measured and reported but not attested there.
func tensorAttested(ccMajor int) bool {
	return ccMajor == 8 || ccMajor == 12
}

// computeGrid is the grid of a kernel: blocks per SM that fit at once, x SMs x waves.
func computeGrid(fn *cudaFunction, dev cudaDevice, waves int) (grid, perSM int) {
	fallback := max(1, dev.MaxThreadsPerSM/kernelBlock)
	perSM = fn.BlocksPerSM(kernelBlock, fallback)
	return max(1, dev.SMs) * perSM * waves, perSM
}

// measureFLOPS calibrates a compute kernel's loop count, then returns its best rate of
// timedRuns launches in TFLOPS.
func measureFLOPS(ctx context.Context, mod *cudaModule, name string, flopsPerIter float64, dev cudaDevice, logf func(string, ...any)) (float64, error) {
	fn, err := mod.Function(name)
	if err != nil {
		return 0, err
	}
	grid, perSM := computeGrid(fn, dev, computeWaves)
	threads := uint64(grid) * kernelBlock
	out, err := cudaAlloc(threads * 4)
	if err != nil {
		return 0, err
	}
	defer out.Free()
	timer, err := newCUDATimer()
	if err != nil {
		return 0, err
	}
	defer timer.Close()
	run := func(iters uint64) (float64, error) {
		if err := timer.Start(); err != nil {
			return 0, err
		}
		if err := fn.Launch(grid, kernelBlock, out.Ptr, iters); err != nil {
			return 0, err
		}
		return timer.Stop()
	}
	// Calibration, which also warms the GPU up: double the loop count until a launch
	// takes calibrateSeconds.
	iters := uint64(64)
	var t float64
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if t, err = run(iters); err != nil {
			return 0, err
		}
		if t >= calibrateSeconds {
			break
		}
		if iters >= maxIters {
			return 0, fmt.Errorf("%s took %.3f ms for %d iterations: the kernel does not scale with its loop count", name, t*1000, iters)
		}
		iters *= 2
	}
	iters = scaleIters(iters, t, launchSeconds)
	if _, err := run(iters); err != nil { // warm-up at full size
		return 0, err
	}
	best := 0.0
	bestT := 0.0
	for i := 0; i < timedRuns; i++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t, err := run(iters)
		if err != nil {
			return 0, err
		}
		if f := kernelTFLOPS(flopsPerIter, threads, iters, 1, t); f > best {
			best, bestT = f, t
		}
	}
	logf("%s: grid %d x %d (%d blocks per SM, %d waves), %d iterations, best %.2f ms of %d: %.1f TFLOPS",
		name, grid, kernelBlock, perSM, computeWaves, iters, bestT*1000, timedRuns, best)
	return best, nil
}

// scaleIters sizes a loop count that took t seconds to take about target seconds, never
// below the calibrated count nor above maxIters.
func scaleIters(iters uint64, t, target float64) uint64 {
	if t <= 0 {
		return iters
	}
	n := math.Round(float64(iters) * target / t)
	if n > maxIters {
		return maxIters
	}
	return max(iters, uint64(n))
}

// kernelTFLOPS is the rate of launches of a kernel that does flopsPerIter FLOPs per thread
// per loop iteration: flopsPerIter x threads x iters x launches / seconds, in TFLOPS.
func kernelTFLOPS(flopsPerIter float64, threads, iters uint64, launches int, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return flopsPerIter * float64(threads) * float64(iters) * float64(launches) / seconds / 1e12
}

// copyGBps is the memory bandwidth of copies of bytes each (read once, written once):
// 2 x bytes x launches / seconds, in GB/s (10^9 bytes, as datasheets count).
func copyGBps(bytes uint64, launches int, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return 2 * float64(bytes) * float64(launches) / seconds / 1e9
}

// copyElements is how many 16-byte elements each copy buffer holds: as many as fit in
// min(copyBufferMax, free/4) bytes, rounded down to a multiple of 4 x threads (copy_v4
// copies 4 elements per thread per round); 0 where that is under copyBufferMin.
func copyElements(free, threads uint64) uint64 {
	size := min(uint64(copyBufferMax), free/4)
	if size < copyBufferMin || threads == 0 {
		return 0
	}
	round := 4 * threads
	return size / 16 / round * round
}

// measureCopy returns the best memory bandwidth of copy_v4 over two large buffers, in GB/s,
// after checking that the copy is right.
func measureCopy(ctx context.Context, cc *cudaContext, mod *cudaModule, dev cudaDevice, logf func(string, ...any)) (float64, error) {
	fn, err := mod.Function("copy_v4")
	if err != nil {
		return 0, err
	}
	grid, perSM := computeGrid(fn, dev, 1)
	threads := uint64(grid) * kernelBlock
	free, total, err := cc.MemInfo()
	if err != nil {
		return 0, err
	}
	n := copyElements(free, threads)
	if n == 0 {
		return 0, fmt.Errorf("not enough free GPU memory for the bandwidth test: %d MiB free of %d MiB, %d MiB needed",
			free>>20, total>>20, 4*copyBufferMin>>20)
	}
	bytes := n * 16
	src, err := cudaAlloc(bytes)
	if err != nil {
		return 0, err
	}
	defer src.Free()
	dst, err := cudaAlloc(bytes)
	if err != nil {
		return 0, err
	}
	defer dst.Free()
	if err := src.Fill(copyPattern); err != nil {
		return 0, err
	}
	if err := dst.Fill(0); err != nil {
		return 0, err
	}
	timer, err := newCUDATimer()
	if err != nil {
		return 0, err
	}
	defer timer.Close()
	run := func(launches int) (float64, error) {
		if err := timer.Start(); err != nil {
			return 0, err
		}
		for i := 0; i < launches; i++ {
			if err := fn.Launch(grid, kernelBlock, dst.Ptr, src.Ptr, n); err != nil {
				return 0, err
			}
		}
		return timer.Stop()
	}
	if _, err := run(2); err != nil { // warm-up
		return 0, err
	}
	if err := cc.Synchronize(); err != nil {
		return 0, err
	}
	if err := checkCopy(dst, bytes); err != nil {
		return 0, err
	}
	t1, err := run(1)
	if err != nil {
		return 0, err
	}
	launches := copyLaunches(t1)
	best, bestT := 0.0, 0.0
	for i := 0; i < timedRuns; i++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t, err := run(launches)
		if err != nil {
			return 0, err
		}
		if bw := copyGBps(bytes, launches, t); bw > best {
			best, bestT = bw, t
		}
	}
	logf("copy_v4: grid %d x %d (%d blocks per SM), 2 x %d MiB buffers, %d copies per run, best %.2f ms of %d: %.0f GB/s",
		grid, kernelBlock, perSM, bytes>>20, launches, bestT*1000, timedRuns, best)
	return best, nil
}

// copyLaunches is how many copies a timed run repeats, one having taken t1 seconds.
func copyLaunches(t1 float64) int {
	if t1 <= 0 {
		return 100
	}
	return int(min(100, max(1, math.Ceil(copyRunSeconds/t1))))
}

// checkCopy reads the start and the end of the destination back: both must hold the
// source's pattern, or the copy kernel is wrong and its bandwidth means nothing.
func checkCopy(dst *cudaBuffer, bytes uint64) error {
	const words = 1024
	for _, off := range []uint64{0, bytes - words*4} {
		got, err := dst.Read(off, words)
		if err != nil {
			return err
		}
		for i, w := range got {
			if w != copyPattern {
				return fmt.Errorf("copy_v4 copied wrong data: word %d at byte %d is %#x, want %#x", i, off, w, copyPattern)
			}
		}
	}
	return nil
}

// matchCUDADevice finds the CUDA device of a GPU from its NVML UUID, or from its PCI bus ID
// where CUDA reports no UUID.
func matchCUDADevice(devs []cudaDevice, uuid, busID string) (cudaDevice, error) {
	for _, d := range devs {
		if d.UUID != "" && strings.EqualFold(d.UUID, uuid) {
			return d, nil
		}
	}
	if bus, ok := normalBusID(busID); ok {
		for _, d := range devs {
			if b, ok := normalBusID(d.PCIBusID); ok && d.UUID == "" && b == bus {
				return d, nil
			}
		}
	}
	var seen []string
	for _, d := range devs {
		seen = append(seen, fmt.Sprintf("%d %s %s", d.Ordinal, d.UUID, d.PCIBusID))
	}
	if len(seen) == 0 {
		seen = append(seen, "none")
	}
	return cudaDevice{}, fmt.Errorf("GPU %s (PCI %s) is not among the devices CUDA sees (%s): check CUDA_VISIBLE_DEVICES", uuid, busID, strings.Join(seen, "; "))
}

// formatGPUUUID writes the 16 bytes of a CUDA device UUID as NVML does:
// GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func formatGPUUUID(b [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// normalBusID writes a PCI bus ID (NVML's 00000000:18:00.0 or CUDA's 0000:18:00.0) in one
// form, for comparison.
func normalBusID(s string) (string, bool) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 3 {
		return "", false
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return "", false
	}
	var v [4]uint64
	for i, p := range []string{parts[0], parts[1], devFn[0], devFn[1]} {
		n, err := strconv.ParseUint(p, 16, 32)
		if err != nil {
			return "", false
		}
		v[i] = n
	}
	return fmt.Sprintf("%08x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), true
}
