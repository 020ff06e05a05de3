package ledger

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// The network each application in the coordinator's queue came from (an IPv4 address, an
// IPv6 /48), kept beside the application so that its JSON stays as it is: the coordinator
// caps the open applications of one network, across its restarts. And the pruning of
// applications whose retention has passed.

const prefixApplicationNetwork = "coordinator/application-network/"

// PutApplicationFrom stores a new application and the network it came from ("" for none:
// loopback, or no connection), in one transaction; it fails if the ID is taken.
func (l *Ledger) PutApplicationFrom(a Application, network string) error {
	return l.db.Update(func(txn *badger.Txn) error {
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
func (l *Ledger) ApplicationNetworks() (map[string]string, error) {
	out := map[string]string{}
	err := l.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixApplicationNetwork, func(id string, val []byte) error {
			out[id] = string(val)
			return nil
		})
	})
	return out, err
}

// DeleteApplications removes applications from the queue, with their networks.
func (l *Ledger) DeleteApplications(ids []string) error {
	wb := l.db.NewWriteBatch()
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
