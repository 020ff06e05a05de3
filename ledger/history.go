package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A provider's own history, drawn as charts on its dashboard: the scores it was given, the
// benchmarks it ran, the uptime probes it answered by quarter of an hour. Each series is
// keyed by time, so that reading from a date and dropping what is older than the series
// keeps are scans in key order; adding a point drops the expired ones (and the oldest past
// MaxHistoryPoints), so a series never grows past its retention.

// HistoryStore keeps a provider's own history (history/<series>/).
type HistoryStore struct{ *kv }

const prefixHistory = "history/"

// The series a provider keeps.
const (
	HistoryScores = "scores" // the score records it was given (protocol.ScoreRecord)
	HistoryBench  = "bench"  // a summary of each benchmark run (api.BenchPoint)
	HistoryProbes = "probes" // uptime probes answered, counted per quarter of an hour (an integer)
)

// HistoryPoint is one point of a series.
type HistoryPoint struct {
	At    time.Time       `json:"at"`
	Value json.RawMessage `json:"value"`
}

// historyKey orders a series' points by time: the hexadecimal of a UnixNano has a fixed
// width, so key order is time order. Times outside what UnixNano holds (1678 to 2262) are
// clamped to its ends.
func historyKey(series string, at time.Time) string {
	ns := uint64(0)
	switch {
	case at.Before(time.Unix(0, 0)):
	case at.After(time.Unix(0, math.MaxInt64)):
		ns = math.MaxInt64
	default:
		ns = uint64(at.UnixNano())
	}
	return fmt.Sprintf("%s%s/%016x", prefixHistory, series, ns)
}

// MaxHistoryPoints is the most points a series keeps: past it the oldest go, whatever
// their age, so that no sender of records can make a series grow without bound. (Tests
// lower it.)
var MaxHistoryPoints = 5000

// AddHistory stores a point of a series at a time (replacing one at the same time) and
// drops the points older than keep before it, and the oldest past MaxHistoryPoints.
func (s *HistoryStore) AddHistory(series string, at time.Time, v any, keep time.Duration) error {
	return s.updateSeries(series, func(txn *badger.Txn) error {
		if err := dropHistory(txn, series, at.Add(-keep), historyKey(series, at)); err != nil {
			return err
		}
		return putJSON(txn, historyKey(series, at), v)
	})
}

// CountHistory adds one to the count of a series at a time (the start of a quarter of an
// hour, say) and drops the points older than keep before it.
func (s *HistoryStore) CountHistory(series string, at time.Time, keep time.Duration) error {
	return s.updateSeries(series, func(txn *badger.Txn) error {
		key := historyKey(series, at)
		if err := dropHistory(txn, series, at.Add(-keep), key); err != nil {
			return err
		}
		n := 0
		item, err := txn.Get([]byte(key))
		switch {
		case err == nil:
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &n) }); err != nil {
				return fmt.Errorf("ledger: history %s: %w", key, err)
			}
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		return txn.Set([]byte(key), []byte(strconv.Itoa(n+1)))
	})
}

// updateSeries runs f in a transaction; writes to one series take turns (keyLocks), and
// one that still conflicts with another transaction is tried again.
func (s *HistoryStore) updateSeries(series string, f func(txn *badger.Txn) error) error {
	h := fnv.New32a()
	h.Write([]byte(prefixHistory + series))
	lock := &s.keyLocks[h.Sum32()%uint32(len(s.keyLocks))]
	lock.Lock()
	defer lock.Unlock()
	return s.update(f)
}

// dropHistory deletes a series' points before a time, and the oldest of those left while
// they and the point about to be written at key would be more than MaxHistoryPoints.
func dropHistory(txn *badger.Txn, series string, before time.Time, key string) error {
	prefix := prefixHistory + series + "/"
	end := historyKey(series, before)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
	var keys [][]byte
	room := 1 // the point written after, unless it replaces one
	for it.Rewind(); it.Valid(); it.Next() {
		if k := it.Item().KeyCopy(nil); string(k) == key {
			room = 0
		} else {
			keys = append(keys, k)
		}
	}
	it.Close()
	drop := 0
	for drop < len(keys) && string(keys[drop]) < end {
		drop++
	}
	drop = min(max(drop, len(keys)+room-max(MaxHistoryPoints, 1)), len(keys))
	for _, k := range keys[:drop] {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// History returns a series' points from a time on, oldest first.
func (s *HistoryStore) History(series string, since time.Time) ([]HistoryPoint, error) {
	out := []HistoryPoint{}
	prefix := prefixHistory + series + "/"
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Seek([]byte(historyKey(series, since))); it.Valid(); it.Next() {
			item := it.Item()
			ns, err := strconv.ParseUint(string(item.Key()[len(prefix):]), 16, 64)
			if err != nil {
				return fmt.Errorf("ledger: history key %q: %w", item.Key(), err)
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			out = append(out, HistoryPoint{At: time.Unix(0, int64(ns)).UTC(), Value: v})
		}
		return nil
	})
	return out, err
}

// HistoryStart returns the time of a series' oldest point, or ok false when it has none.
func (s *HistoryStore) HistoryStart(series string) (at time.Time, ok bool, err error) {
	prefix := prefixHistory + series + "/"
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
		defer it.Close()
		it.Rewind()
		if !it.Valid() {
			return nil
		}
		ns, err := strconv.ParseUint(string(it.Item().Key()[len(prefix):]), 16, 64)
		if err != nil {
			return fmt.Errorf("ledger: history key %q: %w", it.Item().Key(), err)
		}
		at, ok = time.Unix(0, int64(ns)).UTC(), true
		return nil
	})
	return at, ok, err
}
