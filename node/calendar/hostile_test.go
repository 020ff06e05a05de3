package calendar

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A followed calendar is anyone's text, read again every few minutes: what reading it costs
// must not grow faster than its size, and its size is bounded (the security review of
// 2026-12-05, finding 9).

// TestFoldedCalendarCostsLinear (the review's TestSecRevFoldedCalendarCPU): 1 MiB of folded
// continuation lines is read with a handful of allocations, the parts of a line joined once,
// not a copy of the growing line at each continuation (about 50 s of CPU for one read).
func TestFoldedCalendarCostsLinear(t *testing.T) {
	data := append([]byte("BEGIN:VCALENDAR\r\nX"), bytes.Repeat([]byte("\n a"), (maxCalendarBytes-32)/3)...)
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	if allocs := testing.AllocsPerRun(1, func() { Weekly(data, now) }); allocs > 1000 {
		t.Fatalf("reading %d folded lines took %.0f allocations", bytes.Count(data, []byte("\n")), allocs)
	}
}

// TestCalendarLineLimit: a calendar of more lines than a provider's hours need is refused,
// saying so.
func TestCalendarLineLimit(t *testing.T) {
	data := append([]byte("BEGIN:VCALENDAR\r\n"), bytes.Repeat([]byte("X:\n"), maxCalendarLines+1)...)
	if _, err := Weekly(data, time.Now()); err == nil || !strings.Contains(err.Error(), "lines") {
		t.Fatalf("a calendar of %d lines: %v", maxCalendarLines+1, err)
	}
}

// TestCalendarStepsShared: the occurrences walked through to reach now are bounded for the
// whole calendar, not per event: 20 hourly series started 20 years ago are refused (each
// alone is read; together they took 1.4 s a read, 500 of them 35 s).
func TestCalendarStepsShared(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var events []string
	for range 20 {
		events = append(events, "DTSTART:20050201T000000Z\nDURATION:PT1H\nRRULE:FREQ=HOURLY")
	}
	if _, err := Occurrences(ics(events[0]), now, now.Add(24*time.Hour)); err != nil {
		t.Fatalf("one hourly series from 2005: %v", err)
	}
	if _, err := Occurrences(ics(events...), now, now.Add(24*time.Hour)); err == nil || !strings.Contains(err.Error(), "start the series later") {
		t.Fatalf("Occurrences of 20 hourly series from 2005: %v", err)
	}
	if _, err := Weekly(ics(events...), now); err == nil || !strings.Contains(err.Error(), "start the series later") {
		t.Fatalf("Weekly of 20 hourly series from 2005: %v", err)
	}
}

// TestFollowNeedsHTTPS: a calendar is followed over https only: over plain http anyone on
// the way could set the provider's hours (close them to withdraw its offer, open them while
// nobody watches). A server on the host itself may use http; a file is not followed.
func TestFollowNeedsHTTPS(t *testing.T) {
	for src, ok := range map[string]bool{
		"https://calendar.example.org/hours.ics": true,
		"http://127.0.0.1:8080/hours.ics":        true,
		"http://[::1]:8080/hours.ics":            true,
		"http://localhost/hours.ics":             true,
		"http://calendar.example.org/hours.ics":  false,
		"http://127.0.0.1.example.org/hours.ics": false,
		"http://10.0.0.7/hours.ics":              false,
		"https:///hours.ics":                     false,
		"/etc/hours.ics":                         false,
	} {
		err := CheckFollow(src)
		if ok != (err == nil) {
			t.Errorf("%s: %v", src, err)
		}
		if err != nil && strings.HasPrefix(src, "http://") && !strings.Contains(err.Error(), "https://") {
			t.Errorf("%s: the refusal does not say what to use: %v", src, err)
		}
	}
}
