package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// ApplicationStore keeps the coordinator's application queue and its audit trail
// (coordinator/application/), with the network each application came from
// (coordinator/application-network/).
type ApplicationStore struct{ *kv }

const prefixApplication = "coordinator/application/"

// Event is one entry of an application's audit trail: who did what, when and why.
type Event struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`  // "provider <peer ID>", "operator <name>", "rule"
	Action string    `json:"action"` // submitted, answered, approved, rejected, info-requested, revoked, notified, ...
	Detail string    `json:"detail,omitempty"`
}

// Application is an application in the coordinator's queue.
type Application struct {
	ID           string    `json:"id"`
	Provider     string    `json:"provider"`
	Status       string    `json:"status"`
	Tier         string    `json:"tier,omitempty"` // granted tier, once approved
	ProposedTier string    `json:"proposed_tier"`
	TierReasons  []string  `json:"tier_reasons,omitempty"`
	CaseByCase   []string  `json:"case_by_case,omitempty"` // models off the supported list
	SubmittedAt  time.Time `json:"submitted_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	Seq          uint64    `json:"seq"` // sequence of the latest application record
	Raw          []byte    `json:"raw"` // the latest signed application record
	// Message is the latest question, rejection reason or approval note.
	Message     string `json:"message,omitempty"`
	Certificate []byte `json:"certificate,omitempty"`
	// Notification is the latest signed notification for the provider: pushed to it, and
	// handed out again when it asks for its status.
	Notification []byte  `json:"notification,omitempty"`
	Events       []Event `json:"events"`
	// ReviewSince is when the review clock started: the submission, or the applicant's
	// latest answer to a question (zero in records from before: SubmittedAt).
	ReviewSince time.Time `json:"review_since,omitzero"`
	// Reminded is the last reminder sent to the reviewers about this review: "", "due-soon"
	// or "overdue" (each is sent once).
	Reminded string `json:"reminded,omitempty"`
	// TierShortSince is when the coordinator first measured an Enterprise provider's link
	// under the tier's minimum, in the shortfall still running (zero: none).
	TierShortSince time.Time `json:"tier_short_since,omitzero"`
}

// PutApplication stores a new application; it fails if the ID is taken.
func (s *ApplicationStore) PutApplication(a Application) error {
	created, err := s.createJSON(prefixApplication+a.ID, a)
	if err == nil && !created {
		err = fmt.Errorf("application %s exists", a.ID)
	}
	return err
}

// UpdateApplication changes an application atomically and returns it as stored.
func (s *ApplicationStore) UpdateApplication(id string, f func(a *Application) error) (Application, error) {
	return updateJSON(s.kv, prefixApplication+id, f)
}

// GetApplication returns one application, or ErrNotFound.
func (s *ApplicationStore) GetApplication(id string) (Application, error) {
	var a Application
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixApplication+id, &a) })
	return a, err
}

// Applications returns every application, oldest submission first.
func (s *ApplicationStore) Applications() ([]Application, error) {
	var out []Application
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixApplication, func(key string, val []byte) error {
			var a Application
			if err := json.Unmarshal(val, &a); err != nil {
				return fmt.Errorf("ledger: application %s: %w", key, err)
			}
			out = append(out, a)
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].SubmittedAt.Before(out[j].SubmittedAt) })
	return out, err
}

// The network each application in the coordinator's queue came from (an IPv4 address, an
// IPv6 /48), kept beside the application so that its JSON stays as it is: the coordinator
// caps the open applications of one network, across its restarts. And the pruning of
// applications whose retention has passed.

const prefixApplicationNetwork = "coordinator/application-network/"

// PutApplicationFrom stores a new application and the network it came from ("" for none:
// loopback, or no connection), in one transaction; it fails if the ID is taken.
func (s *ApplicationStore) PutApplicationFrom(a Application, network string) error {
	return s.db.Update(func(txn *badger.Txn) error {
		key := prefixApplication + a.ID
		if _, err := txn.Get([]byte(key)); err == nil {
			return fmt.Errorf("application %s exists", a.ID)
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		if err := putJSON(txn, key, a); err != nil {
			return err
		}
		if network == "" {
			return nil
		}
		return txn.Set([]byte(prefixApplicationNetwork+a.ID), []byte(network))
	})
}

// ApplicationNetworks returns the network each application came from, by application ID
// (applications from no network are absent).
func (s *ApplicationStore) ApplicationNetworks() (map[string]string, error) {
	out := map[string]string{}
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixApplicationNetwork, func(id string, val []byte) error {
			out[id] = string(val)
			return nil
		})
	})
	return out, err
}

// DeleteApplications removes applications from the queue, with their networks.
func (s *ApplicationStore) DeleteApplications(ids []string) error {
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, id := range ids {
		if err := wb.Delete([]byte(prefixApplication + id)); err != nil {
			return err
		}
		if err := wb.Delete([]byte(prefixApplicationNetwork + id)); err != nil {
			return err
		}
	}
	return wb.Flush()
}
