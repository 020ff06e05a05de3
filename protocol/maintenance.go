package protocol

import (
	"fmt"
	"strings"
	"time"
)

// Maintenance windows: planned times a provider announces in its offer, when it owes no
// uptime. Recurring rules are expanded by the provider into the windows of the coming
// MaintenanceHorizon.

const (
	// MaxMaintenanceWindows caps the windows an offer carries.
	MaxMaintenanceWindows = 16
	// MaxMaintenanceLength caps one window.
	MaxMaintenanceLength = 7 * 24 * time.Hour
	// MaintenanceHorizon is how far ahead recurring rules are expanded.
	MaintenanceHorizon = 62 * 24 * time.Hour
)

// MaintenanceWindow is one planned maintenance period.
type MaintenanceWindow struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Note string    `json:"note,omitempty"`
}

func (w MaintenanceWindow) validate() error {
	switch {
	case w.From.IsZero() || !w.To.After(w.From):
		return fmt.Errorf("maintenance window: to must be after from")
	case w.To.Sub(w.From) > MaxMaintenanceLength:
		return fmt.Errorf("maintenance window of %s, at most %s", w.To.Sub(w.From), MaxMaintenanceLength)
	case len(w.Note) > 200:
		return fmt.Errorf("maintenance note too long")
	}
	return nil
}

// InMaintenance reports whether t falls in one of the windows (from inclusive, to
// exclusive).
func InMaintenance(ws []MaintenanceWindow, t time.Time) bool {
	for _, w := range ws {
		if !t.Before(w.From) && t.Before(w.To) {
			return true
		}
	}
	return false
}

// MaintenanceRule is a recurring window: the nth weekday of each month ("first sunday",
// "last friday"), at a local time, for a duration, in a time zone.
type MaintenanceRule struct {
	Nth      int          // 1-4, or -1 for the last
	Weekday  time.Weekday //
	At       string       // "02:00"
	Duration time.Duration
	Location *time.Location
	Note     string
}

// ParseMaintenanceRule reads "first sunday 02:00 2h Europe/Paris" (nth: first, second,
// third, fourth, last; the zone defaults to UTC).
func ParseMaintenanceRule(s, note string) (MaintenanceRule, error) {
	f := strings.Fields(strings.ToLower(s))
	bad := func(why string) (MaintenanceRule, error) {
		return MaintenanceRule{}, fmt.Errorf("maintenance rule %q: %s (expected e.g. \"first sunday 02:00 2h Europe/Paris\")", s, why)
	}
	if len(f) < 4 || len(f) > 5 {
		return bad("four or five words")
	}
	r := MaintenanceRule{Note: note, Location: time.UTC}
	nth := map[string]int{"first": 1, "second": 2, "third": 3, "fourth": 4, "last": -1}
	var ok bool
	if r.Nth, ok = nth[f[0]]; !ok {
		return bad("first, second, third, fourth or last")
	}
	day := -1
	for d := time.Sunday; d <= time.Saturday; d++ {
		if strings.HasPrefix(strings.ToLower(d.String()), f[1]) && len(f[1]) >= 3 {
			day = int(d)
		}
	}
	if day < 0 {
		return bad("unknown day " + f[1])
	}
	r.Weekday = time.Weekday(day)
	if _, err := time.Parse("15:04", f[2]); err != nil {
		return bad("time of day HH:MM")
	}
	r.At = f[2]
	d, err := time.ParseDuration(f[3])
	if err != nil || d <= 0 || d > MaxMaintenanceLength {
		return bad("a duration such as 2h, at most a week")
	}
	r.Duration = d
	if len(f) == 5 {
		zone := strings.Fields(s)[4] // zone names are case-sensitive
		if r.Location, err = time.LoadLocation(zone); err != nil || zone == "Local" {
			return bad("unknown time zone " + zone)
		}
	}
	return r, nil
}

// Windows expands the rule into the windows that end after from and start before to.
func (r MaintenanceRule) Windows(from, to time.Time) []MaintenanceWindow {
	var out []MaintenanceWindow
	at, _ := time.Parse("15:04", r.At)
	local := from.In(r.Location)
	month := time.Date(local.Year(), local.Month(), 1, 0, 0, 0, 0, r.Location).AddDate(0, -1, 0)
	for ; month.Before(to); month = month.AddDate(0, 1, 0) {
		var day time.Time
		if r.Nth > 0 {
			first := month
			offset := (int(r.Weekday) - int(first.Weekday()) + 7) % 7
			day = first.AddDate(0, 0, offset+7*(r.Nth-1))
		} else {
			last := month.AddDate(0, 1, -1)
			offset := (int(last.Weekday()) - int(r.Weekday) + 7) % 7
			day = last.AddDate(0, 0, -offset)
		}
		start := time.Date(day.Year(), day.Month(), day.Day(), at.Hour(), at.Minute(), 0, 0, r.Location)
		w := MaintenanceWindow{From: start.UTC(), To: start.Add(r.Duration).UTC(), Note: r.Note}
		if w.To.After(from) && w.From.Before(to) {
			out = append(out, w)
		}
	}
	return out
}
