package protocol

import (
	"testing"
	"time"
)

// TestMaintenanceRule: "2 hours on the first Sunday of each month", across a DST change.
func TestMaintenanceRule(t *testing.T) {
	r, err := ParseMaintenanceRule("first sunday 02:00 2h Europe/Paris", "monthly")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC)
	ws := r.Windows(from, from.Add(MaintenanceHorizon))
	want := []string{"2026-03-01T01:00:00Z", "2026-04-05T00:00:00Z"} // CET, then CEST
	if len(ws) != len(want) {
		t.Fatalf("windows: %+v", ws)
	}
	for i, w := range ws {
		if w.From.Format(time.RFC3339) != want[i] || w.To.Sub(w.From) != 2*time.Hour {
			t.Errorf("window %d: %s-%s; want from %s", i, w.From, w.To, want[i])
		}
	}
	if !InMaintenance(ws, ws[0].From) || InMaintenance(ws, ws[0].To) || InMaintenance(ws, from) {
		t.Fatal("InMaintenance bounds")
	}
	last, _ := ParseMaintenanceRule("last fri 22:00 4h", "")
	if w := last.Windows(from, from.Add(20*24*time.Hour)); len(w) != 1 || w[0].From.Format(time.RFC3339) != "2026-02-27T22:00:00Z" {
		t.Fatalf("last friday: %+v", w)
	}
	for _, bad := range []string{"first sunday 25:00 2h", "fifth sunday 02:00 2h", "first funday 02:00 2h", "first sunday 02:00 9d", "first sunday 02:00 2h Mars/Olympus"} {
		if _, err := ParseMaintenanceRule(bad, ""); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
