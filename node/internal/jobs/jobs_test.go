package jobs

import (
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
)

// TestViewJobCountsToNow: a running job's seconds are counted to the time given.
func TestViewJobCountsToNow(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := viewJob(ledger.Job{ID: "00000000000000aa", State: ledger.JobRunning, StartedAt: start}, start.Add(90*time.Second))
	if v.Seconds != 90 {
		t.Fatalf("seconds: %d", v.Seconds)
	}
}
