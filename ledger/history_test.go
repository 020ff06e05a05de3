package ledger

import (
	"encoding/json"
	"sync"
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
		if err := l.History.AddHistory(HistoryScores, day.Add(time.Duration(i)*24*time.Hour), map[string]int{"score": score}, 30*24*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	hour := day.Add(50 * time.Hour)
	for range 3 {
		if err := l.History.CountHistory(HistoryProbes, hour, 7*24*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	l.History.CountHistory(HistoryProbes, hour.Add(time.Hour), 7*24*time.Hour)
	l.Close()

	l = openTemp(t, dir)
	defer l.Close()
	pts, err := l.History.History(HistoryScores, day.Add(time.Hour))
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
	if at, ok, err := l.History.HistoryStart(HistoryProbes); err != nil || !ok || !at.Equal(hour) {
		t.Fatalf("the first probe: %v %v %v", at, ok, err)
	}
	if _, ok, _ := l.History.HistoryStart(HistoryBench); ok {
		t.Fatal("an empty series has a start")
	}
	probes, _ := l.History.History(HistoryProbes, time.Time{})
	if len(probes) != 2 || string(probes[0].Value) != "3" || string(probes[1].Value) != "1" || !probes[0].At.Equal(hour) {
		t.Fatalf("probes per hour: %+v", probes)
	}
	// A point 31 days later drops the ones past the 30 days a series keeps.
	l.History.AddHistory(HistoryScores, day.Add(31*24*time.Hour+time.Hour), map[string]int{"score": 90}, 30*24*time.Hour)
	if pts, _ := l.History.History(HistoryScores, time.Time{}); len(pts) != 2 {
		t.Fatalf("after 31 days: %d points, want the 2 of the last 30 days", len(pts))
	}
	// Series do not mix.
	if b, _ := l.History.History(HistoryBench, time.Time{}); len(b) != 0 {
		t.Fatalf("bench series holds %d points", len(b))
	}
}

// Probes answered at once are all counted; a point dated outside what a UnixNano holds
// drops nothing; a series holds at most MaxHistoryPoints, the newest.
func TestHistoryLimits(t *testing.T) {
	l := openTemp(t, t.TempDir())
	defer l.Close()
	quarter := time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := l.History.CountHistory(HistoryProbes, quarter, 35*24*time.Hour); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if pts, _ := l.History.History(HistoryProbes, time.Time{}); len(pts) != 1 || string(pts[0].Value) != "200" {
		t.Fatalf("200 probes counted at once: %+v", pts)
	}

	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l.History.AddHistory(HistoryScores, day, 80, 180*24*time.Hour)
	l.History.AddHistory(HistoryScores, time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), 1, 180*24*time.Hour)
	if pts, _ := l.History.History(HistoryScores, day); len(pts) != 1 || string(pts[0].Value) != "80" {
		t.Fatalf("after a point dated year 1000: %+v", pts)
	}

	defer func(n int) { MaxHistoryPoints = n }(MaxHistoryPoints)
	MaxHistoryPoints = 10
	for i := range 25 {
		l.History.AddHistory(HistoryBench, day.Add(time.Duration(i)*time.Minute), i, 180*24*time.Hour)
	}
	pts, _ := l.History.History(HistoryBench, time.Time{})
	if len(pts) != 10 || string(pts[0].Value) != "15" || string(pts[9].Value) != "24" {
		t.Fatalf("25 points in a series that keeps 10: %d, from %s to %s", len(pts), pts[0].Value, pts[len(pts)-1].Value)
	}
	// Replacing the newest point of a full series drops none of the others.
	l.History.AddHistory(HistoryBench, day.Add(24*time.Minute), 99, 180*24*time.Hour)
	if pts, _ := l.History.History(HistoryBench, time.Time{}); len(pts) != 10 || string(pts[0].Value) != "15" || string(pts[9].Value) != "99" {
		t.Fatalf("after replacing the newest of 10 points: %d, from %s to %s", len(pts), pts[0].Value, pts[len(pts)-1].Value)
	}
}
