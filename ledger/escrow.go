package ledger

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// The coordinator's escrow book: renters' accounts, deposits credited, escrow holds, the
// providers' job reports that charge them, renters' disputes and abandoned jobs. Every
// change that moves money is one badger transaction, so a crash leaves either all of it or
// none; a charge writes the provider's earning (PayoutStore's key) in the same transaction.

// EscrowStore keeps the coordinator's escrow book: money/account/, money/deposit/,
// money/hold/, money/pending/, the renter indexes (money/renter-hold/,
// money/renter-deposit/), coordinator/job-report/, coordinator/dispute/ and
// coordinator/abandoned/.
type EscrowStore struct{ *kv }

// The records the wallet stream carries are defined in protocol (protocol/wallet.go); the
// ledger stores them as they travel.
type (
	Account = protocol.Account
	Deposit = protocol.Deposit
	Hold    = protocol.Hold
	Earning = protocol.Earning
)

const (
	prefixAccount = "money/account/"
	prefixDeposit = "money/deposit/"
	prefixHold    = "money/hold/"
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

// GetAccount returns a renter's account (zero when it never deposited).
func (s *EscrowStore) GetAccount(renter string) (Account, error) {
	a := Account{Renter: renter}
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixAccount+renter, &a) })
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
func (s *EscrowStore) CreditDeposit(d Deposit) (bool, Account, error) {
	created := false
	var a Account
	err := s.updateMoney(func(txn *badger.Txn) error {
		created, a = false, Account{}
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
func (s *EscrowStore) GetDeposit(signature string) (Deposit, error) {
	var d Deposit
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixDeposit+signature, &d) })
	return d, err
}

// Deposits returns all credited deposits, oldest first.
func (s *EscrowStore) Deposits() ([]Deposit, error) {
	out, err := scanAll[Deposit](s.kv, prefixDeposit, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].CreditedAt.Before(out[k].CreditedAt) })
	return out, err
}

// RenterDeposits returns a renter's latest deposits, newest first, at most limit: it reads
// that renter's own index only.
func (s *EscrowStore) RenterDeposits(renter string, limit int) ([]Deposit, error) {
	return newestOf[Deposit](s.kv, prefixRenterDeposit, renter, prefixDeposit, limit)
}

// PlaceHold moves a hold's amount from the renter's available to held funds and stores
// the hold. The same job again returns the hold already placed (a retried request) if its
// terms are the same, and an error otherwise.
func (s *EscrowStore) PlaceHold(h Hold) (Hold, error) {
	var out Hold
	err := s.updateMoney(func(txn *badger.Txn) error {
		out = Hold{}
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
func (s *EscrowStore) GetHold(job string) (Hold, error) {
	var h Hold
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixHold+job, &h) })
	return h, err
}

// Holds returns every hold, newest first.
func (s *EscrowStore) Holds() ([]Hold, error) {
	out, err := scanAll[Hold](s.kv, prefixHold, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].IssuedAt.After(out[k].IssuedAt) })
	return out, err
}

// RenterHolds returns a renter's latest holds, newest first, at most limit: it reads that
// renter's own index only.
func (s *EscrowStore) RenterHolds(renter string, limit int) ([]Hold, error) {
	return newestOf[Hold](s.kv, prefixRenterHold, renter, prefixHold, limit)
}

// ReleaseExpiredHolds returns to their renters the holds still unused at their expiry, and
// says how many (ReleaseExpired lists them).
func (s *EscrowStore) ReleaseExpiredHolds(now time.Time) (int, error) {
	released, err := s.ReleaseExpired(now)
	return len(released), err
}

// ReleaseExpired returns to their renters the holds still unused at their expiry and
// returns them as released. A hold whose renter disputed a receipt the provider never
// reported is unused too: it returns, and its dispute closes (DisputeExpired).
func (s *EscrowStore) ReleaseExpired(now time.Time) ([]Hold, error) {
	holds, err := s.Holds()
	if err != nil {
		return nil, err
	}
	var out []Hold
	for _, h := range holds {
		if (h.State != HoldHeld && h.State != HoldDisputed) || now.Before(h.ExpiresAt) {
			continue
		}
		var released Hold
		err := s.updateMoney(func(txn *badger.Txn) (err error) {
			released, err = expireHold(txn, h.Job, now)
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
func (s *EscrowStore) ReleaseHold(job string) (Hold, error) {
	var h Hold
	err := s.updateMoney(func(txn *badger.Txn) (err error) {
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
	return h, refund(txn, &h)
}

// expireHold returns a hold unused at its expiry to its renter: held, or disputed while the
// provider never reported the job (the dispute closes, expired).
func expireHold(txn *badger.Txn, job string, now time.Time) (Hold, error) {
	var h Hold
	if err := getJSON(txn, prefixHold+job, &h); err != nil {
		return h, err
	}
	switch h.State {
	case HoldHeld:
		if err := markAbandonmentDue(txn, job, now); err != nil {
			return h, err
		}
	case HoldDisputed:
		var rep JobReport
		if err := getJSON(txn, jobReportKey(job, h.Provider), &rep); err == nil {
			return h, fmt.Errorf("%w: the disputed job %s was reported: a decision charges it", errNotHeld, job)
		} else if !errors.Is(err, ErrNotFound) {
			return h, err
		}
		if err := closeDispute(txn, job, DisputeExpired, 0, now); err != nil {
			return h, err
		}
	default:
		return h, fmt.Errorf("%w: the hold of job %s is %s", errNotHeld, job, h.State)
	}
	return h, refund(txn, &h)
}

// refund returns a hold's whole amount to its renter's available funds, releasing it.
func refund(txn *badger.Txn, h *Hold) error {
	a, err := getAccount(txn, h.Renter)
	if err != nil {
		return err
	}
	a.Held -= h.Amount
	a.Available += h.Amount
	a.OpenHolds = max(0, a.OpenHolds-1)
	h.State = HoldReleased
	if err := putJSON(txn, prefixHold+h.Job, h); err != nil {
		return err
	}
	return putJSON(txn, prefixAccount+h.Renter, a)
}
