package ledger

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// Disputes: a renter refused a provider's final receipt and signed what it observed
// instead. The job's hold stays held until the coordinator decides (docs/settlement.md).

const prefixDispute = "coordinator/dispute/"

// Dispute states.
const (
	DisputeOpen    = "open"
	DisputeDecided = "decided"
	// DisputeCountersigned: the renter countersigned the receipt after disputing it; the
	// job was charged by the countersigned-receipt rule.
	DisputeCountersigned = "countersigned"
	// DisputeExpired: the provider never reported the job by its hold's expiry; the hold
	// returned to the renter.
	DisputeExpired = "expired"
)

// Dispute is a renter's dispute of a job's receipt as the coordinator keeps it.
type Dispute struct {
	Job        string    `json:"job"`
	Renter     string    `json:"renter"`
	Provider   string    `json:"provider"`
	ReceivedAt time.Time `json:"received_at"`
	// Record is the renter's signed dispute; Receipt the receipt it disputes.
	Record  []byte `json:"record"`
	Receipt []byte `json:"receipt"`
	// Amount is what the renter says it owes; Claimed what the receipt charges.
	Amount  protocol.MicroUSDC `json:"amount"`
	Claimed protocol.MicroUSDC `json:"claimed"`
	Reason  string             `json:"reason"`
	State   string             `json:"state"`
	// Equivocation says the provider reported another receipt of the job than the one the
	// renter disputes: it signed two receipts for one job. A decision then charges at most
	// the smaller (Cap).
	Equivocation bool `json:"equivocation,omitempty"`
	// Decision is the coordinator's signed decision, Charged what it charged.
	Decision  []byte             `json:"decision,omitempty"`
	DecidedAt time.Time          `json:"decided_at,omitzero"`
	Charged   protocol.MicroUSDC `json:"charged,omitempty"`
}

// ErrDisputeClosed is returned for a dispute of a job already charged.
var ErrDisputeClosed = errors.New("too late to dispute")

// OpenDispute stores a renter's dispute and holds the job's escrow until a decision. A job
// already charged cannot be disputed: the renter countersigned its receipt, or the
// dispute window passed (at the dispute's ReceivedAt, even when the charge it makes due
// has not run yet). The same dispute again changes nothing.
func (s *EscrowStore) OpenDispute(d Dispute) (Dispute, error) {
	out := d
	err := s.updateMoney(func(txn *badger.Txn) error {
		out = Dispute{}
		if err := getJSON(txn, prefixDispute+d.Job, &out); err == nil {
			return nil
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		out = d
		var h Hold
		if err := getJSON(txn, prefixHold+d.Job, &h); err != nil {
			return fmt.Errorf("job %s has no escrow hold here: %w", d.Job, err)
		}
		if h.Renter != d.Renter || h.Provider != d.Provider {
			return fmt.Errorf("job %s is held for renter %s on provider %s", d.Job, h.Renter, h.Provider)
		}
		var rep JobReport
		reported := false
		switch err := getJSON(txn, jobReportKey(d.Job, h.Provider), &rep); {
		case err == nil:
			reported = true
		case !errors.Is(err, ErrNotFound):
			return err
		}
		// (The coordinator checked the countersignature when the report brought it.)
		if reported && len(rep.ReceiptCountersig) > 0 {
			return fmt.Errorf("%w: the renter countersigned the receipt of job %s", ErrDisputeClosed, d.Job)
		}
		switch {
		case h.State == HoldPending && !d.ReceivedAt.Before(h.PendingUntil):
			// The charge is due: the next ChargeDue makes it, whenever it runs.
			return fmt.Errorf("%w: the dispute window of job %s closed at %s", ErrDisputeClosed, d.Job, h.PendingUntil.UTC().Format(time.RFC3339))
		case h.State == HoldHeld, h.State == HoldPending:
		case h.State == HoldCharged:
			return fmt.Errorf("%w: job %s was charged %s USDC under the %s rule", ErrDisputeClosed, d.Job, h.Charge, h.Rule)
		default:
			return fmt.Errorf("%w: the hold of job %s is %s", ErrDisputeClosed, d.Job, h.State)
		}
		out.Equivocation = reported && !out.disputes(rep)
		if h.State == HoldPending {
			if err := txn.Delete(pendingKey(h)); err != nil {
				return err
			}
		}
		h.State, h.PendingUntil = HoldDisputed, time.Time{}
		out.State = DisputeOpen
		if err := putJSON(txn, prefixHold+h.Job, h); err != nil {
			return err
		}
		return putJSON(txn, prefixDispute+d.Job, out)
	})
	return out, err
}

// disputes says whether the dispute is of the receipt of the provider's report.
func (d Dispute) disputes(rep JobReport) bool {
	return protocol.RecordSHA256(d.Receipt) == rep.Terms.Receipt
}

// Cap is the most a decision may charge a disputed job whose provider reported rep: the
// reported receipt's amount, or the smaller of the two receipts when the provider signed
// two (Equivocation).
func (d Dispute) Cap(rep JobReport) protocol.MicroUSDC {
	if d.Equivocation {
		return min(d.Claimed, rep.Terms.Amount)
	}
	return rep.Terms.Amount
}

// noteEquivocation marks the open dispute of a job equivocated when the report the
// provider sends after it is of another receipt, and says whether it did.
func noteEquivocation(txn *badger.Txn, rep JobReport) (bool, error) {
	var d Dispute
	if err := getJSON(txn, prefixDispute+rep.Job, &d); errors.Is(err, ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if d.State != DisputeOpen || d.Equivocation || d.disputes(rep) {
		return false, nil
	}
	d.Equivocation = true
	return true, putJSON(txn, prefixDispute+rep.Job, d)
}

// GetDispute returns a job's dispute, or ErrNotFound.
func (s *EscrowStore) GetDispute(job string) (Dispute, error) {
	var d Dispute
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixDispute+job, &d) })
	return d, err
}

// Disputes returns the disputes, oldest first; open only when open is set.
func (s *EscrowStore) Disputes(open bool) ([]Dispute, error) {
	out, err := scanAll[Dispute](s.kv, prefixDispute, func(d Dispute) bool { return !open || d.State == DisputeOpen })
	sort.Slice(out, func(i, k int) bool { return out[i].ReceivedAt.Before(out[k].ReceivedAt) })
	return out, err
}

// ErrNotReported is returned for a decision of a dispute whose job the provider has not
// reported: there is no receipt to charge yet.
var ErrNotReported = errors.New("not reported yet")

// DecideDispute charges a disputed job the amount the coordinator decided (at most its
// hold, and at most the smaller receipt when the provider signed two) under the decision
// rule, and closes the dispute. Without the provider's report nothing is decided
// (ErrNotReported): a decision then would charge nothing whatever the report proves later;
// the report comes, or the hold returns to the renter at its expiry (ReleaseExpired).
func (s *EscrowStore) DecideDispute(job string, decision []byte, amount protocol.MicroUSDC, now time.Time) (Dispute, *Earning, error) {
	var d Dispute
	var earning *Earning
	err := s.updateMoney(func(txn *badger.Txn) error {
		d, earning = Dispute{}, nil
		if err := getJSON(txn, prefixDispute+job, &d); err != nil {
			return err
		}
		if d.State != DisputeOpen {
			return fmt.Errorf("%w: the dispute of job %s closed (%s) at %s", ErrDisputeClosed, job, d.State, d.DecidedAt.UTC().Format(time.RFC3339))
		}
		var h Hold
		if err := getJSON(txn, prefixHold+job, &h); err != nil {
			return err
		}
		var rep JobReport
		if err := getJSON(txn, jobReportKey(job, h.Provider), &rep); errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: the provider has not reported job %s", ErrNotReported, job)
		} else if err != nil {
			return err
		}
		if c := d.Cap(rep); amount > c {
			return fmt.Errorf("job %s may be charged at most %s USDC, not %s", job, c, amount)
		}
		e, err := chargeHold(txn, h, rep, amount, protocol.RuleDecision)
		if err != nil {
			return err
		}
		earning = e
		d.Charged, d.State, d.Decision, d.DecidedAt = e.Charge, DisputeDecided, decision, now
		return putJSON(txn, prefixDispute+job, d)
	})
	return d, earning, err
}

// closeDispute closes the open dispute of a job, if any, in state (not decided by the
// coordinator: the renter countersigned, or the hold expired), having charged charge.
func closeDispute(txn *badger.Txn, job, state string, charge protocol.MicroUSDC, now time.Time) error {
	var d Dispute
	if err := getJSON(txn, prefixDispute+job, &d); errors.Is(err, ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if d.State != DisputeOpen {
		return nil
	}
	d.State, d.Charged, d.DecidedAt = state, charge, now
	return putJSON(txn, prefixDispute+job, d)
}
