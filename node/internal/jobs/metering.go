package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"

	"golang.org/x/sync/errgroup"
)

// Metering, both ends: while a job runs, its renter asks the provider for a signed usage
// checkpoint every interval (the "checkpoint" op of the job-control stream) and
// countersigns it when it is no more than the renter observed, so that a dispute can only
// concern the last interval. A provider stops a job whose renter stops countersigning; a
// renter takes a job whose provider sent no receipt by the lease's end as abandoned.

// The provider's end.

// ReasonUnmetered ends a job whose renter stopped countersigning its usage.
const ReasonUnmetered = "renter stopped countersigning usage"

// firstCheckpointDue is how long after its start a job's first countersigned checkpoint
// is due: one interval and the meter's tolerance. A renter that never countersigns pays
// at most CheckpointAllowance, so running on would be unpaid.
const firstCheckpointDue = protocol.CheckpointInterval + protocol.MeterTolerance

// errUnmeteredRenter refuses the proposals of a renter whose job this provider stopped
// for want of countersigned usage, for jobs.unmetered_renter_ban.
var errUnmeteredRenter = errors.New("this renter stopped countersigning the usage of a job")

// stopUnmetered stops a running job once its renter has countersigned no checkpoint for
// stop, or none at all firstCheckpointDue (at most stop) after the start: past its last
// checkpoint, a renter that does not countersign pays at most one checkpoint interval, so
// running on would be unpaid. The renter is recorded, and its proposals refused for
// jobs.unmetered_renter_ban. A job found again after a restart whose due time passed while
// the node was down gets stop from then: the renter could not reach the provider.
func (r *Runner) stopUnmetered(ctx context.Context, id string, stop time.Duration) {
	watched := r.clock.Now()
	for {
		j, err := r.ledger.GetJob(id)
		if err != nil || j.State != ledger.JobRunning {
			return
		}
		last, due := j.StartedAt, j.StartedAt.Add(min(stop, firstCheckpointDue))
		if j.MeteredAt.After(last) {
			last, due = j.MeteredAt, j.MeteredAt.Add(stop)
		}
		if due.Before(watched) {
			last, due = watched, watched.Add(stop)
		}
		if wait := due.Sub(r.clock.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-r.clock.After(wait):
			}
			continue // a checkpoint may have been countersigned meanwhile
		}
		r.log.Warn("stopping a job: its renter countersigned no usage", "job", id, "renter", j.Peer, "since", last)
		if err := r.ledger.RecordUnmeteredRenter(j.Peer, ledger.UnmeteredRenter{Job: id, StoppedAt: r.clock.Now()}); err != nil {
			r.log.Warn("recording an unmetered renter failed", "renter", j.Peer, "err", err)
		}
		if err := r.rt.Kill(ctx, id, ReasonUnmetered); err != nil {
			r.log.Warn("stopping an unmetered job failed", "job", id, "err", err)
		}
		return
	}
}

// refuseUnmetered says why a renter's proposal is refused when this provider stopped one
// of its jobs for want of countersigned usage less than jobs.unmetered_renter_ban ago.
func (r *Runner) refuseUnmetered(renter string, now time.Time) error {
	ban := r.cfg.UnmeteredRenterBan.Duration
	if ban <= 0 {
		return nil
	}
	u, err := r.ledger.GetUnmeteredRenter(renter)
	if err != nil || !now.Before(u.StoppedAt.Add(ban)) {
		return nil
	}
	return fmt.Errorf("%w: %w: this provider stopped job %s at %s and refuses its proposals until %s",
		ErrRefused, errUnmeteredRenter, u.Job, u.StoppedAt.UTC().Format(time.RFC3339), u.StoppedAt.Add(ban).UTC().Format(time.RFC3339))
}

// checkpoint signs a usage checkpoint of a running job: the seconds since its start (at
// most its lease) and what they cost.
func (r *Runner) checkpoint(j ledger.Job) ([]byte, *protocol.Checkpoint, error) {
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return nil, nil, err
	}
	now := r.clock.Now()
	until := now
	if until.After(l.EndsAt) {
		until = l.EndsAt
	}
	secs := max(0, int64(until.Sub(j.StartedAt)/time.Second))
	cp := protocol.Checkpoint{Version: protocol.JobVersion, Job: j.ID, Lease: protocol.RecordSHA256(j.Lease), Provider: l.Provider,
		Renter: l.Renter, Seconds: secs, Amount: protocol.Cost(l.Price, l.GPUs, secs), At: now.UTC()}
	raw, err := protocol.Seal(protocol.KindCheckpoint, cp, r.peer.Key)
	return raw, &cp, err
}

// meter serves one checkpoint exchange: a signed checkpoint out, the renter's
// countersignature back, kept when it is the latest. An ended job answers with its end.
func (r *Runner) meter(s network.Stream, in *bufio.Reader, j ledger.Job, remote peer.ID) {
	if j.State != ledger.JobRunning {
		sendMsg(s, protocol.JobMsg{Type: "end", Status: wireStatus(viewJob(j, r.clock.Now())), Record: j.Receipt})
		return
	}
	raw, cp, err := r.checkpoint(j)
	if err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "checkpoint", Record: raw}); err != nil {
		return
	}
	m, err := readMsg(in)
	if err != nil {
		return
	}
	if m.Type != "countersign" {
		r.log.Warn("the renter refused a usage checkpoint", "job", j.ID, "renter", remote, "seconds", cp.Seconds, "why", m.Reason)
		return
	}
	if _, err := protocol.CheckCountersignature(m.Record, raw, protocol.KindCheckpoint, remote, r.clock.Now()); err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	_, err = r.ledger.UpdateJob(j.ID, func(j *ledger.Job) error {
		// A lease extended meanwhile came with a checkpoint of its own: one of the lease
		// extended would not go with it in a report.
		if cp.Lease != protocol.RecordSHA256(j.Lease) {
			return errLeaseChanged
		}
		if cp.Seconds >= j.CheckpointSeconds {
			j.Checkpoint, j.CheckpointCountersig, j.CheckpointSeconds, j.MeteredAt = raw, m.Record, cp.Seconds, r.clock.Now()
		}
		return nil
	})
	if err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	sendMsg(s, protocol.JobMsg{Type: "ok"})
}

// errLeaseChanged refuses to keep a checkpoint of a lease that was extended while it was
// being countersigned.
var errLeaseChanged = errors.New("the job's lease was extended meanwhile: the checkpoint names the lease extended")

// The renter's end.

// Meter keeps the usage of this node's running rented jobs countersigned: every
// checkpoint interval it asks each job's provider for a checkpoint and countersigns it
// when it matches what this node observed; it takes the final receipt of a job that ended
// and sends again the disputes that did not reach the coordinator. It keeps the clock
// this node observes with in step (CheckClock).
func (r *Renter) Meter(ctx context.Context) {
	r.CheckClock()
	clockKept := make(chan struct{})
	go func() { r.keepClock(ctx); close(clockKept) }()
	defer func() { <-clockKept }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(r.interval):
		}
		js, err := r.ledger.Jobs()
		if err != nil {
			continue
		}
		var workers errgroup.Group
		workers.SetLimit(16)
		for _, j := range js {
			pending := j.State == ledger.JobRunning || (len(j.Dispute) > 0 && j.ReportedAt.IsZero())
			if j.Side != "renter" || !pending || ctx.Err() != nil {
				continue
			}
			workers.Go(func() error {
				if j.State == ledger.JobRunning {
					// Asked first, so that a receipt the provider holds is taken even
					// when this node comes back after the lease's end.
					r.meterOnce(ctx, j)
					if cur, err := r.ledger.GetJob(j.ID); err == nil && cur.State == ledger.JobRunning && r.leaseOver(cur) {
						r.reportAbandoned(ctx, cur)
					}
				} else if r.escrow.Dispute(ctx, j) == nil {
					r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error { x.ReportedAt = r.clock.Now(); return nil })
				}
				return nil
			})
		}
		workers.Wait()
	}
}

// AbandonAfter is how long after a job's lease ends its renter waits for the receipt
// before it takes the job as abandoned by its provider.
var AbandonAfter = 5 * time.Minute

// leaseOver says whether a running job's lease ended AbandonAfter ago with no receipt.
func (r *Renter) leaseOver(j ledger.Job) bool {
	l, _, err := protocol.OpenLease(j.Lease)
	return err == nil && len(j.Receipt) == 0 && !r.clock.Now().Before(l.EndsAt.Add(AbandonAfter))
}

// reportAbandoned ends a job whose provider sent no receipt by its lease's end, and tells
// the coordinator of its escrow, with the usage this node countersigned as proof that it
// ran: the coordinator counts the job against the provider when its hold expires with no
// report from it (docs/protocols/settlement.md, "Abandoned jobs"). A failed delivery is
// tried again at the next interval, until the hold's grace has passed.
func (r *Renter) reportAbandoned(ctx context.Context, j ledger.Job) {
	now := r.clock.Now()
	why := fmt.Sprintf("abandoned by its provider: no receipt by the lease's end (%d s of usage countersigned)", j.CheckpointSeconds)
	var err error
	told := false
	switch {
	case len(j.Checkpoint) == 0:
		why = "the provider sent no receipt by the lease's end, and no usage was countersigned: nothing to report"
	case protocol.HoldCoordinator(j.Proposal) == "":
		why += "; the job has no escrow hold, so no coordinator to tell"
	default:
		if err = r.escrow.ReportAbandoned(ctx, j); err == nil {
			why, told = why+"; the coordinator was told", true
		}
	}
	// The hold is settled already (the provider reported the job, or it expired): nothing
	// to try again.
	final := err != nil && strings.Contains(err.Error(), "settled already")
	if final {
		why = "the provider sent this node no receipt by the lease's end, and the job's hold is settled already at the coordinator (" + err.Error() + ")"
		err = nil
	}
	if l, _, lerr := protocol.OpenLease(j.Lease); err != nil && !final && lerr == nil && now.Before(l.EndsAt.Add(protocol.HoldGrace)) {
		r.log.Debug("the account of an abandoned job was not delivered; trying again", "job", j.ID, "err", err)
		return
	} else if err != nil {
		why += "; the coordinator could not be told: " + err.Error()
	}
	r.log.Warn("job abandoned by its provider", "job", j.ID, "provider", j.Peer, "detail", why)
	r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		if x.State != ledger.JobRunning {
			return nil
		}
		x.State, x.Error, x.UpdatedAt = ledger.JobFailed, why, now
		if told {
			x.AbandonReported = now
		}
		return nil
	})
}

// checkObserved checks a provider's checkpoint of a job against its lease and against what
// this node observed by now: no more seconds than since it saw the start (plus the
// tolerance), no fewer than the last one it countersigned.
func checkObserved(j ledger.Job, raw []byte, now time.Time) (*protocol.Checkpoint, error) {
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return nil, err
	}
	cp, err := protocol.CheckCheckpoint(raw, j.Lease, l, now)
	if err != nil {
		return nil, err
	}
	limit := int64(now.Sub(j.ObservedStart)/time.Second) + int64(protocol.MeterTolerance/time.Second)
	switch {
	case j.ObservedStart.IsZero():
		return nil, errors.New("this node did not see the job start")
	case cp.Seconds > limit:
		return nil, fmt.Errorf("checkpoint counts %d s; this node saw the job start %d s ago", cp.Seconds, limit-int64(protocol.MeterTolerance/time.Second))
	case cp.Seconds < j.CheckpointSeconds:
		return nil, fmt.Errorf("checkpoint counts %d s, less than the %d s already countersigned", cp.Seconds, j.CheckpointSeconds)
	}
	return cp, nil
}

// meterOnce asks a running job's provider for a checkpoint and countersigns it when it is
// no more than this node observed, and no less than the last one.
func (r *Renter) meterOnce(ctx context.Context, j ledger.Job) {
	ctx, cancel := context.WithTimeout(ctx, jobStepTimeout)
	defer cancel()
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "checkpoint"})
	if err != nil {
		r.log.Debug("checkpoint: provider unreachable", "job", j.ID, "err", err)
		return
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	m, err := readMsg(in)
	if err != nil {
		return
	}
	switch m.Type {
	case "end":
		if len(m.Record) > 0 {
			if _, err := r.takeReceipt(ctx, j, m.Record); err != nil {
				r.log.Warn("the job's receipt was not taken", "job", j.ID, "err", err)
			}
		} else if m.Status != nil && m.Status.State == ledger.JobFailed {
			r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
				x.State, x.Error, x.UpdatedAt = ledger.JobFailed, m.Status.Error, r.clock.Now()
				return nil
			})
		}
		return
	case "checkpoint":
	default:
		return
	}
	now := r.clock.Now()
	cp, err := checkObserved(j, m.Record, now)
	if err != nil {
		r.metrics.RecordsRejected.WithLabelValues(string(protocol.KindCheckpoint), "stream", protocol.Reason(err)).Inc()
		r.log.Warn("usage checkpoint refused", "job", j.ID, "provider", j.Peer, "err", err)
		sendMsg(s, protocol.JobMsg{Type: "refuse", Reason: err.Error()})
		return
	}
	cs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindCheckpoint, SHA256: protocol.RecordSHA256(m.Record), Job: j.ID,
		Signer: r.peer.ID.String(), SignedAt: now.UTC(),
	}, r.peer.Key)
	if err != nil {
		return
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "countersign", Record: cs}); err != nil {
		return
	}
	r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		if cp.Seconds >= x.CheckpointSeconds && cp.Lease == protocol.RecordSHA256(x.Lease) {
			x.Checkpoint, x.CheckpointCountersig, x.CheckpointSeconds, x.MeteredAt = m.Record, cs, cp.Seconds, now
		}
		x.LastSeenRunning = now
		return nil
	})
	readMsg(in)
}
