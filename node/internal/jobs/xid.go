package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/sandbox"
)

// Xid errors during jobs: the driver reports a GPU's faults as they happen (NVML's
// critical-error events; InjectXID for simulated GPUs). A fatal one (bench.FatalXID: the
// GPU must be reset or repaired) ends the job on that GPU as the provider's fault, like a
// GPU fallen off the bus, and takes the GPU out of the slots until the node restarts: the
// probe may well find it healthy again, and the next renter must not get it unreset. An
// error an application causes itself (13, 31, 43...) ends that job only, by itself.

// WatchXIDs watches the GPUs' Xid errors until ctx ends; without a probe that reports them
// (no driver, a recorded probe) it returns at once.
func (r *Runner) WatchXIDs(ctx context.Context) {
	if r.probe == nil {
		return
	}
	p, err := r.probe()
	if err != nil {
		return
	}
	defer p.Close()
	w, ok := p.(bench.XIDWatcher)
	if !ok {
		return
	}
	if err := w.WatchXIDs(ctx, r.xidFound); err != nil {
		level := r.log.Warn
		if errors.Is(err, bench.ErrNoDriver) {
			level = r.log.Debug
		}
		level("GPU Xid errors are not watched", "err", err)
	}
}

// xidFound takes one Xid error: a fatal one takes its GPU out of the slots and stops the
// job on it with a "lost" reason naming the GPU and the error.
func (r *Runner) xidFound(x bench.XID) {
	fatal, meaning := bench.FatalXID(x.Code)
	if !fatal {
		r.log.Info("GPU reported an Xid error an application causes", "gpu", x.UUID, "xid", x.Code)
		return
	}
	job, model, ok := r.gpus.fault(x.UUID)
	if !ok {
		return // not a GPU of the jobs
	}
	r.log.Error("GPU reported a fatal Xid error: left out of jobs until the node restarts (reset it first)", "gpu", x.UUID, "model", model, "xid", x.Code, "meaning", meaning)
	if job != "" {
		r.stopOnLostGPU(job, fmt.Sprintf("%sGPU %s (%s) reported Xid %d during the job: %s", ReasonGPULost, x.UUID, model, x.Code, meaning))
	}
}

// stopOnLostGPU stops a job whose GPU failed under it with its "lost" reason: the
// provider's fault, for which the renter pays only the usage it countersigned and which
// the coordinator counts against the provider's job completion.
func (r *Runner) stopOnLostGPU(job, reason string) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.rt.Kill(ctx, job, reason); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			r.log.Warn("stopping a job whose GPU was lost failed", "job", job, "err", err)
		} else if err == nil {
			r.log.Warn("job stopped: its GPU was lost", "job", job, "why", reason)
		}
	}()
}

// fault takes a GPU out of the slots for good (until the runner restarts) after a fatal
// Xid error, and returns the job on it ("" when none) and its model; ok is false when the
// GPU has no slot.
func (g *gpuSlots) fault(uuid string) (job, model string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.list {
		if s.gpu.UUID != uuid {
			continue
		}
		if g.faulted == nil {
			g.faulted = map[string]bool{}
		}
		if g.lost == nil {
			g.lost = map[string]bool{}
		}
		g.faulted[uuid], g.lost[uuid] = true, true
		return s.job, s.model, true
	}
	return "", "", false
}
