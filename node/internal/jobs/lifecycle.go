package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// A job's life on the provider: its folder (jobDir: the image archive while it arrives,
// the log, the output), started in the sandbox (start), watched until it ends (watch),
// ended with its receipt, its GPUs freed and its container removed (finish); found again
// after a restart (Reconcile); stopped at shutdown (StopAll).

func (r *Runner) jobDir(id string) string { return filepath.Join(r.dir, id) }

// start runs the job in the sandbox and watches it.
func (r *Runner) start(p *protocol.Proposal, leaseRaw []byte, img jobImage, gpus []sandbox.GPU) error {
	l, _, err := protocol.OpenLease(leaseRaw)
	if err != nil {
		return err
	}
	dir := r.jobDir(p.Job)
	out := filepath.Join(dir, "output")
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	now := r.clock.Now()
	wall := l.EndsAt.Sub(now)
	if wall <= 0 {
		return errors.New("the lease ended before the job could start")
	}
	spec := sandbox.Spec{
		ID: p.Job, Image: img.Ref, ImageDigest: img.Digest, Args: p.Args, Env: p.Env, GPUs: gpus, Egress: l.Egress,
		MemoryBytes: l.Limits.MemoryBytes, CPUMillis: l.Limits.CPUMillis, Pids: l.Limits.Pids, ScratchBytes: l.Limits.ScratchBytes,
		WallClock: wall, OutputDir: out, LogPath: filepath.Join(dir, "log"),
		InputDir: r.jobInputDir(p), // data in (inputs.go)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = r.rt.Start(ctx, spec)
	if errors.Is(err, sandbox.ErrImageChanged) {
		r.rt.Remove(context.Background(), p.Job)
		if spec.ImageDigest, err = r.imageChanged(p, img); err == nil {
			err = r.rt.Start(ctx, spec)
		}
	}
	if err != nil {
		r.rt.Remove(context.Background(), p.Job)
		return fmt.Errorf("start: %w", err)
	}
	started := r.clock.Now()
	if _, err := r.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
		j.State, j.StartedAt, j.UpdatedAt = ledger.JobRunning, started, started
		return nil
	}); err != nil {
		return err
	}
	r.metrics.JobsStarted.Inc()
	r.log.Info("job started", "job", p.Job, "renter", p.Renter, "gpus", len(gpus), "image", img.Ref, "digest", spec.ImageDigest)
	r.watch(p.Job)
	return nil
}

// watch waits for a job's end in the background and then writes its receipt.
func (r *Runner) watch(id string) {
	ctx, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.cancels[id] = cancel
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		if stop := r.cfg.UnmeteredStop.Duration; stop > 0 {
			go r.stopUnmetered(ctx, id, stop)
		}
		exit, err := r.rt.Wait(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return // the node is closing without stopping jobs; the next start resumes
			}
			exit = sandbox.Exit{Code: -1, Reason: "lost: " + err.Error()}
		}
		r.finish(id, exit)
	}()
}

// finish writes the final receipt of a job, frees its GPUs and removes its container.
func (r *Runner) finish(id string, exit sandbox.Exit) {
	defer r.sessions.forget(id)
	j, err := r.ledger.GetJob(id)
	if err != nil || j.State == ledger.JobEnded {
		return
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return
	}
	started := j.StartedAt
	ended := exit.EndedAt
	if !ended.IsZero() {
		// The sandbox's clock is the system's; the start is on the node's.
		ended = ended.Add(r.runtimeOffset)
	}
	if ended.IsZero() || ended.Before(started) {
		ended = r.clock.Now()
	}
	if exit.Code != 0 && !strings.HasPrefix(exit.Reason, "lost") {
		// A job that failed may have failed because its GPU did: look now rather than at
		// the next hourly check, and put it on the provider if so.
		if why := r.gpus.lostUnder(id); why != "" {
			exit.Reason = fmt.Sprintf("%s (the job ended: %s, exit code %d)", why, exit.Reason, exit.Code)
		}
	}
	if strings.HasPrefix(exit.Reason, "lost") {
		// The provider cannot show how long it ran: the receipt claims what the renter
		// countersigned, its last checkpoint (nothing without one).
		ended = started.Add(time.Duration(j.CheckpointSeconds) * time.Second)
	}
	if ended.After(l.EndsAt) {
		ended = l.EndsAt
	}
	secs := int64(ended.Sub(started) / time.Second)
	reason := exit.Reason
	if reason == sandbox.ReasonTimeout {
		reason = "lease expired"
	}
	rec := protocol.Receipt{
		Version: protocol.JobVersion, Job: id, Lease: protocol.RecordSHA256(j.Lease), Provider: l.Provider, Renter: l.Renter,
		Model: l.Model, GPUs: l.GPUs, StartedAt: started.UTC(), EndedAt: ended.UTC(), Seconds: secs, Price: l.Price,
		Amount: protocol.Cost(l.Price, l.GPUs, secs), Reason: reason, ExitCode: exit.Code,
	}
	raw, err := protocol.Seal(protocol.KindReceipt, rec, r.peer.Key)
	if err != nil {
		r.log.Error("signing the receipt failed", "job", id, "err", err)
		return
	}
	if _, err := r.ledger.UpdateJob(id, func(j *ledger.Job) error {
		j.State, j.Receipt, j.ExitCode, j.ExitReason, j.UpdatedAt = ledger.JobEnded, raw, exit.Code, reason, r.clock.Now()
		return nil
	}); err != nil {
		r.log.Error("storing the receipt failed", "job", id, "err", err)
		return
	}
	removed := make(chan struct{}) // real GPUs are cleaned once nothing of the job runs
	r.gpus.releaseAfterCleaning(id, removed)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.rt.Remove(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		r.log.Warn("removing the job's container failed", "job", id, "err", err)
	}
	close(removed)
	r.dropInput(id) // its copy of the input; the chunks stay cached (inputs.go)
	r.mu.Lock()
	delete(r.cancels, id)
	r.mu.Unlock()
	label := exit.Reason
	if strings.HasPrefix(label, "lost") {
		label = "lost"
	} else if label == sandbox.ReasonTimeout {
		label = "lease_expired"
	}
	r.metrics.JobsEnded.WithLabelValues(label).Inc()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.pruneImages() }()
	r.log.Info("job ended", "job", id, "reason", reason, "exit_code", exit.Code, "seconds", secs, "amount_usdc", rec.Amount)
	if j, err := r.ledger.GetJob(id); err == nil {
		go r.reports.ReportJob(context.Background(), j)
	}
}

// Reconcile runs at start: jobs the ledger says are running are found again in the
// sandbox and watched, or ended; containers the ledger does not know are removed.
func (r *Runner) Reconcile(ctx context.Context) error {
	if r.rt == nil {
		return nil
	}
	infos, err := r.rt.List(ctx)
	if err != nil {
		return err
	}
	held := map[string]sandbox.Info{}
	for _, in := range infos {
		held[in.ID] = in
	}
	jobs, err := r.ledger.Jobs()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, j := range jobs {
		if j.Side != "provider" {
			continue
		}
		known[j.ID] = true
		switch j.State {
		case ledger.JobRunning:
			r.Hold(j.ID, j.GPUs)
			if _, ok := held[j.ID]; ok {
				r.log.Info("job found again after restart", "job", j.ID)
				r.watch(j.ID)
			} else {
				r.finish(j.ID, sandbox.Exit{Code: -1, Reason: "lost: container gone after a provider restart"})
			}
		case ledger.JobEnded, ledger.JobFailed:
			if _, ok := held[j.ID]; ok {
				r.rt.Remove(ctx, j.ID) // a crash between the receipt and the removal
			}
		case ledger.JobLeased:
			// The image never arrived or the start never happened: no charge.
			r.ledger.UpdateJob(j.ID, func(j *ledger.Job) error {
				j.State, j.Error, j.UpdatedAt = ledger.JobFailed, "provider restarted before the job started", r.clock.Now()
				return nil
			})
			r.rt.Remove(ctx, j.ID)
		}
	}
	for id := range held {
		if !known[id] {
			r.log.Warn("removing a container no job owns", "container", id)
			r.rt.Remove(ctx, id)
		}
	}
	// A job may have ended while the node was down, or before its GPUs were cleaned.
	r.gpus.cleanAfterRestart()
	return nil
}

// StopAll ends every running job with a reason and waits for their receipts.
func (r *Runner) StopAll(ctx context.Context, reason string) {
	r.mu.Lock()
	r.closed = true
	var ids []string
	for id := range r.cancels {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	r.gpus.stop()
	for _, id := range ids {
		if err := r.rt.Kill(ctx, id, reason); err != nil {
			r.log.Warn("stopping a job failed", "job", id, "err", err)
		}
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.mu.Lock()
		for _, c := range r.cancels {
			c()
		}
		r.mu.Unlock()
	}
}
