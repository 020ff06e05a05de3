package protocol

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Metering: while a job runs, its provider signs usage checkpoints and its renter
// countersigns each one that matches what the renter itself observed; at the end the
// renter countersigns the final receipt, or signs a dispute stating what it observed. The
// coordinator charges by the rule these records allow (ChargeOf). See
// docs/protocols/jobs.md ("Metering") and docs/settlement.md ("What a job is charged").

// Record kinds of metering.
const (
	KindCheckpoint Kind = "usage-checkpoint"
	KindDispute    Kind = "usage-dispute"
	KindDecision   Kind = "dispute-decision"
)

const (
	// MaxCheckpointSize caps a checkpoint envelope.
	MaxCheckpointSize = 2 << 10
	// MaxDisputeSize caps a dispute envelope.
	MaxDisputeSize = 2 << 10
	// MaxDecisionSize caps a decision envelope.
	MaxDecisionSize = 2 << 10
	// CheckpointInterval is the longest a renter may wait between two checkpoints of a
	// running job (a renter may ask more often).
	CheckpointInterval = time.Minute
	// CheckpointAllowance is what a final receipt without the renter's countersignature
	// may charge past the last countersigned checkpoint: one interval.
	CheckpointAllowance = CheckpointInterval
	// MeterTolerance is how many seconds a provider's count may exceed what the renter
	// observed (the start message's way across the network, timer granularity) and still
	// be countersigned.
	MeterTolerance = 10 * time.Second
)

// Charge rules: which records a job's charge follows from.
const (
	// RuleCountersignedReceipt: the final receipt, countersigned by the renter; charged
	// when the coordinator has both.
	RuleCountersignedReceipt = "countersigned-receipt"
	// RuleCheckpoint: a final receipt the renter did not countersign, charged at most the
	// last countersigned checkpoint plus CheckpointAllowance, once the dispute window has
	// passed without a dispute.
	RuleCheckpoint = "checkpoint"
	// RuleDecision: a disputed receipt, charged what the coordinator decided.
	RuleDecision = "decision"
)

// Checkpoint is a provider's signed count of a running job's use so far.
type Checkpoint struct {
	Version  int    `json:"version"`
	Job      string `json:"job"`
	Lease    string `json:"lease_sha256"`
	Provider string `json:"provider"`
	Renter   string `json:"renter"`
	// Seconds the job has run so far, and what they cost at the lease's price.
	Seconds int64     `json:"seconds"`
	Amount  MicroUSDC `json:"amount_micro_usdc"`
	At      time.Time `json:"at"`
}

// CheckCheckpoint opens a checkpoint and checks it against its lease at time now: signed
// by the lease's provider, for its job, within its period, with the amount that follows.
func CheckCheckpoint(raw, leaseRaw []byte, l *Lease, now time.Time) (*Checkpoint, error) {
	env, err := openKind(raw, KindCheckpoint)
	if err != nil {
		return nil, err
	}
	var c Checkpoint
	if err := decodePayload(env, JobVersion, &c, func() int { return c.Version }); err != nil {
		return nil, err
	}
	if c.Provider != env.signerText || c.Provider != l.Provider {
		return nil, fmt.Errorf("%w: checkpoint signed by %s; the lease is with %s", ErrWrongSigner, env.Signer, l.Provider)
	}
	bad := func(format string, args ...any) error { return invalid(KindCheckpoint, format, args...) }
	switch {
	case c.Job != l.Job || c.Renter != l.Renter || c.Lease != RecordSHA256(leaseRaw):
		return nil, bad("it is about another job or lease")
	case c.At.After(now.Add(MaxClockSkew)):
		return nil, futureErr(KindCheckpoint, "made at", c.At, now)
	case c.At.Before(l.IssuedAt.Add(-MaxClockSkew)) || c.At.After(l.EndsAt.Add(MaxClockSkew)):
		return nil, bad("made at %s, outside the lease", c.At.UTC().Format(time.RFC3339))
	case c.Seconds < 0 || c.Seconds > int64(l.EndsAt.Sub(l.IssuedAt)/time.Second)+1:
		return nil, bad("%d seconds exceed the lease", c.Seconds)
	case c.Amount != Cost(l.Price, l.GPUs, c.Seconds):
		return nil, bad("amount %d is not price x gpus x seconds / 3600", c.Amount)
	}
	return &c, nil
}

// Dispute is a renter's signed refusal of a final receipt, with what it observed: the job
// ran from ObservedStart to at most ObservedEnd, Seconds in all.
type Dispute struct {
	Version       int       `json:"version"`
	Job           string    `json:"job"`
	Receipt       string    `json:"receipt_sha256"`
	Renter        string    `json:"renter"`
	Provider      string    `json:"provider"`
	ObservedStart time.Time `json:"observed_start"`
	ObservedEnd   time.Time `json:"observed_end"`
	Seconds       int64     `json:"seconds"`
	Amount        MicroUSDC `json:"amount_micro_usdc"`
	Reason        string    `json:"reason"`
	SignedAt      time.Time `json:"signed_at"`
}

// CheckDispute opens a dispute of a receipt at time now: signed by the receipt's renter,
// naming that receipt, stating fewer seconds than it charges, with the amount that
// follows.
func CheckDispute(raw, receiptRaw []byte, r *Receipt, now time.Time) (*Dispute, error) {
	env, err := openKind(raw, KindDispute)
	if err != nil {
		return nil, err
	}
	var d Dispute
	if err := decodePayload(env, JobVersion, &d, func() int { return d.Version }); err != nil {
		return nil, err
	}
	if d.Renter != env.signerText || d.Renter != r.Renter {
		return nil, fmt.Errorf("%w: dispute signed by %s; the receipt's renter is %s", ErrWrongSigner, env.Signer, r.Renter)
	}
	bad := func(format string, args ...any) error { return invalid(KindDispute, format, args...) }
	switch {
	case d.Job != r.Job || d.Provider != r.Provider || d.Receipt != RecordSHA256(receiptRaw):
		return nil, bad("it disputes another receipt")
	case d.SignedAt.After(now.Add(MaxClockSkew)):
		return nil, futureErr(KindDispute, "signed at", d.SignedAt, now)
	case d.Seconds < 0 || d.Seconds >= r.Seconds:
		return nil, bad("it states %d seconds; the receipt charges %d", d.Seconds, r.Seconds)
	case d.Amount != Cost(r.Price, r.GPUs, d.Seconds):
		return nil, bad("amount %d is not price x gpus x seconds / 3600", d.Amount)
	case checkFreeText("reason", d.Reason, 500, true) != nil:
		return nil, bad("%v", checkFreeText("reason", d.Reason, 500, true))
	}
	return &d, nil
}

// Decision is a coordinator's signed ruling on a disputed receipt: the amount charged.
type Decision struct {
	Version     int       `json:"version"`
	Coordinator string    `json:"coordinator"`
	Job         string    `json:"job"`
	Receipt     string    `json:"receipt_sha256"`
	Amount      MicroUSDC `json:"amount_micro_usdc"`
	Note        string    `json:"note,omitempty"`
	DecidedAt   time.Time `json:"decided_at"`
}

// CheckDecision opens a decision on a receipt, signed by coordinator: at most what the
// receipt charges.
func CheckDecision(raw, receiptRaw []byte, r *Receipt, coordinator peer.ID) (*Decision, error) {
	env, err := openKind(raw, KindDecision)
	if err != nil {
		return nil, err
	}
	var d Decision
	if err := decodePayload(env, JobVersion, &d, func() int { return d.Version }); err != nil {
		return nil, err
	}
	if env.Signer != coordinator || d.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: decision signed by %s, not the coordinator %s", ErrWrongSigner, env.Signer, coordinator)
	}
	switch {
	case d.Job != r.Job || d.Receipt != RecordSHA256(receiptRaw):
		return nil, invalid(KindDecision, "it decides on another receipt")
	case d.Amount < 0 || d.Amount > r.Amount:
		return nil, invalid(KindDecision, "amount %d outside 0-%d", d.Amount, r.Amount)
	case checkFreeText("note", d.Note, 500, false) != nil:
		return nil, invalid(KindDecision, "%v", checkFreeText("note", d.Note, 500, false))
	}
	return &d, nil
}

// CheckpointCharge is what a receipt the renter did not countersign charges under
// RuleCheckpoint: the receipt's amount, at most the seconds of the last countersigned
// checkpoint (0 without one) plus CheckpointAllowance.
func CheckpointCharge(r *Receipt, checkpointSeconds int64) MicroUSDC {
	secs := min(r.Seconds, max(0, checkpointSeconds)+int64(CheckpointAllowance/time.Second))
	return Cost(r.Price, r.GPUs, secs)
}
