package ledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// Job reports and the charges they make (EscrowStore): a provider's report of a job's
// final receipt turns the job's escrow hold into a charge, at once or after the dispute
// window (docs/settlement.md), writing the hold, the account and the earning in one
// transaction.

const prefixJobReport = "coordinator/job-report/"

// JobReport is a job's final receipt as a coordinator received it from the provider.
type JobReport struct {
	Job             string    `json:"job"`
	Provider        string    `json:"provider"`
	ReceivedAt      time.Time `json:"received_at"`
	Lease           []byte    `json:"lease"`
	LeaseCountersig []byte    `json:"lease_countersignature"`
	Receipt         []byte    `json:"receipt"`
	// ReceiptCountersig is the renter's countersignature of the receipt, when the provider
	// has it (it may come with a later report of the same job).
	ReceiptCountersig []byte `json:"receipt_countersignature,omitempty"`
	ProviderFault     bool   `json:"provider_fault"`
	// Checkpoint is the latest usage checkpoint the renter countersigned, with that
	// countersignature, and its seconds.
	Checkpoint           []byte `json:"checkpoint,omitempty"`
	CheckpointCountersig []byte `json:"checkpoint_countersignature,omitempty"`
	CheckpointSeconds    int64  `json:"checkpoint_seconds,omitempty"`
	// Terms are the receipt's figures a charge needs.
	Terms ChargeTerms `json:"terms"`
}

// ChargeTerms are the figures of a reported receipt that charging it needs.
type ChargeTerms struct {
	Receipt string             `json:"receipt_sha256"`
	Amount  protocol.MicroUSDC `json:"amount"`
	Model   string             `json:"model"`
	GPUs    int                `json:"gpus"`
	Seconds int64              `json:"seconds"`
	EndedAt time.Time          `json:"ended_at"`
	Renter  string             `json:"renter"`
	// CheckpointAmount is what the receipt charges under the checkpoint rule.
	CheckpointAmount protocol.MicroUSDC `json:"checkpoint_amount"`
}

// jobReportKey keys a report by job and reporting provider: a report from another peer
// for the same job ID never stands in the way of the provider's own.
func jobReportKey(job, provider string) string { return prefixJobReport + job + "/" + provider }

// GetJobReport returns a provider's report of a job, or ErrNotFound.
func (s *EscrowStore) GetJobReport(job, provider string) (JobReport, error) {
	var r JobReport
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, jobReportKey(job, provider), &r) })
	return r, err
}

// JobReports returns the reports received since a time.
func (s *EscrowStore) JobReports(since time.Time) ([]JobReport, error) {
	return scanAll[JobReport](s.kv, prefixJobReport, func(r JobReport) bool { return !r.ReceivedAt.Before(since) })
}

// ReportCharge is a provider's job report and, when the job had a hold, the charge it
// turns into: ChargeReports stores both in one transaction.
type ReportCharge struct {
	Report JobReport
	// Receipt is the hex SHA-256 of the receipt envelope; Amount its amount.
	Receipt string
	Amount  protocol.MicroUSDC
	Model   string
	GPUs    int
	Seconds int64
	EndedAt time.Time
	Renter  string
	// Countersigned says the renter countersigned the receipt: it is charged at once.
	Countersigned bool
	// CheckpointAmount is what the receipt charges under the checkpoint rule (the last
	// countersigned checkpoint plus one interval), charged at PendingUntil (the end of the
	// dispute window) unless the renter's countersignature or a dispute comes first.
	CheckpointAmount protocol.MicroUSDC
	PendingUntil     time.Time
}

// ReportOutcome says what ChargeReports did with one report.
type ReportOutcome struct {
	Added   bool     // the report was new
	Earning *Earning // the charge made, nil when none was made now
	// Pending says the charge waits for the renter's countersignature, a dispute window
	// or a decision.
	Pending bool
	// Refused says why a report was not stored: it contradicts the job's escrow hold, or
	// there is none.
	Refused string
	// Equivocation says the report's receipt is not the one its renter disputes: the
	// provider signed two receipts for the job (Dispute.Equivocation).
	Equivocation bool
}

// ChargeReports stores job reports and charges their holds, many per transaction, by the
// rules of docs/settlement.md: a receipt the renter countersigned is charged at once; one
// it did not waits for the dispute window (ChargeDue). A charge moves the hold's amount:
// the charge to the provider's earning (less the commission), the rest back to the
// renter's available funds. A report already stored changes nothing but what it adds: the
// renter's countersignature (then charged, unless disputed) or a later checkpoint.
func (s *EscrowStore) ChargeReports(items []ReportCharge) ([]ReportOutcome, error) {
	out := make([]ReportOutcome, len(items))
	for start := 0; start < len(items); {
		// All of a group or nothing: a group too big for one transaction is halved.
		n := len(items) - start
		for {
			err := s.updateMoney(func(txn *badger.Txn) error {
				for i := start; i < start+n; i++ {
					o, err := chargeOne(txn, items[i])
					if err != nil {
						return err
					}
					out[i] = o
				}
				return nil
			})
			if errors.Is(err, badger.ErrTxnTooBig) && n > 1 {
				n /= 2
				continue
			}
			if err != nil {
				return out[:start], err
			}
			break
		}
		start += n
	}
	return out, nil
}

func chargeOne(txn *badger.Txn, it ReportCharge) (ReportOutcome, error) {
	key := jobReportKey(it.Report.Job, it.Report.Provider)
	var h Hold
	err := getJSON(txn, prefixHold+it.Report.Job, &h)
	switch {
	case errors.Is(err, ErrNotFound):
		return ReportOutcome{Refused: fmt.Sprintf("job %s has no escrow hold at this coordinator: only held jobs are charged and counted", it.Report.Job)}, nil
	case err != nil:
		return ReportOutcome{}, err
	case h.Provider != it.Report.Provider || h.Renter != it.Renter:
		// The job's hold names another provider or renter: this report is not about that
		// job, and it neither charges the hold nor takes the job's place.
		return ReportOutcome{Refused: fmt.Sprintf("job %s is held for renter %s on provider %s, not this lease", h.Job, h.Renter, h.Provider)}, nil
	}
	var prev JobReport
	if err := getJSON(txn, key, &prev); err == nil {
		if string(prev.Receipt) != string(it.Report.Receipt) {
			return ReportOutcome{}, nil // one receipt per job: the first one stands
		}
		changed := false
		if len(prev.ReceiptCountersig) == 0 && it.Countersigned {
			prev.ReceiptCountersig, changed = it.Report.ReceiptCountersig, true
		}
		if it.Report.CheckpointSeconds > prev.CheckpointSeconds && h.State != HoldCharged && h.State != HoldReleased {
			// (A charge made stays as its records were: the audit recomputes it from them.)
			prev.Checkpoint, prev.CheckpointCountersig, prev.CheckpointSeconds = it.Report.Checkpoint, it.Report.CheckpointCountersig, it.Report.CheckpointSeconds
			prev.Terms.CheckpointAmount = it.CheckpointAmount
			if h.State == HoldPending {
				h.PendingCharge = it.CheckpointAmount
				if err := putJSON(txn, prefixHold+h.Job, h); err != nil {
					return ReportOutcome{}, err
				}
			}
			changed = true
		}
		if !changed {
			return ReportOutcome{Pending: h.State == HoldPending || h.State == HoldDisputed}, nil
		}
		if err := putJSON(txn, key, prev); err != nil {
			return ReportOutcome{}, err
		}
		if (h.State == HoldPending || h.State == HoldDisputed) && len(prev.ReceiptCountersig) > 0 {
			e, err := chargeCountersigned(txn, h, prev, it.Report.ReceivedAt)
			return ReportOutcome{Earning: e}, err
		}
		return ReportOutcome{Pending: h.State == HoldPending || h.State == HoldDisputed}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return ReportOutcome{}, err
	}
	rep := it.Report
	rep.Terms = ChargeTerms{Receipt: it.Receipt, Amount: it.Amount, Model: it.Model, GPUs: it.GPUs, Seconds: it.Seconds,
		EndedAt: it.EndedAt, Renter: it.Renter, CheckpointAmount: it.CheckpointAmount}
	if err := putJSON(txn, key, rep); err != nil {
		return ReportOutcome{}, err
	}
	switch h.State {
	case HoldHeld:
	case HoldDisputed:
		// The renter disputed first: a decision charges it, unless the renter countersigned
		// the receipt after all.
		eq, err := noteEquivocation(txn, rep)
		if err != nil || !it.Countersigned {
			return ReportOutcome{Added: true, Pending: true, Equivocation: eq}, err
		}
		e, err := chargeCountersigned(txn, h, rep, rep.ReceivedAt)
		return ReportOutcome{Added: true, Earning: e, Equivocation: eq}, err
	default:
		return ReportOutcome{Added: true}, nil // released (it never ran, said the provider) or charged
	}
	if it.Countersigned {
		e, err := chargeHold(txn, h, rep, rep.Terms.Amount, protocol.RuleCountersignedReceipt)
		return ReportOutcome{Added: true, Earning: e}, err
	}
	h.State, h.PendingUntil, h.PendingCharge = HoldPending, it.PendingUntil, it.CheckpointAmount
	if err := txn.Set(pendingKey(h), nil); err != nil {
		return ReportOutcome{}, err
	}
	return ReportOutcome{Added: true, Pending: true}, putJSON(txn, prefixHold+h.Job, h)
}

// chargeCountersigned charges a hold the receipt its renter countersigned, closing the
// renter's dispute of it if there is one: the renter owes what it signed.
func chargeCountersigned(txn *badger.Txn, h Hold, rep JobReport, now time.Time) (*Earning, error) {
	e, err := chargeHold(txn, h, rep, rep.Terms.Amount, protocol.RuleCountersignedReceipt)
	if err != nil {
		return nil, err
	}
	return e, closeDispute(txn, h.Job, DisputeCountersigned, e.Charge, now)
}

// chargeHold charges a hold held, pending or disputed: amount (at most the hold) to the
// provider's earning less the commission, the rest back to the renter, under rule.
func chargeHold(txn *badger.Txn, h Hold, rep JobReport, amount protocol.MicroUSDC, rule string) (*Earning, error) {
	if h.State != HoldHeld && h.State != HoldPending && h.State != HoldDisputed {
		return nil, fmt.Errorf("%w: the hold of job %s is %s", errNotHeld, h.Job, h.State)
	}
	if h.State == HoldPending {
		if err := txn.Delete(pendingKey(h)); err != nil {
			return nil, err
		}
	}
	a, err := getAccount(txn, h.Renter)
	if err != nil {
		return nil, err
	}
	t := rep.Terms
	charge := protocol.Charge(amount, h.Amount)
	commission := protocol.Commission(charge, h.CommissionBPS)
	a.Held -= h.Amount
	a.Available += h.Amount - charge
	a.Charged += charge
	a.OpenHolds = max(0, a.OpenHolds-1)
	h.State, h.Charge, h.Receipt, h.Rule, h.PendingCharge = HoldCharged, charge, t.Receipt, rule, 0
	e := Earning{Receipt: t.Receipt, Job: rep.Job, Provider: rep.Provider, Renter: h.Renter,
		Model: t.Model, GPUs: t.GPUs, Seconds: t.Seconds, EndedAt: t.EndedAt,
		Charge: charge, Commission: commission, Net: charge - commission, Rule: rule}
	for k, v := range map[string]any{prefixHold + h.Job: h, prefixAccount + h.Renter: a, earningKey(e.Provider, e.Receipt): e} {
		if err := putJSON(txn, k, v); err != nil {
			return nil, err
		}
	}
	return &e, nil
}

// prefixPending indexes pending holds by the end of their dispute window:
// <prefix><20 digits of Unix nanoseconds>/<job>, so that ChargeDue reads only the due ones.
const prefixPending = "money/pending/"

func pendingKey(h Hold) []byte {
	return []byte(fmt.Sprintf("%s%020d/%s", prefixPending, h.PendingUntil.UnixNano(), h.Job))
}

// ChargeDue charges, under the checkpoint rule, every pending hold whose dispute window
// has passed at now, and returns the earnings made. It reads the pending index up to now,
// not the holds.
func (s *EscrowStore) ChargeDue(now time.Time) ([]Earning, error) {
	var holds []Hold
	err := s.db.View(func(txn *badger.Txn) error {
		p := []byte(prefixPending)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
		defer it.Close()
		until := fmt.Sprintf("%s%020d", prefixPending, now.UnixNano())
		for it.Rewind(); it.ValidForPrefix(p); it.Next() {
			k := string(it.Item().Key())
			if k[:len(until)] > until {
				break
			}
			holds = append(holds, Hold{Job: k[len(until)+1:]})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Earning
	for _, h := range holds {
		var e *Earning
		err := s.updateMoney(func(txn *badger.Txn) (err error) {
			e = nil
			var cur Hold
			if err := getJSON(txn, prefixHold+h.Job, &cur); err != nil {
				return err
			}
			if cur.State != HoldPending {
				return nil // charged or disputed meanwhile
			}
			var rep JobReport
			if err := getJSON(txn, jobReportKey(cur.Job, cur.Provider), &rep); err != nil {
				return err
			}
			e, err = chargeHold(txn, cur, rep, cur.PendingCharge, protocol.RuleCheckpoint)
			return err
		})
		if err == nil && e != nil {
			out = append(out, *e)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
