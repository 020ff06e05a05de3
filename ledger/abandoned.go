package ledger

import (
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"
)

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
	// Due is when the job's hold expired with no report from its provider: from then on
	// the job is to be counted against the provider (set in the release's own
	// transaction, so that a crash after the release loses no count). Counted is when it
	// was; zero until then.
	Due     time.Time `json:"due,omitzero"`
	Counted time.Time `json:"counted,omitzero"`
}

// PutAbandonment keeps a renter's account of an abandoned job; the first one of a job
// stays (false when there was one).
func (s *EscrowStore) PutAbandonment(a Abandonment) (bool, error) {
	return s.createJSON(prefixAbandoned+a.Job, a)
}

// GetAbandonment returns the account of an abandoned job, or ErrNotFound.
func (s *EscrowStore) GetAbandonment(job string) (Abandonment, error) {
	var a Abandonment
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixAbandoned+job, &a) })
	return a, err
}

// CountAbandonment counts an abandoned job against its provider: count updates the
// provider's reliability state, and the job is marked counted, in one transaction, so that
// a crash counts it either once or not yet (DueAbandonments finds it again). False when it
// was counted already.
func (s *EscrowStore) CountAbandonment(job string, now time.Time, count func(a Abandonment, st *ReliabilityState) error) (bool, error) {
	first := false
	err := s.update(func(txn *badger.Txn) error {
		var a Abandonment
		if err := getJSON(txn, prefixAbandoned+job, &a); err != nil {
			return err
		}
		if first = a.Counted.IsZero(); !first {
			return nil
		}
		a.Counted = now
		if err := putJSON(txn, prefixAbandoned+job, a); err != nil {
			return err
		}
		return updateReliability(txn, a.Provider, func(st *ReliabilityState) error { return count(a, st) })
	})
	return first, err
}

// DueAbandonments returns the abandoned jobs due to be counted and not counted yet.
func (s *EscrowStore) DueAbandonments() ([]Abandonment, error) {
	return scanAll(s.kv, prefixAbandoned, func(a Abandonment) bool { return !a.Due.IsZero() && a.Counted.IsZero() })
}

// markAbandonmentDue marks a job's abandonment, if a renter sent one, due to be counted:
// its hold expired with no report from the provider.
func markAbandonmentDue(txn *badger.Txn, job string, now time.Time) error {
	var a Abandonment
	switch err := getJSON(txn, prefixAbandoned+job, &a); {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	if !a.Due.IsZero() {
		return nil
	}
	a.Due = now
	return putJSON(txn, prefixAbandoned+job, a)
}
