//go:build linux && cgo

package bench

import (
	"context"
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpunex/gpunex/protocol"
)

// TestComputeRealWithoutCUDA: on a machine without the NVIDIA driver (the test machines), a
// real GPU's figures are all 0 and the error says to install the driver; with the driver's
// library but no GPU (Debian's libcuda1 alone), it says the driver does not start. Nothing
// crashes either way.
func TestComputeRealWithoutCUDA(t *testing.T) {
	g := GPUInfo{UUID: "GPU-00000000-0000-0000-0000-000000000000", Model: "H100-80GB", PCIBusID: "00000000:99:00.0"}
	r, err := Compute(context.Background(), g, 1, nil)
	if !errors.Is(err, ErrComputeUnavailable) {
		t.Fatalf("error %v does not wrap ErrComputeUnavailable", err)
	}
	if r.FP32TFLOPS != 0 || r.FP16TFLOPS != 0 || r.TensorTFLOPS != 0 || r.MemBandwidth != 0 || r.PerfScore != 0 || r.Below != "" || r.UUID != g.UUID {
		t.Fatalf("figures for a GPU that was not measured: %+v", r)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "libcuda.so.1 not found: install the NVIDIA driver"):
	case strings.Contains(msg, "the CUDA driver does not start: cuInit: CUDA_ERROR_"):
	case strings.Contains(msg, "is not among the devices CUDA sees"): // a machine with GPUs
	default:
		t.Fatalf("unclear error: %v", err)
	}
	t.Logf("error: %v", err)
	// A second call gives the same answer from the one load.
	if _, err2 := Compute(context.Background(), g, 2, nil); err2 == nil || err2.Error() != msg {
		t.Fatalf("second call: %v", err2)
	}
}

func TestOpenCUDAFailures(t *testing.T) {
	_ = loadCUDA()
	if cudaLoaded() {
		t.Skipf("libcuda.so.1 is loaded in this process (functions it lacks: %v)", cudaMissingFunctions())
	}
	err := openCUDA("libgpunex-no-such-library.so.1")
	if !errors.Is(err, ErrComputeUnavailable) || !strings.Contains(err.Error(), "libgpunex-no-such-library.so.1 not found: install the NVIDIA driver") {
		t.Fatalf("missing library: %v", err)
	}
	// A library that exists but is not the CUDA driver: the first missing function is named.
	err = openCUDA("libm.so.6")
	if !errors.Is(err, ErrComputeUnavailable) || !strings.Contains(err.Error(), "cuInit is missing from libm.so.6") {
		t.Fatalf("library without the CUDA functions: %v", err)
	}
	// Nothing stayed resolved: every wrapper answers that its function is missing.
	if _, err := cudaDriverVersion(); cudaCode(err) != cudaUnresolved || !strings.Contains(err.Error(), "not exported") {
		t.Fatalf("wrapper after a failed load: %v", err)
	}
}

// TestEmbeddedPTX checks the kernels as text: the module headers, the entry points the
// host looks up, registers used within their declarations, branch targets defined, and the
// instruction counts of the loops that the FLOPS arithmetic is built on. ptxas checks
// more (bench/cuda/check-ptx.sh); only a GPU runs them.
func TestEmbeddedPTX(t *testing.T) {
	for _, m := range []struct {
		name, text, target string
		entries            []string
	}{
		{"fma.ptx", fmaPTX, "sm_70", []string{"fma_f32", "fma_f16x2", "copy_v4"}},
		{"mma.ptx", mmaPTX, "sm_80", []string{"mma_f16"}},
	} {
		for _, want := range []string{"\n.version 7.0\n", "\n.target " + m.target + "\n", "\n.address_size 64\n"} {
			if !strings.Contains(m.text, want) {
				t.Errorf("%s: no %q", m.name, strings.TrimSpace(want))
			}
		}
		for i, c := range m.text {
			if c > 126 || (c < 32 && c != '\n' && c != '\t') {
				t.Fatalf("%s: character %q at %d", m.name, c, i)
			}
		}
		bodies := ptxEntries(t, m.name, m.text)
		if len(bodies) != len(m.entries) {
			t.Errorf("%s: entries %v, want %v", m.name, keys(bodies), m.entries)
		}
		for _, e := range m.entries {
			body, ok := bodies[e]
			if !ok {
				t.Errorf("%s: no entry %s", m.name, e)
				continue
			}
			checkPTXBody(t, m.name+" "+e, body)
		}
	}
	for _, c := range []struct {
		text, loop, done, instr string
		count                   int
		flops, perInstr         float64
	}{
		{fmaPTX, "FMA_F32_LOOP:", "FMA_F32_DONE:", "fma.rn.f32 ", 128, fp32FLOPsPerIter, 2},
		{fmaPTX, "FMA_F16X2_LOOP:", "FMA_F16X2_DONE:", "fma.rn.f16x2 ", 128, fp16FLOPsPerIter, 4},
		{mmaPTX, "MMA_F16_LOOP:", "MMA_F16_DONE:", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 ", 8, tensorFLOPsPerIter, 4096.0 / 32},
	} {
		i, j := strings.Index(c.text, c.loop), strings.Index(c.text, c.done)
		if i < 0 || j < i {
			t.Fatalf("no loop %s ... %s", c.loop, c.done)
		}
		n := strings.Count(c.text[i:j], "\t"+c.instr)
		if n != c.count || float64(n)*c.perInstr != c.flops {
			t.Errorf("%s: %d x %q per iteration, %.0f FLOPs per thread; the Go constant says %.0f", c.loop, n, c.instr, float64(n)*c.perInstr, c.flops)
		}
	}
	// Every mma chain reads and writes its own 4 accumulators: 8 distinct chains.
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`mma\.sync\S* \t(\{[^}]*\}), \{[^}]*\}, \{[^}]*\}, (\{[^}]*\});`).FindAllStringSubmatch(mmaPTX, -1) {
		if m[1] != m[2] || seen[m[1]] {
			t.Errorf("mma chain %s accumulates into %s", m[2], m[1])
		}
		seen[m[1]] = true
	}
	if len(seen) != 8 {
		t.Errorf("%d mma chains", len(seen))
	}
}

var ptxEntryRE = regexp.MustCompile(`\.visible \.entry (\w+)\(`)

// ptxEntries splits a module into its entry points' bodies (from the parameter list to the
// closing brace), checking that braces balance.
func ptxEntries(t *testing.T, name, text string) map[string]string {
	t.Helper()
	out := map[string]string{}
	locs := ptxEntryRE.FindAllStringSubmatchIndex(text, -1)
	for k, loc := range locs {
		end := len(text)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		body := text[loc[1]:end]
		depth, closed := 0, -1
		for i, c := range body {
			if c == '{' {
				depth++
			} else if c == '}' {
				depth--
				if depth == 0 && closed < 0 && strings.HasPrefix(body[i:], "}\n") && (i == 0 || body[i-1] == '\n') {
					closed = i
				}
			}
		}
		if depth != 0 || closed < 0 {
			t.Errorf("%s: entry %s: unbalanced braces", name, text[loc[2]:loc[3]])
		}
		out[text[loc[2]:loc[3]]] = body
	}
	return out
}

var (
	ptxRegDecl = regexp.MustCompile(`\.reg \.\w+ \t?(%[a-z]+)<(\d+)>;`)
	ptxRegUse  = regexp.MustCompile(`(%[a-z]+)(\d+)\b`)
	ptxParam   = regexp.MustCompile(`\.param \.u64 (\w+)`)
	ptxParamLd = regexp.MustCompile(`ld\.param\.u64 \t%rd\d+, \[(\w+)\];`)
	ptxBranch  = regexp.MustCompile(`bra(?:\.uni)? \t(\w+);`)
	ptxLabel   = regexp.MustCompile(`(?m)^(\w+):$`)
)

// checkPTXBody checks one entry point: registers used are declared and within bounds,
// parameters loaded are declared, branch targets exist, and the body ends with ret.
func checkPTXBody(t *testing.T, name, body string) {
	t.Helper()
	code := regexp.MustCompile(`//[^\n]*`).ReplaceAllString(body, "")
	decl := map[string]int{}
	for _, m := range ptxRegDecl.FindAllStringSubmatch(code, -1) {
		n, _ := strconv.Atoi(m[2])
		if _, dup := decl[m[1]]; dup {
			t.Errorf("%s: %s declared twice", name, m[1])
		}
		decl[m[1]] = n
	}
	for _, m := range ptxRegUse.FindAllStringSubmatch(code, -1) {
		n, _ := strconv.Atoi(m[2])
		if max, ok := decl[m[1]]; !ok || n >= max {
			t.Errorf("%s: register %s%s not declared (%s<%d>)", name, m[1], m[2], m[1], max)
		}
	}
	params := map[string]bool{}
	for _, m := range ptxParam.FindAllStringSubmatch(code, -1) {
		params[m[1]] = true
	}
	loaded := ptxParamLd.FindAllStringSubmatch(code, -1)
	if len(loaded) != len(params) {
		t.Errorf("%s: %d parameters, %d loaded", name, len(params), len(loaded))
	}
	for _, m := range loaded {
		if !params[m[1]] {
			t.Errorf("%s: loads undeclared parameter %s", name, m[1])
		}
	}
	labels := map[string]bool{}
	for _, m := range ptxLabel.FindAllStringSubmatch(code, -1) {
		labels[m[1]] = true
	}
	for _, m := range ptxBranch.FindAllStringSubmatch(code, -1) {
		if !labels[m[1]] {
			t.Errorf("%s: branch to undefined label %s", name, m[1])
		}
	}
	if !strings.Contains(code, "\tret;\n}") {
		t.Errorf("%s: does not end with ret", name)
	}
	// Every instruction line ends with a semicolon.
	for _, line := range strings.Split(code, "\n") {
		l := strings.TrimSpace(line)
		if l == "" || l == "{" || l == "}" || strings.HasSuffix(l, ":") || strings.HasPrefix(l, ".param") || l == ")" || strings.HasSuffix(l, ";") {
			continue
		}
		t.Errorf("%s: line without a semicolon: %q", name, l)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestFLOPSArithmetic(t *testing.T) {
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	// The FLOPs per thread per iteration of each kernel.
	near("fp32", fp32FLOPsPerIter, 256)
	near("fp16", fp16FLOPsPerIter, 512)
	near("tensor", tensorFLOPsPerIter, 1024)
	// 132 SMs x 8 blocks x 256 threads, 256 FLOPs each per iteration, 10000 iterations in
	// 12.5 ms: 270,336 x 256 x 10,000 / 0.0125 = 55.3648128e12.
	near("fp32 TFLOPS", kernelTFLOPS(fp32FLOPsPerIter, 132*8*256, 10000, 1, 0.0125), 55.3648128)
	// Three launches in three times the time: the same rate.
	near("3 launches", kernelTFLOPS(fp32FLOPsPerIter, 132*8*256, 10000, 3, 0.0375), 55.3648128)
	// One warp, one iteration: 8 mma of 16x8x16 FMAs, 2 FLOPs each, in one second.
	near("one warp", kernelTFLOPS(tensorFLOPsPerIter, 32, 1, 1, 1)*1e12, 8*16*8*16*2)
	// An H200-sized tensor run: 132 SMs x 4 blocks x 2 waves x 256 threads x 1024 FLOPs x
	// 100,000 iterations in 50 ms = 553.6 TFLOPS.
	near("tensor TFLOPS", kernelTFLOPS(tensorFLOPsPerIter, 132*4*2*256, 100000, 1, 0.05), 553.648128)
	// Copies: 1 GiB read and 1 GiB written, 10 times in 5 ms = 4294.967296 GB/s.
	near("copy GB/s", copyGBps(1<<30, 10, 0.005), 4294.967296)
	near("no time", kernelTFLOPS(256, 1, 1, 1, 0), 0)
	near("no time", copyGBps(1, 1, 0), 0)

	if got := scaleIters(1024, 0.0125, 0.05); got != 4096 {
		t.Errorf("scaleIters = %d, want 4096", got)
	}
	if got := scaleIters(1024, 0.2, 0.05); got != 1024 {
		t.Errorf("scaleIters never shrinks below the calibrated count: %d", got)
	}
	if got := scaleIters(maxIters/2, 1e-6, 0.05); got != maxIters {
		t.Errorf("scaleIters cap: %d", got)
	}
	for t1, want := range map[float64]int{0.0005: 40, 0.002: 10, 0.05: 1, 1e-6: 100, 0: 100} {
		if got := copyLaunches(t1); got != want {
			t.Errorf("copyLaunches(%v) = %d, want %d", t1, got, want)
		}
	}
	threads := uint64(132 * 8 * 256)
	n := copyElements(140<<30, threads)
	if n == 0 || n%(4*threads) != 0 || n*16 > copyBufferMax || n*16 < copyBufferMax-4*threads*16 {
		t.Errorf("copyElements(140 GiB free) = %d", n)
	}
	if n := copyElements(2<<30, threads); n*16 > 512<<20 || n*16 < copyBufferMin {
		t.Errorf("copyElements(2 GiB free) = %d elements", n)
	}
	if n := copyElements(900<<20, threads); n != 0 {
		t.Errorf("copyElements(900 MiB free) = %d: buffers under %d MiB may fit in cache", n, copyBufferMin>>20)
	}
}

func TestDeviceMatching(t *testing.T) {
	uuid := formatGPUUUID([16]byte{0x5e, 0x01, 0x02, 0x03, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xff})
	if uuid != "GPU-5e010203-abcd-ef01-2345-6789abcdefff" {
		t.Fatalf("UUID %s", uuid)
	}
	for in, want := range map[string]string{
		"00000000:18:00.0": "00000000:18:00.0",
		"0000:18:00.0":     "00000000:18:00.0",
		"0001:AB:1F.7":     "00000001:ab:1f.7",
	} {
		if got, ok := normalBusID(in); !ok || got != want {
			t.Errorf("normalBusID(%q) = %q %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "18:00.0", "0000:18:00", "0000:zz:00.0"} {
		if _, ok := normalBusID(bad); ok {
			t.Errorf("normalBusID(%q) accepted", bad)
		}
	}
	devs := []cudaDevice{
		{Ordinal: 0, UUID: "GPU-11111111-0000-0000-0000-000000000000", PCIBusID: "0000:18:00.0"},
		{Ordinal: 1, UUID: "GPU-22222222-0000-0000-0000-000000000000", PCIBusID: "0000:2A:00.0"},
		{Ordinal: 2, PCIBusID: "0000:3b:00.0"}, // a driver that reports no UUID
	}
	for _, c := range []struct {
		uuid, bus string
		want      int
	}{
		{"GPU-22222222-0000-0000-0000-000000000000", "00000000:18:00.0", 1}, // the UUID wins
		{"gpu-11111111-0000-0000-0000-000000000000", "", 0},
		{"GPU-33333333-0000-0000-0000-000000000000", "00000000:3B:00.0", 2},
		{"GPU-33333333-0000-0000-0000-000000000000", "00000000:18:00.0", -1}, // bus of another UUID
		{"GPU-44444444-0000-0000-0000-000000000000", "", -1},
	} {
		d, err := matchCUDADevice(devs, c.uuid, c.bus)
		switch {
		case c.want < 0 && (err == nil || !strings.Contains(err.Error(), "CUDA_VISIBLE_DEVICES")):
			t.Errorf("%s %s: %+v %v", c.uuid, c.bus, d, err)
		case c.want >= 0 && (err != nil || d.Ordinal != c.want):
			t.Errorf("%s %s: device %d %v, want %d", c.uuid, c.bus, d.Ordinal, err, c.want)
		}
	}
	if _, err := matchCUDADevice(nil, "GPU-x", ""); err == nil || !strings.Contains(err.Error(), "(none)") {
		t.Errorf("no devices: %v", err)
	}
}

func TestKeepAttestable(t *testing.T) {
	b := protocol.GPUBenchmark{Model: "H200-141GB", FP32TFLOPS: 60, FP16TFLOPS: 120, TensorTFLOPS: 480, MemBandwidth: 4000}
	sheet := func(model string) (protocol.Datasheet, bool) { return protocol.FirstModels().Datasheet(model) }
	d, known := sheet(b.Model)
	err := keepAttestable(&b, cudaDevice{CCMajor: 9}, d, known)
	if !errors.Is(err, ErrComputeUnavailable) || !strings.Contains(err.Error(), "mma.sync kernel measured 480.0 TFLOPS") ||
		b.TensorTFLOPS != 0 || b.FP32TFLOPS != 60 || b.MemBandwidth != 4000 {
		t.Fatalf("Hopper: %+v %v", b, err)
	}
	b = protocol.GPUBenchmark{Model: "A100-80GB", FP32TFLOPS: 19, FP16TFLOPS: 200, TensorTFLOPS: 290, MemBandwidth: math.NaN()}
	d, known = sheet(b.Model)
	err = keepAttestable(&b, cudaDevice{CCMajor: 8}, d, known)
	if !errors.Is(err, ErrComputeUnavailable) || !strings.Contains(err.Error(), "fp16_tflops 200.0 is over 1.5 times the A100-80GB datasheet's 78.0") ||
		!strings.Contains(err.Error(), "mem_bandwidth_gbps NaN is impossible") || b.FP16TFLOPS != 0 || b.MemBandwidth != 0 || b.TensorTFLOPS != 290 || b.FP32TFLOPS != 19 {
		t.Fatalf("A100: %+v %v", b, err)
	}
	b = protocol.GPUBenchmark{Model: "RTX3090-24GB", FP32TFLOPS: 35, TensorTFLOPS: 70, MemBandwidth: 900}
	d, known = sheet(b.Model)
	if err := keepAttestable(&b, cudaDevice{CCMajor: 8}, d, known); err != nil || b.TensorTFLOPS != 70 {
		t.Fatalf("model without a datasheet: %+v %v", b, err)
	}
}

func TestTensorAttested(t *testing.T) {
	for cc, want := range map[int]bool{7: false, 8: true, 9: false, 10: false, 12: true} {
		if tensorAttested(cc) != want {
			t.Errorf("compute capability %d.x: attested %v", cc, !want)
		}
	}
}
