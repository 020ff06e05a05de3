package ledger

import (
	"encoding/json"
	"testing"
	"time"
)

// A provider's charts read what it kept: points in time order from a date on, counts per
// hour, nothing older than the series keeps, and all of it after a restart.
func TestHistory(t *testing.T) {
	dir := t.TempDir()
	l := openTemp(t, dir)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i, score := range []int{80, 82, 79} {
		if err := l.AddHistory(HistoryScores, day.Add(time.Duration(i)*24*time.Hour), map[string]int{"score": score}, 30*24*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	hour := day.Add(50 * time.Hour)
	for range 3 {
		if err := l.CountHistory(HistoryProbes, hour, 7*24*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	l.CountHistory(HistoryProbes, hour.Add(time.Hour), 7*24*time.Hour)
	l.Close()

	l = openTemp(t, dir)
	defer l.Close()
	pts, err := l.History(HistoryScores, day.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, p := range pts {
		var v map[string]int
		json.Unmarshal(p.Value, &v)
		got = append(got, v["score"])
	}
	if len(pts) != 2 || got[0] != 82 || got[1] != 79 || !pts[0].At.Equal(day.Add(24*time.Hour)) {
		t.Fatalf("scores from the second day: %v at %v", got, pts)
	}
	probes, _ := l.History(HistoryProbes, time.Time{})
	if len(probes) != 2 || string(probes[0].Value) != "3" || string(probes[1].Value) != "1" || !probes[0].At.Equal(hour) {
		t.Fatalf("probes per hour: %+v", probes)
	}
	// A point 31 days later drops the ones past the 30 days a series keeps.
	l.AddHistory(HistoryScores, day.Add(31*24*time.Hour+time.Hour), map[string]int{"score": 90}, 30*24*time.Hour)
	if pts, _ := l.History(HistoryScores, time.Time{}); len(pts) != 2 {
		t.Fatalf("after 31 days: %d points, want the 2 of the last 30 days", len(pts))
	}
	// Series do not mix.
	if b, _ := l.History(HistoryBench, time.Time{}); len(b) != 0 {
		t.Fatalf("bench series holds %d points", len(b))
	}
}
