package ledger

import (
	"errors"

	"github.com/dgraph-io/badger/v4"
)

// AlertStore keeps whether each alert of the node's operator is firing (alerts/).
type AlertStore struct{ *kv }

const prefixAlert = "alerts/"

// AlertFiring says whether an alert of the node's operator is firing (told, not yet
// resolved).
func (s *AlertStore) AlertFiring(key string) (bool, error) {
	var firing bool
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixAlert+key, &firing) })
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return firing, err
}

// SetAlertFiring records whether an alert is firing; it returns the state before.
func (s *AlertStore) SetAlertFiring(key string, firing bool) (bool, error) {
	var was bool
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := getJSON(txn, prefixAlert+key, &was); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return putJSON(txn, prefixAlert+key, firing)
	})
	return was, err
}
