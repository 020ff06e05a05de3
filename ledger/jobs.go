package ledger

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// JobStore keeps the jobs this node rents or runs (job/<ID>). The job runner and the
// renter write them; the wallet reads them to report receipts and count earnings.
type JobStore struct{ *kv }

const prefixJob = "job/"

// Job states.
const (
	JobLeased  = "leased"  // lease signed by both sides; image not delivered yet
	JobRunning = "running" // the container was started
	JobEnded   = "ended"   // the final receipt is written
	JobFailed  = "failed"  // it never ran (image refused, start failed); no charge
	// JobReleased marks, on a provider, a job ID whose escrow hold it let the coordinator
	// release before any lease: a proposal for it is refused from then on.
	JobReleased = "released"
)

// Job is one job, as the provider or the renter keeps it.
type Job struct {
	ID        string    `json:"id"`
	Side      string    `json:"side"` // provider or renter: which side this node is
	Peer      string    `json:"peer"` // the other side
	State     string    `json:"state"`
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	StartedAt time.Time `json:"started_at,omitzero"`
	// The records, exactly as signed.
	Proposal          []byte `json:"proposal"`
	Lease             []byte `json:"lease,omitempty"`
	LeaseCountersig   []byte `json:"lease_countersignature,omitempty"`
	Receipt           []byte `json:"receipt,omitempty"`
	ReceiptCountersig []byte `json:"receipt_countersignature,omitempty"`
	// GPUs are the UUIDs the provider allocated.
	GPUs []string `json:"gpus,omitempty"`
	// Exit says how the process ended.
	ExitCode   int    `json:"exit_code"`
	ExitReason string `json:"exit_reason,omitempty"`
	// ReportedAt is when the coordinator acknowledged the provider's report of the final
	// receipt (zero while it is still to be delivered).
	ReportedAt  time.Time `json:"reported_at,omitzero"`
	ReportError string    `json:"report_error,omitempty"`
	// CountersigReported is set once the coordinator has the renter's countersignature of
	// the receipt too (it often arrives after the first report).
	CountersigReported bool `json:"countersig_reported,omitempty"`
	// Metering (docs/protocols/jobs.md): the latest checkpoint the renter countersigned,
	// its countersignature and seconds, and when it was countersigned (this node's clock).
	Checkpoint           []byte    `json:"checkpoint,omitempty"`
	CheckpointCountersig []byte    `json:"checkpoint_countersignature,omitempty"`
	CheckpointSeconds    int64     `json:"checkpoint_seconds,omitempty"`
	MeteredAt            time.Time `json:"metered_at,omitzero"`
	// On the renter: when this node learnt that the job started, and when it last saw it
	// running (its own clock): what it countersigns is measured against them.
	ObservedStart   time.Time `json:"observed_start,omitzero"`
	LastSeenRunning time.Time `json:"last_seen_running,omitzero"`
	// Dispute is the renter's signed dispute of the receipt, when it did not match.
	Dispute []byte `json:"dispute,omitempty"`
	// AbandonReported is when the renter's coordinator took its account of the job as
	// abandoned: the lease ended and the provider sent no receipt.
	AbandonReported time.Time `json:"abandon_reported,omitzero"`
	// PriorLeases are the leases Lease extends, oldest first (a lease that grew: each later
	// one names the one before), kept for audit.
	PriorLeases [][]byte `json:"prior_leases,omitempty"`
}

// PutJob stores a job.
func (s *JobStore) PutJob(j Job) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixJob+j.ID, j) })
}

// UpdateJob changes a job atomically and returns it as stored.
func (s *JobStore) UpdateJob(id string, f func(j *Job) error) (Job, error) {
	return updateJSON(s.kv, prefixJob+id, f)
}

// GetJob returns a job, or ErrNotFound.
func (s *JobStore) GetJob(id string) (Job, error) {
	var j Job
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixJob+id, &j) })
	return j, err
}

// CreateJob stores a new job, failing if the ID is taken.
func (s *JobStore) CreateJob(j Job) error {
	created, err := s.createJSON(prefixJob+j.ID, j)
	if err == nil && !created {
		err = fmt.Errorf("job %s exists", j.ID)
	}
	return err
}

// Jobs returns every job, newest first.
func (s *JobStore) Jobs() ([]Job, error) {
	var out []Job
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixJob, func(key string, val []byte) error {
			var j Job
			if err := json.Unmarshal(val, &j); err != nil {
				return fmt.Errorf("ledger: job %s: %w", key, err)
			}
			out = append(out, j)
			return nil
		})
	})
	sort.SliceStable(out, func(i, k int) bool { return out[i].CreatedAt.After(out[k].CreatedAt) })
	return out, err
}

const prefixUnmetered = "unmetered-renter/"

// UnmeteredRenter is, on a provider, the latest job of a renter that it stopped because
// the renter stopped countersigning its usage: the provider refuses that renter's
// proposals for a while after (jobs.unmetered_renter_ban).
type UnmeteredRenter struct {
	Job       string    `json:"job"`
	StoppedAt time.Time `json:"stopped_at"`
}

// RecordUnmeteredRenter keeps the latest job of renter stopped for want of countersigned
// usage.
func (s *JobStore) RecordUnmeteredRenter(renter string, u UnmeteredRenter) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixUnmetered+renter, u) })
}

// GetUnmeteredRenter returns the latest job of renter stopped for want of countersigned
// usage, or ErrNotFound.
func (s *JobStore) GetUnmeteredRenter(renter string) (UnmeteredRenter, error) {
	var u UnmeteredRenter
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixUnmetered+renter, &u) })
	return u, err
}
