package ledger

import (
	"time"

	"github.com/dgraph-io/badger/v4"
)

// ApplicantStore keeps a provider's own application and certificate
// (provider/application, provider/certificate).
type ApplicantStore struct{ *kv }

const (
	keyOwnApplication = "provider/application"
	keyOwnCertificate = "provider/certificate"
)

// OwnApplication is the provider's own application as it stands: what it sent, whether the
// coordinator has it, and the latest status it heard.
type OwnApplication struct {
	ID          string    `json:"id"`
	Seq         uint64    `json:"seq"`
	Raw         []byte    `json:"raw"`         // the latest signed record
	Delivered   bool      `json:"delivered"`   // the coordinator acknowledged Raw
	Attempts    int       `json:"attempts"`    // delivery attempts of Raw
	LastError   string    `json:"last_error"`  // why the last attempt failed
	Coordinator string    `json:"coordinator"` // peer ID it was sent to
	Status      string    `json:"status"`
	Tier        string    `json:"tier,omitempty"`
	Message     string    `json:"message,omitempty"`
	SubmittedAt time.Time `json:"submitted_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// NotificationSeq is the sequence of the coordinator's notification that set Status:
	// an older one arriving late changes nothing.
	NotificationSeq uint64 `json:"notification_seq"`
	// DecisionDue is when the coordinator said it would decide (its notification).
	DecisionDue time.Time `json:"decision_due,omitzero"`
}

// SetOwnApplication stores the provider's application.
func (s *ApplicantStore) SetOwnApplication(a OwnApplication) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, keyOwnApplication, a) })
}

// UpdateOwnApplication changes the provider's application atomically.
func (s *ApplicantStore) UpdateOwnApplication(f func(a *OwnApplication) error) (OwnApplication, error) {
	return updateJSON(s.kv, keyOwnApplication, f)
}

// GetOwnApplication returns the provider's application, or ErrNotFound.
func (s *ApplicantStore) GetOwnApplication() (OwnApplication, error) {
	var a OwnApplication
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, keyOwnApplication, &a) })
	return a, err
}

// SetOwnCertificate stores the provider's certificate (nil removes it).
func (s *ApplicantStore) SetOwnCertificate(raw []byte) error {
	return s.db.Update(func(txn *badger.Txn) error {
		if raw == nil {
			return txn.Delete([]byte(keyOwnCertificate))
		}
		return txn.Set([]byte(keyOwnCertificate), raw)
	})
}

// OwnCertificate returns the provider's certificate, or ErrNotFound.
func (s *ApplicantStore) OwnCertificate() ([]byte, error) { return s.getRaw(keyOwnCertificate) }
