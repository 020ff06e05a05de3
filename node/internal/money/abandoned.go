package money

import (
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Abandoned jobs. A provider that loses a job (its GPU fell off the bus, its machine died)
// reports the job's receipt with the reason, and the coordinator counts it against the
// provider's job completion. One that never reports escapes that count, at the price of the
// job's pay. So the renter's node, when a job's lease has ended with no receipt, sends the
// coordinator its own account: the lease and its latest usage checkpoint, both signed by the
// provider and countersigned by the renter, which prove the job ran. When the job's hold
// expires with still no report from the provider, the coordinator counts the job against the
// provider's completion. The hold returns to the renter as any expired hold does.
// docs/protocols/settlement.md, "Abandoned jobs".

// ReportAbandoned sends the renter's account of a job whose lease ended with no receipt to
// the coordinator holding its escrow.
func (w *Wallet) ReportAbandoned(ctx context.Context, j ledger.Job) error {
	c := protocol.HoldCoordinator(j.Proposal)
	if c == "" {
		return errors.New("the job has no escrow hold: there is no coordinator to tell")
	}
	_, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "abandoned", Job: j.ID, Lease: j.Lease, LeaseCountersig: j.LeaseCountersig,
		Checkpoint: j.Checkpoint, CheckpointCountersig: j.CheckpointCountersig})
	return err
}

// takeAbandoned checks and keeps a renter's account of an abandoned job: the sender is the
// renter of the job's hold, still held here; the lease is the hold's provider's, for that
// job and renter, countersigned by the renter, and has ended; the checkpoint is of that
// lease, countersigned by the renter, and counts some seconds.
func (s *holds) takeAbandoned(remote peer.ID, req protocol.WalletRequest) error {
	now := s.clock.Now()
	refuse := func(err error) error {
		s.metrics.RecordsRejected.WithLabelValues("abandonment", "wallet", protocol.Reason(err)).Inc()
		return err
	}
	h, err := s.ledger.Escrow.GetHold(req.Job)
	if err != nil {
		return refuse(fmt.Errorf("%w: job %s has no escrow hold here", api.ErrNotFound, req.Job))
	}
	if h.Renter != remote.String() {
		return refuse(api.Invalid(fmt.Errorf("%w: job %s is not yours to report", protocol.ErrWrongSigner, req.Job)))
	}
	if h.State != ledger.HoldHeld {
		return api.Conflict(fmt.Errorf("job %s is settled already (hold %s): its provider reported it, or the hold expired", req.Job, h.State))
	}
	l, signer, err := protocol.OpenLease(req.Lease)
	if err != nil {
		return refuse(api.Invalid(err))
	}
	if signer.String() != h.Provider || l.Job != h.Job || l.Renter != h.Renter {
		return refuse(api.Invalid(fmt.Errorf("%w: the lease is not the job's provider's lease of this job", protocol.ErrWrongSigner)))
	}
	if _, err := protocol.CheckCountersignature(req.LeaseCountersig, req.Lease, protocol.KindLease, remote, now); err != nil {
		return refuse(api.Invalid(fmt.Errorf("the lease's countersignature: %w", err)))
	}
	if now.Before(l.EndsAt) {
		return api.Invalid(fmt.Errorf("the lease runs until %s: a job is abandoned only when its lease ended with no receipt", l.EndsAt.UTC().Format("2006-01-02 15:04:05 MST")))
	}
	if len(req.Checkpoint) == 0 {
		return refuse(api.Invalid(fmt.Errorf("%w: no usage checkpoint: nothing shows that the job ran", protocol.ErrInvalid)))
	}
	cp, err := protocol.CheckCheckpoint(req.Checkpoint, req.Lease, l, now)
	if err != nil {
		return refuse(api.Invalid(fmt.Errorf("the checkpoint: %w", err)))
	}
	if _, err := protocol.CheckCountersignature(req.CheckpointCountersig, req.Checkpoint, protocol.KindCheckpoint, remote, now); err != nil {
		return refuse(api.Invalid(fmt.Errorf("the checkpoint's countersignature: %w", err)))
	}
	if cp.Seconds <= 0 {
		return refuse(api.Invalid(fmt.Errorf("%w: the checkpoint counts no second", protocol.ErrInvalid)))
	}
	added, err := s.ledger.Escrow.PutAbandonment(ledger.Abandonment{Job: h.Job, Renter: h.Renter, Provider: h.Provider, ReceivedAt: now, Seconds: cp.Seconds,
		Lease: req.Lease, LeaseCountersig: req.LeaseCountersig, Checkpoint: req.Checkpoint, CheckpointCountersig: req.CheckpointCountersig})
	if err != nil {
		return err
	}
	if added {
		s.metrics.RecordsAccepted.WithLabelValues("abandonment", "wallet").Inc()
		s.log.Warn("a renter reports a job its provider abandoned", "job", h.Job, "provider", h.Provider, "renter", h.Renter, "checkpoint_seconds", cp.Seconds)
	}
	return nil
}

// ReleaseExpired returns the holds unused at their expiry to their renters, and counts
// against its provider each job among them whose renter showed it ran (takeAbandoned), in
// the same ledger transaction as its hold's release. It returns how many holds it released.
func (s *holds) ReleaseExpired() (int, error) {
	now := s.clock.Now()
	halfLife := s.halfLife
	released, err := s.ledger.Escrow.ReleaseExpired(now, func(a ledger.Abandonment, rs *ledger.ReliabilityState) {
		at := now
		if l, _, err := protocol.OpenLease(a.Lease); err == nil && at.After(l.EndsAt) {
			at = l.EndsAt
		}
		rs.AddEvent(protocol.WhyAbandoned(a.Job, a.Seconds))
		rs.Reliability.Completion.Add(at, 0, halfLife)
	})
	for _, h := range released {
		if a := h.Abandoned; a != nil {
			s.log.Warn("job counted against its provider: abandoned", "job", h.Job, "provider", h.Provider, "checkpoint_seconds", a.Seconds)
		}
	}
	return len(released), err
}
