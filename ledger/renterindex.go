package ledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Per-renter indexes of holds and deposits, newest first, so that a renter's balance
// reads its own records only, never the whole ledger: keys are
// <prefix><renter>/<time, 20 digits of Unix nanoseconds>/<hold job or deposit signature>.

const (
	prefixRenterHold    = "money/renter-hold/"
	prefixRenterDeposit = "money/renter-deposit/"
	keyRenterIndexV1    = "meta/renter-index-v1"
	// MaxOpenHolds is how many holds one renter may have open at once (held, pending a
	// receipt's dispute window, or disputed): past it, a hold request is refused until
	// some settle. It bounds what one funded renter can make a coordinator store.
	MaxOpenHolds = 1000
)

func renterIndexKey(prefix, renter string, at time.Time, id string) string {
	return fmt.Sprintf("%s%s/%020d/%s", prefix, renter, at.UnixNano(), id)
}

// buildRenterIndex writes the renter indexes of a ledger made before they existed, once.
func (s *EscrowStore) buildRenterIndex() error {
	return s.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get([]byte(keyRenterIndexV1)); err == nil {
			return nil
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		holds, err := scanTxn[Hold](txn, prefixHold, nil)
		if err != nil {
			return err
		}
		deps, err := scanTxn[Deposit](txn, prefixDeposit, nil)
		if err != nil {
			return err
		}
		open := map[string]int{}
		for _, h := range holds {
			if err := txn.Set([]byte(renterIndexKey(prefixRenterHold, h.Renter, h.IssuedAt, h.Job)), nil); err != nil {
				return err
			}
			if openHold(h.State) {
				open[h.Renter]++
			}
		}
		for r, n := range open {
			a, err := getAccount(txn, r)
			if err != nil {
				return err
			}
			a.OpenHolds = n
			if err := putJSON(txn, prefixAccount+r, a); err != nil {
				return err
			}
		}
		for _, d := range deps {
			if err := txn.Set([]byte(renterIndexKey(prefixRenterDeposit, d.Renter, d.CreditedAt, d.Signature)), nil); err != nil {
				return err
			}
		}
		return txn.Set([]byte(keyRenterIndexV1), []byte("1"))
	})
}

// openHold says whether a hold state still holds the renter's money for a job.
func openHold(state string) bool {
	return state == HoldHeld || state == HoldPending || state == HoldDisputed
}

// newestOf reads the records a renter index points to, newest first, at most limit.
func newestOf[T any](k *kv, index, renter, prefix string, limit int) ([]T, error) {
	var out []T
	err := k.db.View(func(txn *badger.Txn) error {
		p := []byte(index + renter + "/")
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p, Reverse: true})
		defer it.Close()
		seek := append(append([]byte{}, p...), 0xff)
		for it.Seek(seek); it.ValidForPrefix(p) && len(out) < limit; it.Next() {
			key := string(it.Item().Key())
			id := key[len(p)+21:]
			var v T
			if err := getJSON(txn, prefix+id, &v); err != nil {
				return fmt.Errorf("ledger: index %s: %w", key, err)
			}
			out = append(out, v)
		}
		return nil
	})
	return out, err
}
