package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// A job's final receipt on the renter's side: checked against the lease and against what
// this node observed, then countersigned (and the countersignature sent back to the
// provider, who reports it to its coordinator), or disputed. The provider signs the
// receipt when the job ends (finish, lifecycle.go).

// takeReceipt checks a provider's final receipt against the lease and against what this
// node observed (observedSeconds), and countersigns it, sends the countersignature back and
// keeps both. A receipt charging more than was observed is not countersigned: the renter
// signs a dispute stating what it observed and sends it to the coordinator instead.
func (r *Renter) takeReceipt(ctx context.Context, j ledger.Job, raw []byte) (ledger.Job, error) {
	// The job as it is now: a follower that loaded it before an extension holds the old
	// lease, and the receipt follows from the new one.
	if cur, err := r.renterJob(j.ID); err == nil {
		j = cur
	}
	if len(j.ReceiptCountersig) > 0 || len(j.Dispute) > 0 {
		return j, nil
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return j, err
	}
	now := r.clock.Now()
	rec, err := protocol.CheckReceipt(raw, j.Lease, l, now)
	if err != nil {
		r.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "stream", protocol.Reason(err)).Inc()
		return j, fmt.Errorf("the provider's receipt does not hold: %w", err)
	}
	if observed, end, ok := r.observedSeconds(j, now); ok && rec.Seconds > observed+int64(protocol.MeterTolerance/time.Second) {
		return r.dispute(ctx, j, raw, rec, observed, end)
	}
	cs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindReceipt, SHA256: protocol.RecordSHA256(raw), Job: j.ID,
		Signer: r.peer.ID.String(), SignedAt: now.UTC(),
	}, r.peer.Key)
	if err != nil {
		return j, err
	}
	j, err = r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		x.State, x.Receipt, x.ReceiptCountersig, x.ExitCode, x.ExitReason, x.UpdatedAt = ledger.JobEnded, raw, cs, rec.ExitCode, rec.Reason, r.clock.Now()
		return nil
	})
	if err != nil {
		return j, err
	}
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "receipt-countersign", Record: cs})
	if err != nil {
		return j, nil // kept here; the provider asks again... or learns it at the next request
	}
	defer s.Close()
	readMsg(in)
	return j, nil
}

// observedSeconds is the longest this node can vouch that a job ran, at now: from when it
// learnt of the start to the earlier of now and one checkpoint interval (plus the
// tolerance) after it last saw the job running. ok is false for a job rented before
// metering (nothing observed to compare with).
func (r *Renter) observedSeconds(j ledger.Job, now time.Time) (secs int64, end time.Time, ok bool) {
	if j.ObservedStart.IsZero() {
		return 0, time.Time{}, false
	}
	end = now
	if !j.LastSeenRunning.IsZero() {
		if b := j.LastSeenRunning.Add(r.interval + protocol.MeterTolerance); b.Before(end) {
			end = b
		}
	}
	return max(0, int64(end.Sub(j.ObservedStart)/time.Second)), end, true
}

// dispute refuses a receipt that charges more than this node observed: it signs what it
// observed, keeps the receipt and the dispute, and sends them to the coordinator.
func (r *Renter) dispute(ctx context.Context, j ledger.Job, raw []byte, rec *protocol.Receipt, observed int64, end time.Time) (ledger.Job, error) {
	observed = min(observed, rec.Seconds-1)
	reason := fmt.Sprintf("the receipt charges %d s; this renter saw the job start at %s and run until %s at the latest (%d s)",
		rec.Seconds, j.ObservedStart.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), observed)
	d := protocol.Dispute{Version: protocol.JobVersion, Job: j.ID, Receipt: protocol.RecordSHA256(raw), Renter: r.peer.ID.String(),
		Provider: rec.Provider, ObservedStart: j.ObservedStart.UTC(), ObservedEnd: end.UTC(), Seconds: observed,
		Amount: protocol.Cost(rec.Price, rec.GPUs, observed), Reason: reason, SignedAt: r.clock.Now().UTC()}
	draw, err := protocol.Seal(protocol.KindDispute, d, r.peer.Key)
	if err != nil {
		return j, err
	}
	r.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "stream", "disputed").Inc()
	r.log.Warn("receipt disputed: it charges more than this node observed", "job", j.ID, "provider", rec.Provider,
		"receipt_seconds", rec.Seconds, "observed_seconds", observed)
	j, err = r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		x.State, x.Receipt, x.Dispute, x.ExitCode, x.ExitReason, x.UpdatedAt = ledger.JobEnded, raw, draw, rec.ExitCode, rec.Reason, r.clock.Now()
		x.Error = "disputed: " + reason
		return nil
	})
	if err != nil {
		return j, err
	}
	if err := r.escrow.Dispute(ctx, j); err != nil {
		r.log.Warn("the dispute did not reach the coordinator; the meter sends it again", "job", j.ID, "err", err)
		return j, nil
	}
	return r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error { x.ReportedAt = r.clock.Now(); return nil })
}
