package jobs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// TestFatalXIDStopsItsJob: a fatal Xid error the driver reports for a GPU under a running
// job (InjectXID on the simulated probe) stops that job with a "lost" reason naming the GPU
// and the error, the provider's fault; the GPU is leased to no new job, even after a probe
// finds it healthy; an Xid error an application causes (13) stops nothing.
func TestFatalXIDStopsItsJob(t *testing.T) {
	gpus := []bench.SimulatedGPU{{Model: "H100-80GB"}, {Model: "H100-80GB"}}
	pv := newProvider(t, nil, gpus)
	_, renter := newKey(t)
	faulty := pv.startJob(t, "00000000000000b1", renter, "H100-80GB", 1, 3600)
	other := pv.startJob(t, "00000000000000b2", renter, "H100-80GB", 1, 3600)
	pv.clk.Advance(10 * time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { pv.WatchXIDs(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Sent until the watch has started: the driver reports each error once.
	eventually(t, "the job on the faulty GPU stopped", func() bool {
		bench.InjectXID(faulty[0].UUID, 79)
		return pv.job(t, "00000000000000b1").State == ledger.JobEnded
	})
	_, rec := pv.ended(t, "00000000000000b1")
	if !strings.HasPrefix(rec.Reason, ReasonGPULost) || !strings.Contains(rec.Reason, faulty[0].UUID) || !strings.Contains(rec.Reason, "Xid 79") ||
		!strings.Contains(rec.Reason, "fallen off the bus") || !protocol.ProviderFault(rec.Reason) || rec.Seconds != 0 {
		t.Fatalf("end reason %q, %d s: should be lost, the provider's fault, naming the GPU and the Xid error", rec.Reason, rec.Seconds)
	}
	bench.InjectXID(other[0].UUID, 13) // the job's own bad memory access
	if pv.rt.killedWith("00000000000000b2") != "" || pv.job(t, "00000000000000b2").State != ledger.JobRunning {
		t.Fatal("an application's Xid error stopped its job")
	}
	eventually(t, "the faulty GPU freed of its job", func() bool { return !pv.Busy(faulty[0].UUID) })
	healthy, _ := bench.NewSimulated(pv.peer.ID.String(), gpus).GPUs()
	pv.Probed(healthy)
	if _, err := pv.Reserve("next", "H100-80GB", 1); err == nil || !strings.Contains(err.Error(), "capacity: 0 of 1") {
		t.Fatalf("a GPU with a fatal Xid error leased again after a healthy probe: %v", err)
	}
}
