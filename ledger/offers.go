package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
)

// OfferStore keeps what a node learnt of others' offers: the latest offer seen from each
// provider (seen/offer/) and the revocations known (revocation/).
type OfferStore struct{ *kv }

const prefixSeenOff = "seen/offer/"

// SeenOffer is the latest offer record a node accepted from one provider.
type SeenOffer struct {
	Provider  peer.ID   `json:"-"`
	Seq       uint64    `json:"seq"`
	ExpiresAt time.Time `json:"expires_at"`
	Raw       []byte    `json:"raw"`
}

// SaveSeenOffers stores offers accepted from others, in one transaction. An offer is kept
// only if its sequence is at least the stored one for its provider.
func (s *OfferStore) SaveSeenOffers(offers []SeenOffer) error {
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	// Read the stored sequences first: a WriteBatch cannot read.
	keep := offers[:0:0]
	err := s.db.View(func(txn *badger.Txn) error {
		for _, o := range offers {
			old, err := getSeen(txn, o.Provider)
			if err == nil && old.Seq > o.Seq {
				continue
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			keep = append(keep, o)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, o := range keep {
		val, err := json.Marshal(o)
		if err != nil {
			return err
		}
		if err := wb.Set([]byte(prefixSeenOff+o.Provider.String()), val); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// SeenOffers returns every stored offer whose expiry is after now.
func (s *OfferStore) SeenOffers(now time.Time) ([]SeenOffer, error) {
	var out []SeenOffer
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixSeenOff, func(key string, val []byte) error {
			o, err := decodeSeen(key, val)
			if err != nil {
				return err
			}
			if o.ExpiresAt.After(now) {
				out = append(out, o)
			}
			return nil
		})
	})
	return out, err
}

// HighestOfferSeq returns the highest offer sequence stored for a provider (0 if none).
func (s *OfferStore) HighestOfferSeq(p peer.ID) (uint64, error) {
	var seq uint64
	err := s.db.View(func(txn *badger.Txn) error {
		o, err := getSeen(txn, p)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		seq = o.Seq
		return err
	})
	return seq, err
}

// PruneSeenOffers deletes stored offers that expired before now and returns how many.
func (s *OfferStore) PruneSeenOffers(now time.Time) (int, error) {
	var dead [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixSeenOff, func(key string, val []byte) error {
			o, err := decodeSeen(key, val)
			if err != nil || !o.ExpiresAt.After(now) {
				dead = append(dead, []byte(prefixSeenOff+key))
			}
			return nil
		})
	})
	if err != nil || len(dead) == 0 {
		return 0, err
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range dead {
		if err := wb.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(dead), wb.Flush()
}

func getSeen(txn *badger.Txn, p peer.ID) (SeenOffer, error) {
	item, err := txn.Get([]byte(prefixSeenOff + p.String()))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return SeenOffer{}, ErrNotFound
	}
	if err != nil {
		return SeenOffer{}, err
	}
	var o SeenOffer
	err = item.Value(func(v []byte) error {
		var derr error
		o, derr = decodeSeen(p.String(), v)
		return derr
	})
	return o, err
}

func decodeSeen(key string, val []byte) (SeenOffer, error) {
	var o SeenOffer
	if err := json.Unmarshal(val, &o); err != nil {
		return o, fmt.Errorf("ledger: seen offer %s: %w", key, err)
	}
	p, err := peer.Decode(key)
	if err != nil {
		return o, fmt.Errorf("ledger: seen offer key %q: %w", key, err)
	}
	o.Provider = p
	return o, nil
}

const prefixRevocation = "revocation/"

// SaveRevocation stores a revocation record for a provider, keyed by coordinator and
// provider; a later revocation replaces an earlier one.
func (s *OfferStore) SaveRevocation(coordinator, provider string, raw []byte) error {
	return s.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(prefixRevocation+coordinator+"/"+provider), raw)
	})
}

// Revocations returns every stored revocation record.
func (s *OfferStore) Revocations() ([][]byte, error) {
	var out [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixRevocation, func(_ string, val []byte) error {
			out = append(out, append([]byte(nil), val...))
			return nil
		})
	})
	return out, err
}
