package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// The records the wallet stream carries are defined in protocol (protocol/wallet.go); the
// ledger stores them as they travel.
type (
	Account = protocol.Account
	Deposit = protocol.Deposit
	Hold    = protocol.Hold
	Earning = protocol.Earning
)

// The coordinator's money book: renters' accounts, deposits credited, escrow holds,
// providers' earnings and payout batches. Every change that moves money is one badger
// transaction, so a crash leaves either all of it or none.

const (
	prefixAccount  = "money/account/"
	prefixDeposit  = "money/deposit/"
	prefixHold     = "money/hold/"
	prefixEarning  = "money/earning/" // + provider + "/" + receipt SHA-256
	prefixSettings = "money/settings/"
	prefixBatch    = "money/batch/"
	prefixBatchDay = "money/batch-day/"
)

// ErrInsufficientFunds is returned when a renter's available balance cannot cover a hold.
var ErrInsufficientFunds = errors.New("insufficient funds")

// ErrTooManyHolds is returned when a renter has MaxOpenHolds open already.
var ErrTooManyHolds = errors.New("too many open holds")

// Hold states.
const (
	HoldHeld     = "held"
	HoldCharged  = "charged"
	HoldReleased = "released"
	// HoldPending: the provider's receipt is in but not countersigned by the renter; it is
	// charged under the checkpoint rule when the dispute window ends.
	HoldPending = "pending"
	// HoldDisputed: the renter disputed the receipt; a coordinator's decision charges it.
	HoldDisputed = "disputed"
)

// PayoutSettings is a provider's latest signed payout settings.
type PayoutSettings struct {
	protocol.PayoutSettings
	Raw []byte `json:"raw"`
}

// GetAccount returns a renter's account (zero when it never deposited).
func (l *Ledger) GetAccount(renter string) (Account, error) {
	a := Account{Renter: renter}
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixAccount+renter, &a) })
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	return a, err
}

func getAccount(txn *badger.Txn, renter string) (Account, error) {
	a := Account{Renter: renter}
	if err := getJSON(txn, prefixAccount+renter, &a); err != nil && !errors.Is(err, ErrNotFound) {
		return a, err
	}
	return a, nil
}

// CreditDeposit credits a confirmed deposit to its renter once: the same signature again
// reports false and changes nothing.
func (l *Ledger) CreditDeposit(d Deposit) (bool, Account, error) {
	created := false
	var a Account
	err := l.db.Update(func(txn *badger.Txn) error {
		var prev Deposit
		if err := getJSON(txn, prefixDeposit+d.Signature, &prev); err == nil {
			a, err = getAccount(txn, prev.Renter)
			return err
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		var err error
		if a, err = getAccount(txn, d.Renter); err != nil {
			return err
		}
		a.Available += d.Amount
		a.Deposited += d.Amount
		created = true
		if err := putJSON(txn, prefixDeposit+d.Signature, d); err != nil {
			return err
		}
		if err := txn.Set([]byte(renterIndexKey(prefixRenterDeposit, d.Renter, d.CreditedAt, d.Signature)), nil); err != nil {
			return err
		}
		return putJSON(txn, prefixAccount+d.Renter, a)
	})
	return created, a, err
}

// GetDeposit returns a credited deposit by its transaction signature, or ErrNotFound.
func (l *Ledger) GetDeposit(signature string) (Deposit, error) {
	var d Deposit
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixDeposit+signature, &d) })
	return d, err
}

// Deposits returns all credited deposits, oldest first.
func (l *Ledger) Deposits() ([]Deposit, error) {
	out, err := scanAll[Deposit](l, prefixDeposit, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].CreditedAt.Before(out[k].CreditedAt) })
	return out, err
}

// RenterDeposits returns a renter's latest deposits, newest first, at most limit: it reads
// that renter's own index only.
func (l *Ledger) RenterDeposits(renter string, limit int) ([]Deposit, error) {
	return newestOf[Deposit](l, prefixRenterDeposit, renter, prefixDeposit, limit)
}

// PlaceHold moves a hold's amount from the renter's available to held funds and stores
// the hold. The same job again returns the hold already placed (a retried request) if its
// terms are the same, and an error otherwise.
func (l *Ledger) PlaceHold(h Hold) (Hold, error) {
	var out Hold
	err := l.db.Update(func(txn *badger.Txn) error {
		if err := getJSON(txn, prefixHold+h.Job, &out); err == nil {
			if out.Renter != h.Renter || out.Provider != h.Provider || out.Amount != h.Amount || out.State != HoldHeld {
				return fmt.Errorf("job %s already has a %s hold of %s USDC on %s", h.Job, out.State, out.Amount, out.Provider)
			}
			return nil
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		a, err := getAccount(txn, h.Renter)
		if err != nil {
			return err
		}
		if a.Available < h.Amount {
			return fmt.Errorf("%w: the job may cost up to %s USDC and %s USDC is available (deposit with gpunex wallet deposit)", ErrInsufficientFunds, h.Amount, a.Available)
		}
		if a.OpenHolds >= MaxOpenHolds {
			return fmt.Errorf("%w: %d jobs are held already, the most one renter may have open; wait for some to settle", ErrTooManyHolds, a.OpenHolds)
		}
		a.Available -= h.Amount
		a.Held += h.Amount
		a.OpenHolds++
		h.State = HoldHeld
		out = h
		if err := putJSON(txn, prefixHold+h.Job, h); err != nil {
			return err
		}
		if err := txn.Set([]byte(renterIndexKey(prefixRenterHold, h.Renter, h.IssuedAt, h.Job)), nil); err != nil {
			return err
		}
		return putJSON(txn, prefixAccount+h.Renter, a)
	})
	return out, err
}

// GetHold returns a job's hold, or ErrNotFound.
func (l *Ledger) GetHold(job string) (Hold, error) {
	var h Hold
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixHold+job, &h) })
	return h, err
}

// Holds returns every hold, newest first.
func (l *Ledger) Holds() ([]Hold, error) {
	out, err := scanAll[Hold](l, prefixHold, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].IssuedAt.After(out[k].IssuedAt) })
	return out, err
}

// RenterHolds returns a renter's latest holds, newest first, at most limit: it reads that
// renter's own index only.
func (l *Ledger) RenterHolds(renter string, limit int) ([]Hold, error) {
	return newestOf[Hold](l, prefixRenterHold, renter, prefixHold, limit)
}

// ReleaseExpiredHolds returns to their renters the holds still unused at their expiry, and
// says how many (ReleaseExpired lists them).
func (l *Ledger) ReleaseExpiredHolds(now time.Time) (int, error) {
	released, err := l.ReleaseExpired(now)
	return len(released), err
}

// ReleaseExpired returns to their renters the holds still unused at their expiry and
// returns them as released.
func (l *Ledger) ReleaseExpired(now time.Time) ([]Hold, error) {
	holds, err := l.Holds()
	if err != nil {
		return nil, err
	}
	var out []Hold
	for _, h := range holds {
		if h.State != HoldHeld || now.Before(h.ExpiresAt) {
			continue
		}
		var released Hold
		err := l.db.Update(func(txn *badger.Txn) (err error) {
			released, err = releaseHold(txn, h.Job)
			return err
		})
		switch {
		case err == nil:
			out = append(out, released)
		case !errors.Is(err, errNotHeld):
			return out, err
		}
	}
	return out, nil
}

// ReleaseHold returns a held hold's amount to its renter (the provider confirmed that the
// job never ran); a hold no longer held is an error.
func (l *Ledger) ReleaseHold(job string) (Hold, error) {
	var h Hold
	err := l.db.Update(func(txn *badger.Txn) (err error) {
		h, err = releaseHold(txn, job)
		return err
	})
	return h, err
}

// errNotHeld: the hold was charged or released already.
var errNotHeld = errors.New("hold not held")

// releaseHold returns a held hold's amount to its renter's available funds.
func releaseHold(txn *badger.Txn, job string) (Hold, error) {
	var h Hold
	if err := getJSON(txn, prefixHold+job, &h); err != nil {
		return h, err
	}
	if h.State != HoldHeld {
		return h, fmt.Errorf("%w: the hold of job %s is %s", errNotHeld, job, h.State)
	}
	a, err := getAccount(txn, h.Renter)
	if err != nil {
		return h, err
	}
	a.Held -= h.Amount
	a.Available += h.Amount
	a.OpenHolds = max(0, a.OpenHolds-1)
	h.State = HoldReleased
	if err := putJSON(txn, prefixHold+job, h); err != nil {
		return h, err
	}
	return h, putJSON(txn, prefixAccount+h.Renter, a)
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
}

// ChargeReports stores job reports and charges their holds, many per transaction, by the
// rules of docs/settlement.md: a receipt the renter countersigned is charged at once; one
// it did not waits for the dispute window (ChargeDue). A charge moves the hold's amount:
// the charge to the provider's earning (less the commission), the rest back to the
// renter's available funds. A report already stored changes nothing but what it adds: the
// renter's countersignature (then charged, unless disputed) or a later checkpoint.
func (l *Ledger) ChargeReports(items []ReportCharge) ([]ReportOutcome, error) {
	out := make([]ReportOutcome, len(items))
	for start := 0; start < len(items); {
		// All of a group or nothing: a group too big for one transaction is halved.
		n := len(items) - start
		for {
			err := l.db.Update(func(txn *badger.Txn) error {
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
		if h.State == HoldPending && len(prev.ReceiptCountersig) > 0 {
			e, err := chargeHold(txn, h, prev, prev.Terms.Amount, protocol.RuleCountersignedReceipt)
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
		return ReportOutcome{Added: true, Pending: true}, nil // the renter disputed first: a decision charges it
	default:
		return ReportOutcome{Added: true}, nil // released (it never ran, said the provider) or charged
	}
	if it.Countersigned {
		e, err := chargeHold(txn, h, rep, it.Amount, protocol.RuleCountersignedReceipt)
		return ReportOutcome{Added: true, Earning: e}, err
	}
	h.State, h.PendingUntil, h.PendingCharge = HoldPending, it.PendingUntil, it.CheckpointAmount
	if err := txn.Set(pendingKey(h), nil); err != nil {
		return ReportOutcome{}, err
	}
	return ReportOutcome{Added: true, Pending: true}, putJSON(txn, prefixHold+h.Job, h)
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
func (l *Ledger) ChargeDue(now time.Time) ([]Earning, error) {
	var holds []Hold
	err := l.db.View(func(txn *badger.Txn) error {
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
		err := l.db.Update(func(txn *badger.Txn) error {
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
			e, err := chargeHold(txn, cur, rep, cur.PendingCharge, protocol.RuleCheckpoint)
			if e != nil {
				out = append(out, *e)
			}
			return err
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func earningKey(provider, receipt string) string { return prefixEarning + provider + "/" + receipt }

// GetEarning returns a provider's earning from one receipt, or ErrNotFound.
func (l *Ledger) GetEarning(provider, receipt string) (Earning, error) {
	var e Earning
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, earningKey(provider, receipt), &e) })
	return e, err
}

// Earnings returns a provider's earnings ("" for all), oldest first.
func (l *Ledger) Earnings(provider string) ([]Earning, error) {
	prefix := prefixEarning
	if provider != "" {
		prefix += provider + "/"
	}
	out, err := scanAll[Earning](l, prefix, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].EndedAt.Before(out[k].EndedAt) })
	return out, err
}

// PutPayoutSettings stores a provider's signed payout settings unless a newer sequence is
// stored already; it reports whether it replaced them.
func (l *Ledger) PutPayoutSettings(s PayoutSettings) (bool, error) {
	stored := false
	err := l.db.Update(func(txn *badger.Txn) error {
		var cur PayoutSettings
		if err := getJSON(txn, prefixSettings+s.Provider, &cur); err == nil && cur.Seq >= s.Seq {
			return nil
		} else if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		stored = true
		return putJSON(txn, prefixSettings+s.Provider, s)
	})
	return stored, err
}

// GetPayoutSettings returns a provider's payout settings, or ErrNotFound.
func (l *Ledger) GetPayoutSettings(provider string) (PayoutSettings, error) {
	var s PayoutSettings
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixSettings+provider, &s) })
	return s, err
}

// Transaction states of the payout state machine (docs/settlement.md).
const (
	TxPlanned   = "planned"   // not signed yet
	TxSigned    = "signed"    // signed, signature and bytes recorded, maybe sent
	TxConfirmed = "confirmed" // found on chain, confirmed
)

// BatchTx is one Solana transaction of a payout batch.
type BatchTx struct {
	Payouts   []int  `json:"payouts"` // indexes into Batch.Payouts
	State     string `json:"state"`
	Signature string `json:"signature,omitempty"`
	Raw       []byte `json:"raw,omitempty"`
	// LastValid is the last block height at which the signed transaction can land.
	LastValid uint64 `json:"last_valid_block_height,omitempty"`
	Attempts  int    `json:"attempts"`
	// Slot is the slot its latest signature's blockhash was read at: it cannot have
	// landed before. Failures counts its failures on chain.
	Slot     uint64 `json:"slot,omitempty"`
	Failures int    `json:"failures,omitempty"`
	Fee      uint64 `json:"fee_lamports,omitempty"`
	// CreateATA lists the payouts whose token account the transaction creates.
	CreateATA []int `json:"create_ata,omitempty"`
}

// Batch is a payout batch as the coordinator settles it.
type Batch struct {
	protocol.PayoutBatch
	CreatedAt time.Time `json:"created_at"`
	Error     string    `json:"error,omitempty"`
	Txs       []BatchTx `json:"txs,omitempty"`
	// Record is the latest signed PayoutBatch envelope.
	Record []byte `json:"record,omitempty"`
	// Settings are the providers' signed payout settings the batch relied on.
	Settings map[string][]byte `json:"settings,omitempty"`
	// Marking is set while the batch's receipts are being marked as taken by it (in
	// chunks: a batch may pay more receipts than one ledger transaction holds).
	Marking bool `json:"marking,omitempty"`
	// Deferred are the payouts taken out of the batch before any transaction paying them
	// was signed: their receipts wait for the next batch.
	Deferred []DeferredPayout `json:"deferred,omitempty"`
	DryRun   bool             `json:"-"`
}

// DeferredPayout is a payout moved out of a batch, and why.
type DeferredPayout struct {
	Provider string             `json:"provider"`
	Amount   protocol.MicroUSDC `json:"amount"`
	Receipts []string           `json:"receipts"`
	Reason   string             `json:"reason"`
	At       time.Time          `json:"at"`
}

// DeferPayouts stores a batch from which payouts were taken out, and gives their receipts
// back to the pending earnings, in one ledger transaction: no receipt is ever both in a
// batch and pending.
func (l *Ledger) DeferPayouts(b Batch, deferred []DeferredPayout) error {
	return l.db.Update(func(txn *badger.Txn) error {
		for _, d := range deferred {
			for _, r := range d.Receipts {
				key := earningKey(d.Provider, r)
				var e Earning
				if err := getJSON(txn, key, &e); err != nil {
					return fmt.Errorf("receipt %s of %s: %w", r, d.Provider, err)
				}
				if e.Batch != b.Batch {
					continue
				}
				e.Batch = ""
				if err := putJSON(txn, key, e); err != nil {
					return err
				}
			}
		}
		return putJSON(txn, prefixBatch+b.Batch, b)
	})
}

// BatchFailed is the state of a batch that could not take its receipts (one was in another
// batch already); it pays nothing.
const BatchFailed = "failed"

// markChunk is how many receipts one ledger transaction marks.
const markChunk = 500

// NextBatchID returns a new batch ID for the day: YYYYMMDD-NNN.
func (l *Ledger) NextBatchID(now time.Time) (string, error) {
	day := now.UTC().Format("20060102")
	var n int
	err := l.db.Update(func(txn *badger.Txn) error {
		if err := getJSON(txn, prefixBatchDay+day, &n); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		n++
		return putJSON(txn, prefixBatchDay+day, n)
	})
	return fmt.Sprintf("%s-%03d", day, n), err
}

// CreateBatch stores a new batch, then marks each receipt it pays as taken by it, in
// chunks, so that no other batch pays it. A crash in between leaves the batch marked
// Marking: FinishMarking completes it before anything is planned or sent.
func (l *Ledger) CreateBatch(b Batch) error {
	b.Marking = true
	err := l.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get([]byte(prefixBatch + b.Batch)); err == nil {
			return fmt.Errorf("batch %s exists", b.Batch)
		}
		return putJSON(txn, prefixBatch+b.Batch, b)
	})
	if err != nil {
		return err
	}
	return l.markReceipts(b)
}

// markReceipts marks a batch's receipts as taken by it. A receipt in another batch fails the
// batch: its own marks are undone and it is stored as failed.
func (l *Ledger) markReceipts(b Batch) error {
	type item struct{ provider, receipt string }
	var all []item
	for _, p := range b.Payouts {
		for _, r := range p.Receipts {
			all = append(all, item{p.Provider, r})
		}
	}
	// setBatch moves every receipt whose batch is from to batch to, markChunk per ledger
	// transaction; a receipt in another batch sets conflict (and stops the marking).
	var conflict error
	setBatch := func(from, to string) error {
		for start := 0; start < len(all); start += markChunk {
			err := l.db.Update(func(txn *badger.Txn) error {
				for _, it := range all[start:min(start+markChunk, len(all))] {
					key := earningKey(it.provider, it.receipt)
					var e Earning
					if err := getJSON(txn, key, &e); err != nil {
						return fmt.Errorf("receipt %s of %s: %w", it.receipt, it.provider, err)
					}
					switch e.Batch {
					case to:
						continue
					case from:
						e.Batch = to
						if err := putJSON(txn, key, e); err != nil {
							return err
						}
					default:
						if conflict == nil {
							conflict = fmt.Errorf("receipt %s is already in batch %s", it.receipt, e.Batch)
						}
						if to != "" {
							return conflict
						}
					}
				}
				return nil
			})
			if err != nil && err != conflict {
				return err
			}
			if conflict != nil && to != "" {
				return nil
			}
		}
		return nil
	}
	if err := setBatch("", b.Batch); err != nil {
		return err
	}
	if conflict != nil {
		if err := setBatch(b.Batch, ""); err != nil {
			return err
		}
	}
	return l.db.Update(func(txn *badger.Txn) error {
		var cur Batch
		if err := getJSON(txn, prefixBatch+b.Batch, &cur); err != nil {
			return err
		}
		cur.Marking = false
		if conflict != nil {
			cur.State, cur.Error = BatchFailed, conflict.Error()
			if err := putJSON(txn, prefixBatch+b.Batch, cur); err != nil {
				return err
			}
			return conflict
		}
		return putJSON(txn, prefixBatch+b.Batch, cur)
	})
}

// FinishMarking completes the marking of the batches a crash interrupted.
func (l *Ledger) FinishMarking() error {
	bs, err := l.Batches()
	if err != nil {
		return err
	}
	for _, b := range bs {
		if b.Marking {
			if err := l.markReceipts(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// PutBatch stores a batch's new state.
func (l *Ledger) PutBatch(b Batch) error {
	return l.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixBatch+b.Batch, b) })
}

// GetBatch returns a batch, or ErrNotFound.
func (l *Ledger) GetBatch(id string) (Batch, error) {
	var b Batch
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixBatch+id, &b) })
	return b, err
}

// Batches returns every batch, newest first.
func (l *Ledger) Batches() ([]Batch, error) {
	out, err := scanAll[Batch](l, prefixBatch, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].Batch > out[k].Batch })
	return out, err
}

// BatchesBefore calls f with each batch whose ID sorts before before ("" for all), newest
// first, until f returns false: a page of batches reads only that page from the ledger.
func (l *Ledger) BatchesBefore(before string, f func(Batch) bool) error {
	return l.db.View(func(txn *badger.Txn) error {
		p := []byte(prefixBatch)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p, Reverse: true, PrefetchValues: false})
		defer it.Close()
		seek := append(append([]byte{}, p...), 0xff)
		if before != "" {
			seek = []byte(prefixBatch + before)
		}
		for it.Seek(seek); it.ValidForPrefix(p); it.Next() {
			k := string(it.Item().Key())
			if before != "" && k >= prefixBatch+before {
				continue
			}
			var b Batch
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &b) }); err != nil {
				return fmt.Errorf("ledger: %s: %w", k, err)
			}
			if !f(b) {
				return nil
			}
		}
		return nil
	})
}

// scanAll decodes every value under a prefix, keeping those keep accepts (nil keeps all).
func scanAll[T any](l *Ledger, prefix string, keep func(T) bool) (out []T, err error) {
	err = l.db.View(func(txn *badger.Txn) error {
		out, err = scanTxn(txn, prefix, keep)
		return err
	})
	return out, err
}

// scanTxn is scanAll within a transaction.
func scanTxn[T any](txn *badger.Txn, prefix string, keep func(T) bool) ([]T, error) {
	var out []T
	err := scan(txn, prefix, func(key string, val []byte) error {
		var v T
		if err := json.Unmarshal(val, &v); err != nil {
			return fmt.Errorf("ledger: %s: %w", key, err)
		}
		if keep == nil || keep(v) {
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// PendingByProvider sums each provider's earnings not yet in a batch, with their receipts
// sorted.
func PendingByProvider(earnings []Earning) map[string]PendingPayout {
	out := map[string]PendingPayout{}
	for _, e := range earnings {
		if e.Batch != "" {
			continue
		}
		p := out[e.Provider]
		p.Amount += e.Net
		p.Receipts = append(p.Receipts, e.Receipt)
		out[e.Provider] = p
	}
	for k, p := range out {
		slices.Sort(p.Receipts)
		out[k] = p
	}
	return out
}

// PendingPayout is what a provider is owed and for which receipts.
type PendingPayout struct {
	Amount   protocol.MicroUSDC
	Receipts []string
}

// Signed reports whether the latest signed record lists every confirmed transaction.
func (b Batch) Signed() bool {
	n := 0
	for _, t := range b.Txs {
		if t.State == TxConfirmed {
			n++
		}
	}
	return len(b.Record) > 0 && n == len(b.Transactions)
}

// UnsettledUSDC reports whether a batch has Solana transactions not confirmed yet.
func (b Batch) UnsettledUSDC() bool {
	for _, t := range b.Txs {
		if t.State != TxConfirmed {
			return true
		}
	}
	return false
}

const prefixScheduledRun = "money/scheduled-run/"

// ScheduledPayoutDone reports whether the scheduled payouts of a key (schedule/YYYY-MM-DD) ran.
func (l *Ledger) ScheduledPayoutDone(day string) (bool, error) {
	var done bool
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixScheduledRun+day, &done) })
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return done, err
}

// MarkScheduledPayoutDone records that the scheduled payouts of a key ran.
func (l *Ledger) MarkScheduledPayoutDone(day string) error {
	return l.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixScheduledRun+day, true) })
}

// NextPayoutSettingsSeq returns the sequence for a provider's next payout settings.
func (l *Ledger) NextPayoutSettingsSeq(now time.Time) (uint64, error) {
	return l.nextSeq("provider/payout-settings-seq", now)
}

const keyOwnPayoutSettings = "provider/payout-settings"

// SetOwnPayoutSettings keeps the payout settings a provider chose from its dashboard, which
// replace [payout] of its config.toml; nil removes them, and config.toml is in force again.
func (l *Ledger) SetOwnPayoutSettings(s *protocol.PayoutSettings) error {
	return l.db.Update(func(txn *badger.Txn) error {
		if s == nil {
			return txn.Delete([]byte(keyOwnPayoutSettings))
		}
		return putJSON(txn, keyOwnPayoutSettings, s)
	})
}

// OwnPayoutSettings returns the settings SetOwnPayoutSettings kept, or ErrNotFound.
func (l *Ledger) OwnPayoutSettings() (*protocol.PayoutSettings, error) {
	raw, err := l.getRaw(keyOwnPayoutSettings)
	if err != nil {
		return nil, err
	}
	var s protocol.PayoutSettings
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("ledger: own payout settings: %w", err)
	}
	return &s, nil
}

const prefixOwnDeposit = "wallet/deposit/"

// OwnDeposit is a deposit this node sent, recorded before it is sent so that a crash
// between sending and claiming loses nothing: the claim is retried.
type OwnDeposit struct {
	Signature string             `json:"signature"`
	Amount    protocol.MicroUSDC `json:"amount"`
	Raw       []byte             `json:"raw,omitempty"`
	LastValid uint64             `json:"last_valid_block_height"`
	SentAt    time.Time          `json:"sent_at"`
	Claimed   bool               `json:"claimed"`
	Error     string             `json:"error,omitempty"`
	// Coordinator is the peer ID of the coordinator whose treasury it was sent to (empty in
	// deposits recorded before it was kept: the home coordinator's).
	Coordinator string `json:"coordinator,omitempty"`
}

// OwnDeposit returns one of this node's deposits by its transaction signature.
func (l *Ledger) OwnDeposit(signature string) (OwnDeposit, error) {
	var d OwnDeposit
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixOwnDeposit+signature, &d) })
	return d, err
}

// PutOwnDeposit stores a deposit's state.
func (l *Ledger) PutOwnDeposit(d OwnDeposit) error {
	return l.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixOwnDeposit+d.Signature, d) })
}

// OwnDeposits returns this node's deposits, oldest first.
func (l *Ledger) OwnDeposits() ([]OwnDeposit, error) {
	out, err := scanAll[OwnDeposit](l, prefixOwnDeposit, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].SentAt.Before(out[k].SentAt) })
	return out, err
}

const prefixAbandoned = "coordinator/abandoned/"

// Abandonment is a renter's account, kept by the coordinator, of a job whose provider sent
// no receipt by the lease's end: the lease and the latest usage checkpoint, each with the
// renter's countersignature, which prove the job ran at least Seconds.
type Abandonment struct {
	Job                  string    `json:"job"`
	Renter               string    `json:"renter"`
	Provider             string    `json:"provider"`
	ReceivedAt           time.Time `json:"received_at"`
	Seconds              int64     `json:"seconds"`
	Lease                []byte    `json:"lease"`
	LeaseCountersig      []byte    `json:"lease_countersignature"`
	Checkpoint           []byte    `json:"checkpoint"`
	CheckpointCountersig []byte    `json:"checkpoint_countersignature"`
	// Counted is when the job was counted against its provider (its hold expired with no
	// report from it); zero until then.
	Counted time.Time `json:"counted,omitzero"`
}

// PutAbandonment keeps a renter's account of an abandoned job; the first one of a job
// stays (false when there was one).
func (l *Ledger) PutAbandonment(a Abandonment) (bool, error) {
	return l.createJSON(prefixAbandoned+a.Job, a)
}

// GetAbandonment returns the account of an abandoned job, or ErrNotFound.
func (l *Ledger) GetAbandonment(job string) (Abandonment, error) {
	var a Abandonment
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixAbandoned+job, &a) })
	return a, err
}

// CountAbandonment marks an abandoned job counted against its provider; false when it was
// already (so that a job counts once).
func (l *Ledger) CountAbandonment(job string, now time.Time) (bool, error) {
	first := false
	_, err := updateJSON(l, prefixAbandoned+job, func(a *Abandonment) error {
		first = a.Counted.IsZero()
		if first {
			a.Counted = now
		}
		return nil
	})
	return first, err
}
