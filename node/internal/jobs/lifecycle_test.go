package jobs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// TestReceiptWithClockOffset replays the soak's clock skew on a provider (seed 2026): a
// provider whose clock runs 5 minutes behind the system's (debug.clock_offset) ran a job for
// 20 s. The sandbox dates the exit by the system clock, the start is on the node's; mixed,
// they made 5 min 20 s, and the receipt charged the whole 60-second lease, which the renter
// rightly disputed. The receipt charges the 20 s.
func TestReceiptWithClockOffset(t *testing.T) {
	offset := -5 * time.Minute
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}}, func(d *Deps) { d.RuntimeClockOffset = offset })
	_, renter := newKey(t)
	pv.startJob(t, "00000000000000a7", renter, "L4-24GB", 1, 60)
	pv.clk.Advance(20 * time.Second)
	pv.rt.end("00000000000000a7", sandbox.Exit{Code: 0, Reason: sandbox.ReasonExited, EndedAt: pv.clk.Now().Add(-offset)})
	_, rec := pv.ended(t, "00000000000000a7")
	if rec.Seconds != 20 || !rec.EndedAt.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("a job of 20 s on a provider whose clock is %s off the system's: charged %d s, ended at %s", offset, rec.Seconds, rec.EndedAt)
	}
}

// TestReceiptAtTheEnd: a job killed at its lease's end is charged the lease, no more,
// with the reason "lease expired"; its GPUs are free for the next job, its container is
// gone, and the job is reported to the coordinator.
func TestReceiptAtTheEnd(t *testing.T) {
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}, {Model: "L4-24GB"}})
	_, renter := newKey(t)
	gpus := pv.startJob(t, "00000000000000a5", renter, "L4-24GB", 2, 3600)
	pv.clk.Advance(time.Hour + 30*time.Second)
	pv.rt.end("00000000000000a5", sandbox.Exit{Code: 137, Reason: sandbox.ReasonTimeout, EndedAt: pv.clk.Now()})
	j, rec := pv.ended(t, "00000000000000a5")
	switch {
	case rec.Reason != "lease expired" || j.ExitReason != "lease expired" || j.ExitCode != 137:
		t.Fatalf("end reason %q, exit code %d", rec.Reason, j.ExitCode)
	case rec.Seconds != 3600 || rec.Amount != 2_000_000 || rec.Price != 1_000_000 || rec.GPUs != 2:
		t.Fatalf("charged %d s, %s USDC for 2 GPUs at %s: want the lease's hour, 2 USDC", rec.Seconds, rec.Amount, rec.Price)
	case !rec.StartedAt.Equal(t0) || !rec.EndedAt.Equal(t0.Add(time.Hour)):
		t.Fatalf("receipt from %s to %s", rec.StartedAt, rec.EndedAt)
	}
	if _, err := protocol.CheckReceipt(j.Receipt, j.Lease, mustLease(t, j.Lease), pv.clk.Now()); err != nil {
		t.Fatalf("the renter cannot check the receipt: %v", err)
	}
	eventually(t, "GPUs free", func() bool { return !pv.Busy(gpus[0].UUID) && !pv.Busy(gpus[1].UUID) })
	if !pv.rt.wasRemoved("00000000000000a5") {
		t.Fatal("the container of an ended job is left")
	}
	eventually(t, "the job reported", func() bool {
		r := pv.reports.reported()
		return len(r) == 1 && r[0].ID == "00000000000000a5" && len(r[0].Receipt) > 0
	})
}

func mustLease(t *testing.T, raw []byte) *protocol.Lease {
	t.Helper()
	l, _, err := protocol.OpenLease(raw)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLostJobChargesCountersignedUsage (security review, item 16): a job lost with its
// container (the provider restarted) after its renter countersigned four minutes of use
// gets a receipt for those four minutes, which the checkpoint rule charges in full; the
// time after the last checkpoint, which the provider cannot show, is not claimed.
func TestLostJobChargesCountersignedUsage(t *testing.T) {
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}, {Model: "L4-24GB"}})
	_, renter := newKey(t)
	const lost = "0000000000000011"
	pv.leaseJob(t, lost, renter, "L4-24GB", 2, 3600)
	pv.gpus.release(lost)
	if _, err := pv.ledger.UpdateJob(lost, func(j *ledger.Job) error {
		j.State, j.StartedAt, j.UpdatedAt = ledger.JobRunning, t0, t0.Add(5*time.Minute)
		j.Checkpoint, j.CheckpointCountersig, j.CheckpointSeconds, j.MeteredAt = []byte("checkpoint"), []byte("countersignature"), 240, t0.Add(4*time.Minute)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pv.clk.Advance(time.Hour)
	if err := pv.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, rec := pv.ended(t, lost)
	want := protocol.Cost(rec.Price, 2, 240)
	if !strings.HasPrefix(rec.Reason, "lost") || rec.Seconds != 240 || rec.Amount != want || protocol.CheckpointCharge(rec, 240) != want {
		t.Fatalf("a lost job with 240 s countersigned: %q, %d s, %s USDC (charged %s); want %s", rec.Reason, rec.Seconds, rec.Amount, protocol.CheckpointCharge(rec, 240), want)
	}
}

// TestReconcileAfterRestart: after a provider restart, a job the ledger says runs and the
// sandbox still holds is watched again and keeps its GPU (even one the probe no longer
// finds); one whose container is gone ends "lost", uncharged without a checkpoint; a job leased but never
// started fails; containers of ended jobs, and those no job owns, are removed; the
// renter's side of the ledger is left alone.
func TestReconcileAfterRestart(t *testing.T) {
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}, {Model: "L4-24GB"}, {Model: "L4-24GB"}})
	_, renter := newKey(t)
	const (
		running = "0000000000000001"
		gone    = "0000000000000002"
		ended   = "0000000000000003"
		leased  = "0000000000000004"
		rented  = "0000000000000005"
	)
	// The jobs as the provider left them before its restart.
	pv.leaseJob(t, running, renter, "L4-24GB", 1, 3600)
	pv.leaseJob(t, gone, renter, "L4-24GB", 1, 3600)
	pv.leaseJob(t, leased, renter, "L4-24GB", 1, 3600)
	pv.gpus.release(running)
	pv.gpus.release(gone)
	pv.gpus.release(leased)
	set := func(id string, edit func(*ledger.Job)) {
		if _, err := pv.ledger.UpdateJob(id, func(j *ledger.Job) error { edit(j); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	set(running, func(j *ledger.Job) {
		j.State, j.StartedAt, j.GPUs = ledger.JobRunning, t0, []string{pv.sim[0].UUID, "GPU-not-found-by-the-probe"}
	})
	set(gone, func(j *ledger.Job) {
		j.State, j.StartedAt, j.UpdatedAt, j.GPUs = ledger.JobRunning, t0, t0.Add(5*time.Minute), []string{pv.sim[1].UUID}
	})
	pv.ledger.CreateJob(ledger.Job{ID: ended, Side: "provider", State: ledger.JobEnded, CreatedAt: t0})
	pv.ledger.CreateJob(ledger.Job{ID: rented, Side: "renter", State: ledger.JobRunning, CreatedAt: t0})
	for _, id := range []string{running, ended, leased, "stray"} {
		pv.rt.run(id)
	}
	pv.clk.Advance(time.Hour / 2)

	if err := pv.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pv.job(t, running).State != ledger.JobRunning || !pv.Busy(pv.sim[0].UUID) || !pv.Busy("GPU-not-found-by-the-probe") {
		t.Fatal("a job found again lost its GPUs")
	}
	_, rec := pv.ended(t, gone)
	if rec.Reason != "lost: container gone after a provider restart" || rec.Seconds != 0 || rec.Amount != 0 {
		t.Fatalf("a job whose container is gone: %q, %d s, %s USDC", rec.Reason, rec.Seconds, rec.Amount)
	}
	if j := pv.job(t, leased); j.State != ledger.JobFailed || j.Error != "provider restarted before the job started" {
		t.Fatalf("a job leased before the restart: %s %q", j.State, j.Error)
	}
	for _, id := range []string{ended, leased, "stray"} {
		if !pv.rt.wasRemoved(id) {
			t.Errorf("container %s left after the restart", id)
		}
	}
	if pv.rt.wasRemoved(running) || pv.rt.wasRemoved(rented) {
		t.Fatal("a running job's container was removed")
	}
	if j, _ := pv.ledger.GetJob(rented); j.State != ledger.JobRunning || len(j.Receipt) > 0 {
		t.Fatal("the renter's side of the ledger was reconciled")
	}
	if _, err := pv.Reserve("next", "L4-24GB", 3); err == nil || !strings.Contains(err.Error(), "capacity: 2 of 3") {
		t.Fatalf("three GPUs asked while a job found again holds one: %v", err)
	}
	pv.Release("next")

	// The job found again is watched: its end is recorded as if nothing happened.
	pv.clk.Advance(time.Minute)
	pv.rt.end(running, sandbox.Exit{Code: 0, Reason: sandbox.ReasonExited})
	if _, rec := pv.ended(t, running); rec.Seconds != 31*60 || rec.Reason != sandbox.ReasonExited {
		t.Fatalf("a job found again ends with %q after %d s", rec.Reason, rec.Seconds)
	}
}

// TestStopAll: at shutdown every running job is stopped with the reason given, its receipt
// is written before StopAll returns, and no proposal is taken any more.
func TestStopAll(t *testing.T) {
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}, {Model: "L4-24GB"}})
	_, renter := newKey(t)
	pv.startJob(t, "00000000000000b5", renter, "L4-24GB", 1, 3600)
	pv.startJob(t, "00000000000000b6", renter, "L4-24GB", 1, 3600)
	pv.clk.Advance(10 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pv.StopAll(ctx, "provider shutting down")
	for _, id := range []string{"00000000000000b5", "00000000000000b6"} {
		j := pv.job(t, id)
		if j.State != ledger.JobEnded || j.ExitReason != "provider shutting down" {
			t.Fatalf("job %s after StopAll: %s %q", id, j.State, j.ExitReason)
		}
	}
	if _, _, _, err := pv.decide(&protocol.Proposal{Job: "00000000000000f1", Model: "L4-24GB", GPUs: 1}, nil, pv.clk.Now()); err == nil {
		t.Fatal("a proposal taken after StopAll")
	}
}
