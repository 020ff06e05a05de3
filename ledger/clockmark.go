package ledger

import (
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// keyClockMark keeps the latest time this node's clock has shown, so that a node whose
// clock moved back (restarted with another clock, or stepped by NTP) can tell by at least
// how much (jobs.Renter.CheckClock).
const keyClockMark = "renter/clock-mark"

// MarkClock keeps now as the latest time this node's clock has shown.
func (s *JobStore) MarkClock(now time.Time) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, keyClockMark, now.UTC()) })
}

// ClockMark returns the latest time this node's clock has shown, zero when none is kept.
func (s *JobStore) ClockMark() (time.Time, error) {
	var t time.Time
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, keyClockMark, &t) })
	if errors.Is(err, ErrNotFound) {
		return time.Time{}, nil
	}
	return t, err
}

// ShiftObserved moves back by d what this node observed of the running jobs it rents (when
// it saw each start, when it last saw each running), and the clock mark with them, in one
// transaction: the clock moved back by d, and those times were read on the clock before.
// It returns how many jobs it moved.
func (s *JobStore) ShiftObserved(d time.Duration) (int, error) {
	moved := 0
	err := s.db.Update(func(txn *badger.Txn) error {
		moved = 0
		js, err := scanTxn(txn, prefixJob, func(j Job) bool {
			return j.Side == "renter" && j.State == JobRunning && !j.ObservedStart.IsZero()
		})
		if err != nil {
			return err
		}
		for _, j := range js {
			j.ObservedStart = j.ObservedStart.Add(-d)
			if !j.LastSeenRunning.IsZero() {
				j.LastSeenRunning = j.LastSeenRunning.Add(-d)
			}
			if err := putJSON(txn, prefixJob+j.ID, j); err != nil {
				return err
			}
			moved++
		}
		var mark time.Time
		if err := getJSON(txn, keyClockMark, &mark); err == nil {
			return putJSON(txn, keyClockMark, mark.Add(-d))
		}
		return nil
	})
	return moved, err
}
