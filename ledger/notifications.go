package ledger

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// NotificationStore keeps the notices told to the node's operator (notification/): those
// coordinators sent, and the node's own.
type NotificationStore struct{ *kv }

const prefixNotification = "notification/"

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
func (s *NotificationStore) AddNotification(n Notification) (bool, error) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n.Seq)
	return s.createJSON(fmt.Sprintf("%s%s/%x", prefixNotification, n.From, b), n)
}

// Notifications returns every stored notification, oldest first.
func (s *NotificationStore) Notifications() ([]Notification, error) {
	var out []Notification
	err := s.db.View(func(txn *badger.Txn) error {
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
