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
	// Counted is when the job was counted against its provider (its hold expired with no
	// report from it); zero until then.
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

// countAbandonment marks the abandoned job of a hold that expired counted against its
// provider and has count change the provider's reliability, both within txn, and returns
// the account; nil when no renter showed the job ran, or it was counted already.
func countAbandonment(txn *badger.Txn, h Hold, now time.Time, count func(Abandonment, *ReliabilityState)) (*Abandonment, error) {
	var a Abandonment
	switch err := getJSON(txn, prefixAbandoned+h.Job, &a); {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if !a.Counted.IsZero() {
		return nil, nil
	}
	a.Counted = now
	if err := putJSON(txn, prefixAbandoned+h.Job, a); err != nil {
		return nil, err
	}
	_, err := updateReliability(txn, h.Provider, func(rs *ReliabilityState) error { count(a, rs); return nil })
	return &a, err
}
