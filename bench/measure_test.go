package bench

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpunex/gpunex/protocol"
)

func TestStorage(t *testing.T) {
	s, err := Storage(context.Background(), t.TempDir(), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if s.SeqWriteMBps <= 0 || s.SeqReadMBps <= 0 || s.RandReadIOPS <= 0 || s.BytesMeasured != 8<<20 {
		t.Fatalf("storage figures: %+v", s)
	}
	if _, err := Storage(context.Background(), "/nonexistent/dir", 1<<20); err == nil {
		t.Fatal("no error for a missing folder")
	}
}

// TestComputeSimulated: a nominal simulated GPU scores near 100 and stays listed; one at
// 45% of its datasheet falls under the thresholds and says why.
func TestComputeSimulated(t *testing.T) {
	gpus, _ := NewSimulated("seed", []SimulatedGPU{{Model: "H100-80GB"}, {Model: "H100-80GB", PerfFactor: 0.45}}).GPUs()
	ok, err := Compute(context.Background(), gpus[0], 1, nil)
	if err != nil || ok.PerfScore < 98 || ok.Below != "" || ok.TensorTFLOPS <= 0 || ok.MemBandwidth <= 0 {
		t.Fatalf("nominal: %+v %v", ok, err)
	}
	bad, err := Compute(context.Background(), gpus[1], 1, nil)
	if err != nil || bad.PerfScore > 46 || bad.Below == "" || bad.PerfScore != protocol.FirstModels().Score(bad) {
		t.Fatalf("degraded: %+v %v", bad, err)
	}
	if _, err := Compute(context.Background(), GPUInfo{UUID: "GPU-x", Model: "H100-80GB"}, 1, nil); !errors.Is(err, ErrComputeUnavailable) {
		t.Fatalf("real GPU: %v", err)
	}
	// A simulated model without a datasheet has no figures and is kept out of offers, but
	// does not stop the run.
	b200 := GPUInfo{UUID: "GPU-y", Model: "B200-192GB", Simulated: true}
	if r, err := Compute(context.Background(), b200, 1, nil); !errors.Is(err, ErrComputeUnavailable) || r.PerfScore != 0 || !strings.HasPrefix(r.Below, protocol.NotInCatalogue) {
		t.Fatalf("simulated model without a datasheet: %+v %v", r, err)
	}
	// A catalogue that holds the model scores it.
	models := &protocol.ModelCatalogue{Seq: 2, Models: append([]protocol.ModelEntry{{Model: "B200-192GB", VRAMGB: 192,
		FP32TFLOPS: 80, FP16TFLOPS: 160, TensorTFLOPS: 1125, MemBandwidth: 8000}}, protocol.FirstModels().Models...)}
	if r, err := Compute(context.Background(), b200, 1, models); err != nil || r.PerfScore < 99 || r.Below != "" || r.TensorTFLOPS < 1100 {
		t.Fatalf("simulated model of a newer catalogue: %+v %v", r, err)
	}
}
