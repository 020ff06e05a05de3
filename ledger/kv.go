package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// The badger database every store shares, and the helpers they read and write it with:
// JSON values by key, scans by prefix, read-modify-writes that take turns per key and try
// again on a conflict, and sequence counters. Every store holds the same *kv, so that a
// change whose keys belong to several stores (a charge writes the hold, the account and
// the earning) is still one transaction.

// kv is the node's one badger database.
type kv struct {
	db *badger.DB
	// keyLocks serialise read-modify-writes of one key in this process (updateJSON), by
	// the key's hash: badger's transactions are optimistic, and many writers of one key
	// would otherwise mostly conflict.
	keyLocks [64]sync.Mutex
	// money serialises the transactions that move a renter's funds (updateMoney): each
	// reads and writes the renter's account, and two at once would conflict.
	money sync.Mutex
}

// update runs f in a read-write transaction, and again, up to conflictRetries times, while
// it loses a conflict with another transaction (badger's transactions are optimistic: a
// transaction that read a key another one wrote meanwhile fails to commit, and nothing of
// it is written). f may therefore run more than once: what it gives back to its caller it
// must set from scratch each time.
func (k *kv) update(f func(txn *badger.Txn) error) error {
	var err error
	for range conflictRetries {
		if err = k.db.Update(f); !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	return err
}

// updateMoney is update for the transactions that move funds between a renter's account,
// holds and earnings: they take turns, so that a deposit credited while a receipt is
// charged never fails on the account both change.
func (k *kv) updateMoney(f func(txn *badger.Txn) error) error {
	k.money.Lock()
	defer k.money.Unlock()
	return k.update(f)
}

// scan calls f for each key under prefix, with the prefix stripped.
func scan(txn *badger.Txn, prefix string, f func(key string, val []byte) error) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		key := strings.TrimPrefix(string(item.Key()), prefix)
		if err := item.Value(func(v []byte) error { return f(key, v) }); err != nil {
			return err
		}
	}
	return nil
}

// scanAll decodes every value under a prefix, keeping those keep accepts (nil keeps all).
func scanAll[T any](k *kv, prefix string, keep func(T) bool) (out []T, err error) {
	err = k.db.View(func(txn *badger.Txn) error {
		out, err = scanTxn(txn, prefix, keep)
		return err
	})
	return out, err
}

// scanTxn is scanAll within a transaction.
func scanTxn[T any](txn *badger.Txn, prefix string, keep func(T) bool) ([]T, error) {
	var out []T
	err := scan(txn, prefix, func(key string, val []byte) error {
		var v T
		if err := json.Unmarshal(val, &v); err != nil {
			return fmt.Errorf("ledger: %s: %w", key, err)
		}
		if keep == nil || keep(v) {
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// updateJSON reads the JSON value at key into a T, lets f change it, and writes it back,
// in one transaction; it returns the value as stored.
//
// Updates of one key through updateJSON take turns (kv.keyLocks); one that still
// conflicts with another transaction on the key reads it again and applies f again, up to
// conflictRetries times.
func updateJSON[T any](k *kv, key string, f func(v *T) error) (T, error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	lock := &k.keyLocks[h.Sum32()%uint32(len(k.keyLocks))]
	lock.Lock()
	defer lock.Unlock()
	var v T
	err := k.update(func(txn *badger.Txn) error {
		v = *new(T)
		if err := getJSON(txn, key, &v); err != nil {
			return err
		}
		if err := f(&v); err != nil {
			return err
		}
		return putJSON(txn, key, v)
	})
	return v, err
}

// conflictRetries is how often a read-modify-write that lost a conflict is tried again.
const conflictRetries = 10

// createJSON stores v at key unless something is there already; it reports whether it
// stored it.
func (k *kv) createJSON(key string, v any) (bool, error) {
	created := false
	err := k.db.Update(func(txn *badger.Txn) error {
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
func (k *kv) getRaw(key string) ([]byte, error) {
	var out []byte
	err := k.db.View(func(txn *badger.Txn) error {
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

// nextSeq reserves the next number of the counter at key, as NextOfferSeq describes.
func (k *kv) nextSeq(key string, now time.Time) (next uint64, err error) {
	// Many callers at once (a coordinator signing scores from its probe workers) conflict:
	// the loser tries again (update).
	err = k.update(func(txn *badger.Txn) error {
		var last uint64
		item, err := txn.Get([]byte(key))
		switch {
		case err == nil:
			if err := item.Value(func(v []byte) error {
				if len(v) != 8 {
					return fmt.Errorf("ledger: sequence %s: corrupt value", key)
				}
				last = binary.BigEndian.Uint64(v)
				return nil
			}); err != nil {
				return err
			}
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		next = last + 1
		if ms := now.UnixMilli(); ms > 0 && uint64(ms) > next {
			next = uint64(ms)
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], next)
		return txn.Set([]byte(key), b[:])
	})
	return next, err
}
