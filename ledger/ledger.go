// Package ledger is the node's durable book, kept in badger v4: what a provider sells and at
// which sequence it last announced it, and the offers a node has seen from others. Every
// accessor is typed; no caller sees badger.
package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// Options configure Open.
type Options struct {
	// Dir is the data directory. Ignored when InMemory is set.
	Dir string
	// InMemory keeps everything in memory (tests).
	InMemory bool
	// Small shrinks badger's tables and drops its caches: for a scale harness that runs a
	// thousand nodes in one process, each with a few megabytes of records. With InMemory,
	// a value may then be 144 KiB at most (an offer is at most 128 KiB).
	Small  bool
	Logger *slog.Logger
}

// Ledger is the node's durable book. It is safe for concurrent use.
type Ledger struct {
	db  *badger.DB
	log *slog.Logger
	// keyLocks serialise read-modify-writes of one key in this process (updateJSON), by
	// the key's hash: badger's transactions are optimistic, and many writers of one key
	// would otherwise mostly conflict.
	keyLocks [64]sync.Mutex
}

// ErrNotFound is returned when a record is absent.
var ErrNotFound = errors.New("not found")

// Open opens (or creates) the ledger with options sized for a small daemon.
func Open(o Options) (*Ledger, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	bo := badger.DefaultOptions(o.Dir).
		WithInMemory(o.InMemory).
		WithSyncWrites(!o.InMemory).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithValueLogFileSize(64 << 20).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(8 << 20).
		WithNumCompactors(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(1 << 20).
		WithValueThreshold(1 << 10).
		WithMetricsEnabled(false).
		WithLogger(badgerLogger{log})
	if o.InMemory {
		// Without a value log every value stays in the LSM tree.
		bo.Dir, bo.ValueDir = "", ""
		bo = bo.WithValueThreshold(1 << 20)
	}
	if o.Small {
		// A batch (15% of a memtable) must hold the largest value.
		bo = bo.WithMemTableSize(1 << 20).WithNumMemtables(1).WithBlockCacheSize(0).WithIndexCacheSize(0).
			WithBaseTableSize(512 << 10).WithValueThreshold(min(bo.ValueThreshold, 144<<10)).
			WithCompression(options.None) // without a block cache, blocks are not compressed
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("open ledger in %s: %w", o.Dir, err)
	}
	l := &Ledger{db: db, log: log}
	if err := l.buildRenterIndex(); err != nil {
		db.Close()
		return nil, fmt.Errorf("index renters' holds and deposits: %w", err)
	}
	return l, nil
}

// Close flushes and closes the ledger.
func (l *Ledger) Close() error { return l.db.Close() }

const (
	keyOfferSeq   = "provider/offer-seq"
	prefixPrice   = "provider/price/"
	prefixSeenOff = "seen/offer/"
)

// SetPrice records the provider's price for a GPU model.
func (l *Ledger) SetPrice(model string, price protocol.MicroUSDC) error {
	if price <= 0 {
		return fmt.Errorf("price must be positive, got %s USDC", price)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(price))
	return l.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(prefixPrice+protocol.NormalizeModel(model)), b[:])
	})
}

// Prices returns every price the provider has set, by normalised model.
func (l *Ledger) Prices() (map[string]protocol.MicroUSDC, error) {
	out := map[string]protocol.MicroUSDC{}
	err := l.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixPrice, func(key string, val []byte) error {
			if len(val) != 8 {
				return fmt.Errorf("ledger: price %s: corrupt value", key)
			}
			out[key] = protocol.MicroUSDC(binary.BigEndian.Uint64(val))
			return nil
		})
	})
	return out, err
}

// NextOfferSeq reserves the next offer sequence number, durably, before it is used: a
// crash can skip numbers but never hands out the same one twice. Sequences follow the
// clock (milliseconds) where they can, so a node whose ledger was lost still moves forward.
func (l *Ledger) NextOfferSeq(now time.Time) (uint64, error) {
	return l.nextSeq(keyOfferSeq, now)
}

func (l *Ledger) nextSeq(key string, now time.Time) (next uint64, err error) {
	// Many callers at once (a coordinator signing scores from its probe workers) conflict:
	// the loser tries again.
	for range conflictRetries {
		if next, err = l.nextSeqOnce(key, now); !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	return next, err
}

func (l *Ledger) nextSeqOnce(key string, now time.Time) (uint64, error) {
	var next uint64
	err := l.db.Update(func(txn *badger.Txn) error {
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

// SeenOffer is the latest offer record a node accepted from one provider.
type SeenOffer struct {
	Provider  peer.ID   `json:"-"`
	Seq       uint64    `json:"seq"`
	ExpiresAt time.Time `json:"expires_at"`
	Raw       []byte    `json:"raw"`
}

// SaveSeenOffers stores offers accepted from others, in one transaction. An offer is kept
// only if its sequence is at least the stored one for its provider.
func (l *Ledger) SaveSeenOffers(offers []SeenOffer) error {
	wb := l.db.NewWriteBatch()
	defer wb.Cancel()
	// Read the stored sequences first: a WriteBatch cannot read.
	keep := offers[:0:0]
	err := l.db.View(func(txn *badger.Txn) error {
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
func (l *Ledger) SeenOffers(now time.Time) ([]SeenOffer, error) {
	var out []SeenOffer
	err := l.db.View(func(txn *badger.Txn) error {
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
func (l *Ledger) HighestOfferSeq(p peer.ID) (uint64, error) {
	var seq uint64
	err := l.db.View(func(txn *badger.Txn) error {
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
func (l *Ledger) PruneSeenOffers(now time.Time) (int, error) {
	var dead [][]byte
	err := l.db.View(func(txn *badger.Txn) error {
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
	wb := l.db.NewWriteBatch()
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

// badgerLogger routes badger's messages to slog; its info chatter goes to debug.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)), "subsystem", "badger")
}
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)), "subsystem", "badger")
}
func (b badgerLogger) Infof(f string, a ...any) {
	b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)), "subsystem", "badger")
}
func (b badgerLogger) Debugf(f string, a ...any) {
	b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)), "subsystem", "badger")
}
