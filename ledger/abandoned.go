package ledger

import (
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

// CountAbandonment marks an abandoned job counted against its provider; false when it was
// already (so that a job counts once).
func (s *EscrowStore) CountAbandonment(job string, now time.Time) (bool, error) {
	first := false
	_, err := updateJSON(s.kv, prefixAbandoned+job, func(a *Abandonment) error {
		first = a.Counted.IsZero()
		if first {
			a.Counted = now
		}
		return nil
	})
	return first, err
}
