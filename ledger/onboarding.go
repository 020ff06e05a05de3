package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// Onboarding state: the coordinator's application queue and audit trail, the provider's own
// application and certificate, notifications received, and revocations known.

const (
	prefixApplication  = "coordinator/application/"
	prefixSerial       = "serial/"
	keyOwnApplication  = "provider/application"
	keyOwnCertificate  = "provider/certificate"
	prefixNotification = "notification/"
	prefixRevocation   = "revocation/"
)

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
func (l *Ledger) PutApplication(a Application) error {
	created, err := l.createJSON(prefixApplication+a.ID, a)
	if err == nil && !created {
		err = fmt.Errorf("application %s exists", a.ID)
	}
	return err
}

// UpdateApplication changes an application atomically and returns it as stored.
func (l *Ledger) UpdateApplication(id string, f func(a *Application) error) (Application, error) {
	return updateJSON(l, prefixApplication+id, f)
}

// GetApplication returns one application, or ErrNotFound.
func (l *Ledger) GetApplication(id string) (Application, error) {
	var a Application
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixApplication+id, &a) })
	return a, err
}

// Applications returns every application, oldest submission first.
func (l *Ledger) Applications() ([]Application, error) {
	var out []Application
	err := l.db.View(func(txn *badger.Txn) error {
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

// NextSerial reserves the next number of a named counter (certificate serials,
// notification sequences), durably and following the clock in milliseconds, like
// NextOfferSeq.
func (l *Ledger) NextSerial(name string, now time.Time) (uint64, error) {
	return l.nextSeq(prefixSerial+name, now)
}

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
func (l *Ledger) SetOwnApplication(a OwnApplication) error {
	return l.db.Update(func(txn *badger.Txn) error { return putJSON(txn, keyOwnApplication, a) })
}

// UpdateOwnApplication changes the provider's application atomically.
func (l *Ledger) UpdateOwnApplication(f func(a *OwnApplication) error) (OwnApplication, error) {
	return updateJSON(l, keyOwnApplication, f)
}

// GetOwnApplication returns the provider's application, or ErrNotFound.
func (l *Ledger) GetOwnApplication() (OwnApplication, error) {
	var a OwnApplication
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, keyOwnApplication, &a) })
	return a, err
}

// SetOwnCertificate stores the provider's certificate (nil removes it).
func (l *Ledger) SetOwnCertificate(raw []byte) error {
	return l.db.Update(func(txn *badger.Txn) error {
		if raw == nil {
			return txn.Delete([]byte(keyOwnCertificate))
		}
		return txn.Set([]byte(keyOwnCertificate), raw)
	})
}

// OwnCertificate returns the provider's certificate, or ErrNotFound.
func (l *Ledger) OwnCertificate() ([]byte, error) { return l.getRaw(keyOwnCertificate) }

// Notification is a notice kept for the node's operator: a signed record from a
// coordinator, or one the node wrote itself (Raw empty).
type Notification struct {
	Key        string    `json:"-"`
	ReceivedAt time.Time `json:"received_at"`
	From       string    `json:"from"` // coordinator peer ID, or "node"
	Seq        uint64    `json:"seq"`
	Subject    string    `json:"subject"`
	Body       string    `json:"body"`
	Raw        []byte    `json:"raw,omitempty"`
}

// AddNotification stores a notification once: the same sender and sequence again is a
// no-op, and reports false.
func (l *Ledger) AddNotification(n Notification) (bool, error) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n.Seq)
	return l.createJSON(fmt.Sprintf("%s%s/%x", prefixNotification, n.From, b), n)
}

// Notifications returns every stored notification, oldest first.
func (l *Ledger) Notifications() ([]Notification, error) {
	var out []Notification
	err := l.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixNotification, func(key string, val []byte) error {
			var n Notification
			if err := json.Unmarshal(val, &n); err != nil {
				return fmt.Errorf("ledger: notification %s: %w", key, err)
			}
			n.Key = key
			out = append(out, n)
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].ReceivedAt.Before(out[j].ReceivedAt) })
	return out, err
}

// SaveRevocation stores a revocation record for a provider, keyed by coordinator and
// provider; a later revocation replaces an earlier one.
func (l *Ledger) SaveRevocation(coordinator, provider string, raw []byte) error {
	return l.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(prefixRevocation+coordinator+"/"+provider), raw)
	})
}

// Revocations returns every stored revocation record.
func (l *Ledger) Revocations() ([][]byte, error) {
	var out [][]byte
	err := l.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixRevocation, func(_ string, val []byte) error {
			out = append(out, append([]byte(nil), val...))
			return nil
		})
	})
	return out, err
}

// updateJSON reads the JSON value at key into a T, lets f change it, and writes it back,
// in one transaction; it returns the value as stored.
//
// Updates of one key through updateJSON take turns (Ledger.keyLocks); one that still
// conflicts with another transaction on the key reads it again and applies f again, up to
// conflictRetries times.
func updateJSON[T any](l *Ledger, key string, f func(v *T) error) (T, error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	lock := &l.keyLocks[h.Sum32()%uint32(len(l.keyLocks))]
	lock.Lock()
	defer lock.Unlock()
	var v T
	var err error
	for range conflictRetries {
		v = *new(T)
		err = l.db.Update(func(txn *badger.Txn) error {
			if err := getJSON(txn, key, &v); err != nil {
				return err
			}
			if err := f(&v); err != nil {
				return err
			}
			return putJSON(txn, key, v)
		})
		if !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	return v, err
}

// conflictRetries is how often a read-modify-write that lost a conflict is tried again.
const conflictRetries = 10

// createJSON stores v at key unless something is there already; it reports whether it
// stored it.
func (l *Ledger) createJSON(key string, v any) (bool, error) {
	created := false
	err := l.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get([]byte(key)); err == nil {
			return nil
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		created = true
		return putJSON(txn, key, v)
	})
	return created, err
}

// getRaw returns the bytes stored at key, or ErrNotFound.
func (l *Ledger) getRaw(key string) ([]byte, error) {
	var out []byte
	err := l.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		out, err = item.ValueCopy(nil)
		return err
	})
	return out, err
}

func putJSON(txn *badger.Txn, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return txn.Set([]byte(key), b)
}

func getJSON(txn *badger.Txn, key string, v any) error {
	item, err := txn.Get([]byte(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return item.Value(func(b []byte) error {
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("ledger: %s: %w", key, err)
		}
		return nil
	})
}

const keyOwnAttestation = "provider/attestation"

// SetOwnAttestation stores the provider's latest benchmark attestation.
func (l *Ledger) SetOwnAttestation(raw []byte) error {
	return l.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(keyOwnAttestation), raw) })
}

// OwnAttestation returns the provider's latest benchmark attestation, or ErrNotFound.
func (l *Ledger) OwnAttestation() ([]byte, error) { return l.getRaw(keyOwnAttestation) }

const prefixLink = "coordinator/link/"

// LinkMeasurement is a coordinator's own latest measurement of a provider's link (the
// figures of the last network receipt it signed for it).
type LinkMeasurement struct {
	Provider   string    `json:"provider"`
	MeasuredAt time.Time `json:"measured_at"`
	RTTMilli   float64   `json:"rtt_ms"`
	UpMbps     float64   `json:"up_mbps"`
	DownMbps   float64   `json:"down_mbps"`
	Bytes      int64     `json:"bytes"`
}

// SetLinkMeasurement keeps a provider's latest link measurement.
func (l *Ledger) SetLinkMeasurement(m LinkMeasurement) error {
	return l.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixLink+m.Provider, m) })
}

// LinkMeasurement returns a provider's latest link measurement, or ErrNotFound.
func (l *Ledger) LinkMeasurement(provider string) (LinkMeasurement, error) {
	var m LinkMeasurement
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixLink+provider, &m) })
	return m, err
}

const prefixReliability = "coordinator/reliability/"

// ReliabilityState is what a coordinator keeps per provider to score it.
type ReliabilityState struct {
	Provider    string               `json:"provider"`
	Reliability protocol.Reliability `json:"reliability"`
	// FirstPerf is each GPU's first accepted performance score: later attestations are
	// compared with it.
	FirstPerf     map[string]int `json:"first_perf"`
	LastAttestSeq uint64         `json:"last_attestation_seq"`
	// Events are the latest outcomes that lowered a component, newest last.
	Events []string `json:"events"`
	// EventsTotal counts every event ever added (Events keeps the latest few).
	EventsTotal int `json:"events_total,omitempty"`
	// LastScore is the score of the record last published (-1 before the first), at
	// LastPublished.
	LastScore     int       `json:"last_score"`
	LastPublished time.Time `json:"last_published,omitzero"`
}

// maxReliabilityEvents is how many events a reliability state keeps.
const maxReliabilityEvents = 10

// AddEvent records an outcome that lowered a component, keeping the latest few.
func (s *ReliabilityState) AddEvent(e string) {
	s.EventsTotal++
	s.Events = append(s.Events, e)
	if len(s.Events) > maxReliabilityEvents {
		s.Events = s.Events[len(s.Events)-maxReliabilityEvents:]
	}
}

// UpdateReliability changes a provider's reliability state atomically, creating it empty.
func (l *Ledger) UpdateReliability(provider string, f func(s *ReliabilityState) error) (ReliabilityState, error) {
	key := prefixReliability + provider
	var st ReliabilityState
	err := l.db.Update(func(txn *badger.Txn) error {
		if err := getJSON(txn, key, &st); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if st.Provider == "" {
			st = ReliabilityState{Provider: provider, FirstPerf: map[string]int{}, LastScore: -1}
		}
		if err := f(&st); err != nil {
			return err
		}
		return putJSON(txn, key, st)
	})
	return st, err
}

const keyMaintenance = "provider/maintenance"

// Maintenance is a provider's planned maintenance: one window, or a recurring rule.
type Maintenance struct {
	ID   string    `json:"id"`
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	Rule string    `json:"rule,omitempty"` // e.g. "first sunday 02:00 2h Europe/Paris"
	Note string    `json:"note,omitempty"`
}

// MaintenanceList returns the provider's planned maintenance.
func (l *Ledger) MaintenanceList() ([]Maintenance, error) {
	var out []Maintenance
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, keyMaintenance, &out) })
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return out, err
}

// SetMaintenance replaces the provider's planned maintenance.
func (l *Ledger) SetMaintenance(ms []Maintenance) error {
	return l.db.Update(func(txn *badger.Txn) error { return putJSON(txn, keyMaintenance, ms) })
}

const keyAvailability = "provider/availability"

// Availability is the weekly availability a provider set while running (`gpunex
// availability set|import`). It replaces [provider.availability] of the config until it is
// reset.
type Availability struct {
	Timezone string   `json:"timezone"`
	Windows  []string `json:"windows,omitempty"` // none: 24/7
	// Source is the iCalendar file or URL it was imported from, Follow how often the node
	// reads a URL source again (0: never).
	Source string        `json:"source,omitempty"`
	Follow time.Duration `json:"follow,omitempty"`
	SetAt  time.Time     `json:"set_at"`
	// Checked is when the node last read Source, Error why that read failed ("" if it did
	// not): the schedule then stays as it was.
	Checked time.Time `json:"checked,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// Availability returns the availability set while running, or nil if none is.
func (l *Ledger) Availability() (*Availability, error) {
	var a Availability
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, keyAvailability, &a) })
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// SetAvailability records the availability set while running; nil goes back to the config's.
func (l *Ledger) SetAvailability(a *Availability) error {
	return l.db.Update(func(txn *badger.Txn) error {
		if a == nil {
			return txn.Delete([]byte(keyAvailability))
		}
		return putJSON(txn, keyAvailability, a)
	})
}

const prefixModels = "models/"

// KeptModelCatalogues is the most model catalogues a node keeps per coordinator; it keeps
// fewer when older ones can no longer be named by a valid attestation (models.needed).
const KeptModelCatalogues = 64

// SaveModelCatalogue stores a coordinator's model catalogue of a sequence, and forgets
// that coordinator's catalogues older than the KeptModelCatalogues newest.
func (l *Ledger) SaveModelCatalogue(coordinator string, seq uint64, raw []byte) error {
	prefix := prefixModels + coordinator + "/"
	return l.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set([]byte(fmt.Sprintf("%s%020d", prefix, seq)), raw); err != nil {
			return err
		}
		var keys []string
		if err := scan(txn, prefix, func(key string, _ []byte) error { keys = append(keys, key); return nil }); err != nil {
			return err
		}
		for len(keys) > KeptModelCatalogues { // keys sort by sequence: the oldest first
			if err := txn.Delete([]byte(prefix + keys[0])); err != nil {
				return err
			}
			keys = keys[1:]
		}
		return nil
	})
}

// ModelCatalogues returns every stored model catalogue.
func (l *Ledger) ModelCatalogues() ([][]byte, error) {
	var out [][]byte
	err := l.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixModels, func(_ string, val []byte) error {
			out = append(out, append([]byte(nil), val...))
			return nil
		})
	})
	return out, err
}

const prefixAlert = "alerts/"

// AlertFiring says whether an alert of the node's operator is firing (told, not yet
// resolved).
func (l *Ledger) AlertFiring(key string) (bool, error) {
	var firing bool
	err := l.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixAlert+key, &firing) })
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return firing, err
}

// SetAlertFiring records whether an alert is firing; it returns the state before.
func (l *Ledger) SetAlertFiring(key string, firing bool) (bool, error) {
	var was bool
	err := l.db.Update(func(txn *badger.Txn) error {
		if err := getJSON(txn, prefixAlert+key, &was); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return putJSON(txn, prefixAlert+key, firing)
	})
	return was, err
}
