package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A provider's own history, drawn as charts on its dashboard: the scores it was given, the
// benchmarks it ran, the uptime probes it answered hour by hour. Each series is keyed by
// time, so that reading from a date and dropping what is older than the series keeps are
// scans in key order; adding a point drops the expired ones, so a series never grows past
// its retention.

const prefixHistory = "history/"

// The series a provider keeps.
const (
	HistoryScores = "scores" // the score records it was given (protocol.ScoreRecord)
	HistoryBench  = "bench"  // a summary of each benchmark run (api.BenchPoint)
	HistoryProbes = "probes" // uptime probes answered, counted per hour (an integer)
)

// HistoryPoint is one point of a series.
type HistoryPoint struct {
	At    time.Time       `json:"at"`
	Value json.RawMessage `json:"value"`
}

// historyKey orders a series' points by time: the hexadecimal of a positive UnixNano has
// a fixed width, so key order is time order.
func historyKey(series string, at time.Time) string {
	return fmt.Sprintf("%s%s/%016x", prefixHistory, series, uint64(max(at.UnixNano(), 0)))
}

// AddHistory stores a point of a series at a time (replacing one at the same time) and
// drops the points older than keep before it.
func (l *Ledger) AddHistory(series string, at time.Time, v any, keep time.Duration) error {
	return l.db.Update(func(txn *badger.Txn) error {
		if err := dropHistory(txn, series, at.Add(-keep)); err != nil {
			return err
		}
		return putJSON(txn, historyKey(series, at), v)
	})
}

// CountHistory adds one to the count of a series at a time (the start of an hour, say)
// and drops the points older than keep before it.
func (l *Ledger) CountHistory(series string, at time.Time, keep time.Duration) error {
	return l.db.Update(func(txn *badger.Txn) error {
		if err := dropHistory(txn, series, at.Add(-keep)); err != nil {
			return err
		}
		key := historyKey(series, at)
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

// dropHistory deletes a series' points before a time.
func dropHistory(txn *badger.Txn, series string, before time.Time) error {
	prefix := prefixHistory + series + "/"
	end := historyKey(series, before)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
	var old [][]byte
	for it.Rewind(); it.Valid() && string(it.Item().Key()) < end; it.Next() {
		old = append(old, it.Item().KeyCopy(nil))
	}
	it.Close()
	for _, k := range old {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// History returns a series' points from a time on, oldest first.
func (l *Ledger) History(series string, since time.Time) ([]HistoryPoint, error) {
	out := []HistoryPoint{}
	prefix := prefixHistory + series + "/"
	err := l.db.View(func(txn *badger.Txn) error {
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
