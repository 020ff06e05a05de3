package protocol

import (
	"strings"
	"testing"
	"time"
)

func TestScoreAndThresholds(t *testing.T) {
	h100, _ := DatasheetFor("H100-80GB")
	full := GPUBenchmark{Model: "H100-80GB", FP32TFLOPS: h100.FP32TFLOPS, FP16TFLOPS: h100.FP16TFLOPS, TensorTFLOPS: h100.TensorTFLOPS, MemBandwidth: h100.MemBandwidth}
	cases := []struct {
		name  string
		g     GPUBenchmark
		score int
		below string
	}{
		{"nominal", full, 100, ""},
		{"above datasheet is capped", GPUBenchmark{Model: "H100-80GB", TensorTFLOPS: 2 * h100.TensorTFLOPS}, 100, ""},
		{"throttled to 60%", GPUBenchmark{Model: "H100-80GB", FP32TFLOPS: 0.6 * h100.FP32TFLOPS, FP16TFLOPS: 0.6 * h100.FP16TFLOPS, TensorTFLOPS: 0.6 * h100.TensorTFLOPS, MemBandwidth: 0.6 * h100.MemBandwidth}, 60, ""},
		{"tensor at 45%", GPUBenchmark{Model: "H100-80GB", TensorTFLOPS: 0.45 * h100.TensorTFLOPS, MemBandwidth: h100.MemBandwidth}, 68, "tensor_tflops 340.4 TFLOPS is under the threshold of 378.2"},
		{"bandwidth at 50%", GPUBenchmark{Model: "H100-80GB", MemBandwidth: 1000}, 50, "mem_bandwidth_gbps 1000.0 GB/s is under the threshold of 1200.0"},
		{"nothing measured", GPUBenchmark{Model: "H100-80GB"}, 0, ""},
		{"unknown model", GPUBenchmark{Model: "X-1GB", TensorTFLOPS: 5}, 0, ""},
	}
	for _, c := range cases {
		if got := ScoreGPU(c.g); got != c.score {
			t.Errorf("%s: score %d; want %d", c.name, got, c.score)
		}
		if got := Shortfall(c.g); (c.below == "") != (got == "") || !strings.Contains(got, c.below) {
			t.Errorf("%s: shortfall %q; want %q", c.name, got, c.below)
		}
	}
}

func TestAttestationChecks(t *testing.T) {
	csk, coord := newKey(t)
	psk, prov := newKey(t)
	trust := NewTrust(coord)
	challenge := seal(t, KindChallenge, Challenge{Version: 1, Coordinator: coord.String(), Provider: prov.String(), Nonce: strings.Repeat("ab", 16), IssuedAt: testNow}, csk)
	g := GPUBenchmark{UUID: "GPU-1", Model: "L4-24GB", TensorTFLOPS: 100, MemBandwidth: 280}
	g.PerfScore = ScoreGPU(g)
	a := Attestation{Version: 1, Provider: prov.String(), Seq: 1, IssuedAt: testNow.Add(time.Minute), Challenge: challenge,
		DriverVersion: "535.129.03", CUDAVersion: "12.2", GPUs: []GPUBenchmark{g}, Storage: StorageBenchmark{SeqWriteMBps: 500}}
	if _, err := CheckAttestation(seal(t, KindAttestation, a, psk), testNow.Add(time.Hour), trust); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckAttestation(seal(t, KindAttestation, a, psk), testNow.Add(MaxAttestationAge+time.Hour), trust); Reason(err) != "expired" {
		t.Fatalf("stale attestation: %v", err)
	}
	late := a
	late.IssuedAt = testNow.Add(ChallengeTTL + time.Minute)
	if _, err := CheckAttestation(seal(t, KindAttestation, late, psk), testNow.Add(2*time.Hour), trust); Reason(err) != "replay" {
		t.Fatalf("old challenge reused: %v", err)
	}
	if _, err := CheckAttestation(seal(t, KindAttestation, a, psk), testNow.Add(time.Hour), NewTrust()); Reason(err) != "untrusted" {
		t.Fatalf("untrusted challenge: %v", err)
	}
	inflated := a
	inflated.GPUs = []GPUBenchmark{g}
	inflated.GPUs[0].PerfScore = 99
	if _, err := CheckAttestation(seal(t, KindAttestation, inflated, psk), testNow.Add(time.Hour), trust); Reason(err) != "invalid" {
		t.Fatalf("inflated score: %v", err)
	}
	_, other := newKey(t)
	stolen := a
	stolen.Provider = other.String()
	osk, _ := newKey(t)
	if _, err := CheckAttestation(seal(t, KindAttestation, stolen, osk), testNow.Add(time.Hour), trust); err == nil {
		t.Fatal("another provider's challenge accepted")
	}
}
