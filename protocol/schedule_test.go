package protocol

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tests must not depend on the host's zoneinfo
)

func mustSchedule(t *testing.T, tz string, windows ...string) Schedule {
	t.Helper()
	s, err := ParseSchedule(tz, windows)
	if err != nil {
		t.Fatalf("ParseSchedule(%q, %q): %v", tz, windows, err)
	}
	return s
}

// at parses an RFC 3339 instant ("2026-03-29T01:00:00Z").
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return v
}

func TestParseScheduleValid(t *testing.T) {
	cases := []struct {
		tz      string
		windows []string
		wantTZ  string
		want    []string // normalised windows
		str     string
		always  bool
	}{
		{"", nil, "UTC", nil, "24/7", true},
		{"UTC", []string{}, "UTC", nil, "24/7", true},
		{"utc", []string{"24/7"}, "UTC", nil, "24/7", true},
		{"Europe/Paris", []string{" 24/7 "}, "Europe/Paris", nil, "24/7", true},
		{" Europe/Paris ", []string{"mon-fri 08:00-20:00", "sat 10:00-14:00"}, "Europe/Paris",
			[]string{"mon-fri 08:00-20:00", "sat 10:00-14:00"}, "mon-fri 08:00-20:00, sat 10:00-14:00 (Europe/Paris)", false},
		{"", []string{"MON-Fri 8:00-20:00"}, "UTC", []string{"mon-fri 08:00-20:00"}, "mon-fri 08:00-20:00 (UTC)", false},
		{"", []string{"  mon\t09:30-17:45  "}, "UTC", []string{"mon 09:30-17:45"}, "mon 09:30-17:45 (UTC)", false},
		{"", []string{"fri-mon 22:00-06:00"}, "UTC", []string{"fri-mon 22:00-06:00"}, "fri-mon 22:00-06:00 (UTC)", false},
		{"", []string{"sat,sun 00:00-24:00"}, "UTC", []string{"sat,sun 00:00-24:00"}, "sat,sun 00:00-24:00 (UTC)", false},
		{"", []string{"sun-sat 10:00-11:00"}, "UTC", []string{"daily 10:00-11:00"}, "daily 10:00-11:00 (UTC)", false},
		{"", []string{"mon-wed,fri 09:00-17:00"}, "UTC", []string{"mon-wed,fri 09:00-17:00"}, "", false},
		{"", []string{"mon,tue,wed,thu,fri 09:00-17:00"}, "UTC", []string{"mon-fri 09:00-17:00"}, "", false},
		{"", []string{"fri,wed,mon,mon 09:00-17:00"}, "UTC", []string{"mon,wed,fri 09:00-17:00"}, "", false},
		{"", []string{"wed,sun,mon 09:00-17:00"}, "UTC", []string{"sun,mon,wed 09:00-17:00"}, "", false},
		{"", []string{"wed,fri-mon 09:00-17:00"}, "UTC", []string{"fri-mon,wed 09:00-17:00"}, "", false},
		{"", []string{"tue,fri-mon 09:00-17:00"}, "UTC", []string{"fri-tue 09:00-17:00"}, "", false},
		{"", []string{"thu-tue 09:00-17:00"}, "UTC", []string{"thu-tue 09:00-17:00"}, "", false},
		{"", []string{"mon-mon 09:00-17:00"}, "UTC", []string{"mon 09:00-17:00"}, "", false},
		{"", []string{"* 22:00-00:00"}, "UTC", []string{"daily 22:00-24:00"}, "", false},
		{"", []string{"DAILY 00:00-23:59"}, "UTC", []string{"daily 00:00-23:59"}, "", false},
		{"", []string{"mon,daily 01:00-02:00"}, "UTC", []string{"daily 01:00-02:00"}, "", false},
		// Overlapping windows are kept as written; they union when evaluated.
		{"", []string{"mon 08:00-12:00", "mon 10:00-14:00"}, "UTC", []string{"mon 08:00-12:00", "mon 10:00-14:00"}, "", false},
		// Windows covering the whole week make the schedule always open.
		{"Europe/Paris", []string{"daily 00:00-24:00"}, "Europe/Paris", []string{"daily 00:00-24:00"}, "daily 00:00-24:00 (Europe/Paris)", true},
		{"", []string{"daily 20:00-08:00", "daily 08:00-20:00"}, "UTC", []string{"daily 20:00-08:00", "daily 08:00-20:00"}, "", true},
		{"", []string{"mon-fri 00:00-24:00", "fri 23:00-00:00", "sat-sun 00:00-24:00"}, "UTC", nil, "", true},
		{"", []string{"daily 00:00-23:59"}, "UTC", nil, "", false},
		{"", []string{"mon-sat 00:00-24:00"}, "UTC", nil, "", false},
	}
	for _, c := range cases {
		s, err := ParseSchedule(c.tz, c.windows)
		if err != nil {
			t.Errorf("ParseSchedule(%q, %q): %v", c.tz, c.windows, err)
			continue
		}
		if s.Timezone() != c.wantTZ {
			t.Errorf("ParseSchedule(%q, %q).Timezone() = %q; want %q", c.tz, c.windows, s.Timezone(), c.wantTZ)
		}
		if c.want != nil || len(c.windows) == 0 || c.windows[0] == "24/7" {
			if got := s.Windows(); !slices.Equal(got, c.want) {
				t.Errorf("ParseSchedule(%q, %q).Windows() = %q; want %q", c.tz, c.windows, got, c.want)
			}
		}
		if c.str != "" && s.String() != c.str {
			t.Errorf("ParseSchedule(%q, %q).String() = %q; want %q", c.tz, c.windows, s.String(), c.str)
		}
		if s.IsAlwaysOpen() != c.always {
			t.Errorf("ParseSchedule(%q, %q).IsAlwaysOpen() = %v; want %v", c.tz, c.windows, s.IsAlwaysOpen(), c.always)
		}
		// The normalised form parses back to the same schedule.
		back, err := ParseSchedule(s.Timezone(), s.Windows())
		if err != nil || back.String() != s.String() || back.Timezone() != s.Timezone() || !slices.Equal(back.Windows(), s.Windows()) {
			t.Errorf("round trip of %v = %v, %v", s, back, err)
		}
	}
}

func TestScheduleZeroAndAlwaysOpen(t *testing.T) {
	for _, s := range []Schedule{{}, AlwaysOpen(), mustSchedule(t, "Asia/Tokyo")} {
		if !s.IsAlwaysOpen() || s.String() != "24/7" || s.Windows() != nil {
			t.Errorf("%#v: IsAlwaysOpen %v, String %q, Windows %q", s, s.IsAlwaysOpen(), s.String(), s.Windows())
		}
		for _, ts := range []string{"2026-03-29T01:00:00Z", "0001-01-01T00:00:00Z", "2026-10-25T00:59:59.5Z"} {
			if !s.Open(at(t, ts)) {
				t.Errorf("%v.Open(%s) = false", s, ts)
			}
			if next, ok := s.NextChange(at(t, ts)); ok {
				t.Errorf("%v.NextChange(%s) = %v, true; want ok=false", s, ts, next)
			}
		}
	}
	if tz := AlwaysOpen().Timezone(); tz != "UTC" {
		t.Errorf("AlwaysOpen().Timezone() = %q", tz)
	}
	s := mustSchedule(t, "", "mon 08:00-09:00")
	w := s.Windows()
	w[0] = "tampered"
	if s.Windows()[0] != "mon 08:00-09:00" {
		t.Errorf("Windows() shares its slice with the schedule")
	}
}

func TestParseScheduleErrors(t *testing.T) {
	tooMany := make([]string, MaxScheduleWindows+1)
	for i := range tooMany {
		tooMany[i] = "mon 08:00-09:00"
	}
	cases := []struct {
		tz      string
		windows []string
		want    string // the message, or its beginning
	}{
		{"Mars/Olympus", nil, `timezone "Mars/Olympus": unknown time zone; expected an IANA name such as "Europe/Paris" or "UTC"`},
		{"../../etc/passwd", nil, `timezone "../../etc/passwd": unknown time zone`},
		{"Local", nil, `timezone "Local": name an IANA time zone such as "Europe/Paris" or "UTC"; the machine's local zone is not portable`},
		{"", []string{""}, `window "": expected "DAYS HH:MM-HH:MM", e.g. "mon-fri 08:00-20:00"`},
		{"", []string{"   "}, `window "   ": expected "DAYS HH:MM-HH:MM"`},
		{"", []string{"mon"}, `window "mon": expected "DAYS HH:MM-HH:MM"`},
		{"", []string{"08:00-10:00"}, `window "08:00-10:00": expected "DAYS HH:MM-HH:MM"`},
		{"", []string{"mon 08:00-10:00 extra"}, `window "mon 08:00-10:00 extra": expected "DAYS HH:MM-HH:MM"`},
		{"", []string{"mon 08:00 - 10:00"}, `window "mon 08:00 - 10:00": expected "DAYS HH:MM-HH:MM"`},
		{"", []string{"xyz 08:00-10:00"}, `window "xyz 08:00-10:00": unknown day "xyz"; expected mon, tue, wed, thu, fri, sat, sun, a range such as "mon-fri", or "daily"`},
		{"", []string{"monday 08:00-10:00"}, `window "monday 08:00-10:00": unknown day "monday"`},
		{"", []string{"mon-fry 08:00-10:00"}, `window "mon-fry 08:00-10:00": unknown day "fry"`},
		{"", []string{"mon- 08:00-10:00"}, `window "mon- 08:00-10:00": bad day range "mon-"; expected two days such as "mon-fri"`},
		{"", []string{"-fri 08:00-10:00"}, `window "-fri 08:00-10:00": bad day range "-fri"`},
		{"", []string{"mon-tue-wed 08:00-10:00"}, `window "mon-tue-wed 08:00-10:00": bad day range "mon-tue-wed"`},
		{"", []string{"mon,,tue 08:00-10:00"}, `window "mon,,tue 08:00-10:00": empty day in "mon,,tue"`},
		{"", []string{"mon, 08:00-10:00"}, `window "mon, 08:00-10:00": empty day in "mon,"`},
		{"", []string{"mon 08:00"}, `window "mon 08:00": expected a time range HH:MM-HH:MM, e.g. "08:00-20:00"`},
		{"", []string{"mon 08:00-"}, `window "mon 08:00-": time "" must be HH:MM, e.g. "08:00"`},
		{"", []string{"mon 8-10"}, `window "mon 8-10": time "8" must be HH:MM`},
		{"", []string{"mon 08:0-10:00"}, `window "mon 08:0-10:00": time "08:0" must be HH:MM`},
		{"", []string{"mon 08:00:00-10:00"}, `window "mon 08:00:00-10:00": time "08:00:00" must be HH:MM`},
		{"", []string{"mon 008:00-10:00"}, `window "mon 008:00-10:00": time "008:00" must be HH:MM`},
		{"", []string{"mon +8:00-10:00"}, `window "mon +8:00-10:00": time "+8:00" must be HH:MM`},
		{"", []string{"mon 08:00-1a:00"}, `window "mon 08:00-1a:00": time "1a:00" must be HH:MM`},
		{"", []string{"mon 25:00-26:00"}, `window "mon 25:00-26:00": hour must be 00-24`},
		{"", []string{"mon 08:00-99:00"}, `window "mon 08:00-99:00": hour must be 00-24`},
		{"", []string{"mon 08:60-09:00"}, `window "mon 08:60-09:00": minute must be 00-59`},
		{"", []string{"mon 08:00-24:30"}, `window "mon 08:00-24:30": time "24:30" is past 24:00, the end of the day`},
		{"", []string{"mon 24:00-02:00"}, `window "mon 24:00-02:00": start must be before 24:00`},
		{"", []string{"mon 08:00-08:00"}, `window "mon 08:00-08:00": start and end are equal; a window needs a length (use "24/7" to be always open)`},
		{"", []string{"daily 00:00-00:00"}, `window "daily 00:00-00:00": start and end are equal`},
		{"", []string{"mon 08:00-09:00", "24/7"}, `window "24/7": "24/7" must be the only window`},
		{"", []string{"24/7", "24/7"}, `window "24/7": "24/7" must be the only window`},
		// The first bad window is named even when others are fine.
		{"", []string{"mon 08:00-09:00", "tue 09:00-9:00x"}, `window "tue 09:00-9:00x": time "9:00x" must be HH:MM`},
		{"", tooMany, `schedule has 33 windows; at most 32 are allowed`},
	}
	for _, c := range cases {
		s, err := ParseSchedule(c.tz, c.windows)
		if err == nil {
			t.Errorf("ParseSchedule(%q, %q) = %v; want error %q", c.tz, c.windows, s, c.want)
			continue
		}
		if !errors.Is(err, ErrBadSchedule) {
			t.Errorf("ParseSchedule(%q, %q) error %v does not wrap ErrBadSchedule", c.tz, c.windows, err)
		}
		if !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("ParseSchedule(%q, %q) error = %q; want %q", c.tz, c.windows, err, c.want)
		}
	}
}

type openCase struct {
	at   string // RFC 3339 instant
	want bool
}

func TestScheduleOpen(t *testing.T) {
	// 2026-06-01 is a Monday; 2026-03-29 and 2026-10-25 are the Paris DST Sundays, 2026-03-08
	// and 2026-11-01 the New York ones.
	cases := []struct {
		name    string
		tz      string
		windows []string
		checks  []openCase
	}{
		{"weekdays UTC", "UTC", []string{"mon-fri 08:00-20:00"}, []openCase{
			{"2026-06-01T07:59:59.999999999Z", false},
			{"2026-06-01T08:00:00Z", true}, // start inclusive
			{"2026-06-01T19:59:59.999999999Z", true},
			{"2026-06-01T20:00:00Z", false}, // end exclusive
			{"2026-06-05T19:00:00Z", true},  // Friday
			{"2026-06-06T10:00:00Z", false}, // Saturday
			{"2026-06-07T10:00:00Z", false}, // Sunday
			{"2026-06-08T08:00:00Z", true},
		}},
		{"weekdays Paris summer (UTC+2)", "Europe/Paris", []string{"mon-fri 08:00-20:00"}, []openCase{
			{"2026-06-01T05:59:59Z", false},
			{"2026-06-01T06:00:00Z", true},
			{"2026-06-01T08:00:00+02:00", true}, // t's own zone does not matter
			{"2026-06-01T15:00:00+09:00", true},
			{"2026-06-01T17:59:59Z", true},
			{"2026-06-01T18:00:00Z", false},
			{"2026-05-31T23:00:00Z", false}, // Monday 01:00 in Paris, Sunday in UTC
		}},
		{"weekdays Paris winter (UTC+1)", "Europe/Paris", []string{"mon-fri 08:00-20:00"}, []openCase{
			{"2026-01-05T06:59:59Z", false},
			{"2026-01-05T07:00:00Z", true},
			{"2026-01-09T18:59:59Z", true},
			{"2026-01-09T19:00:00Z", false},
		}},
		{"overnight crossing midnight", "UTC", []string{"fri 22:00-06:00"}, []openCase{
			{"2026-06-05T21:59:59Z", false},
			{"2026-06-05T22:00:00Z", true},
			{"2026-06-05T23:59:59Z", true},
			{"2026-06-06T00:00:00Z", true}, // Saturday, carried over from Friday
			{"2026-06-06T05:59:59Z", true},
			{"2026-06-06T06:00:00Z", false},
			{"2026-06-06T23:00:00Z", false}, // the day list names the start day only
			{"2026-06-04T23:00:00Z", false},
			{"2026-06-05T03:00:00Z", false}, // Friday morning: Thursday has no window
		}},
		{"overnight crossing the week boundary", "UTC", []string{"sun 22:00-02:00"}, []openCase{
			{"2026-06-07T21:59:59Z", false},
			{"2026-06-07T22:00:00Z", true},
			{"2026-06-08T01:59:59Z", true}, // Monday of the next week
			{"2026-06-08T02:00:00Z", false},
			{"2026-06-01T01:00:00Z", true}, // from Sunday 2026-05-31
			{"2026-06-06T23:00:00Z", false},
		}},
		{"wrapping day range", "UTC", []string{"fri-mon 09:00-17:00"}, []openCase{
			{"2026-06-05T10:00:00Z", true},
			{"2026-06-06T10:00:00Z", true},
			{"2026-06-07T10:00:00Z", true},
			{"2026-06-08T10:00:00Z", true},
			{"2026-06-09T10:00:00Z", false},
			{"2026-06-10T10:00:00Z", false},
			{"2026-06-11T10:00:00Z", false},
		}},
		{"end 24:00", "UTC", []string{"mon 20:00-24:00"}, []openCase{
			{"2026-06-01T19:59:59Z", false},
			{"2026-06-01T20:00:00Z", true},
			{"2026-06-01T23:59:59.999999999Z", true},
			{"2026-06-02T00:00:00Z", false},
		}},
		{"end 00:00 is end 24:00", "UTC", []string{"mon 20:00-00:00"}, []openCase{
			{"2026-06-01T23:59:59Z", true},
			{"2026-06-02T00:00:00Z", false},
			{"2026-06-01T19:00:00Z", false},
		}},
		{"whole weekend days", "UTC", []string{"sat,sun 00:00-24:00"}, []openCase{
			{"2026-06-05T23:59:59Z", false},
			{"2026-06-06T00:00:00Z", true},
			{"2026-06-07T12:00:00Z", true},
			{"2026-06-07T23:59:59Z", true},
			{"2026-06-08T00:00:00Z", false},
		}},
		{"union of overlapping and touching windows", "UTC", []string{"mon 08:00-12:00", "mon 10:00-14:00", "mon 14:00-16:00", "mon 09:00-10:00"}, []openCase{
			{"2026-06-01T07:59:59Z", false},
			{"2026-06-01T08:00:00Z", true},
			{"2026-06-01T11:00:00Z", true},
			{"2026-06-01T12:00:00Z", true},
			{"2026-06-01T13:59:59Z", true},
			{"2026-06-01T14:00:00Z", true},
			{"2026-06-01T15:59:59Z", true},
			{"2026-06-01T16:00:00Z", false},
			{"2026-06-02T09:00:00Z", false},
		}},
		// Paris springs forward on 2026-03-29 at 01:00 UTC: 02:00 CET becomes 03:00 CEST.
		{"Paris spring forward, window touching the gap", "Europe/Paris", []string{"sun 02:30-04:00"}, []openCase{
			{"2026-03-29T00:59:59Z", false}, // 01:59:59 CET
			{"2026-03-29T01:00:00Z", true},  // 03:00 CEST, first instant after the gap
			{"2026-03-29T01:59:59Z", true},
			{"2026-03-29T02:00:00Z", false}, // 04:00 CEST: only one hour open in real time
			// The Sunday before, in winter time, the full 90 minutes.
			{"2026-03-22T01:29:59Z", false},
			{"2026-03-22T01:30:00Z", true},
			{"2026-03-22T02:59:59Z", true},
			{"2026-03-22T03:00:00Z", false},
		}},
		{"Paris spring forward, window inside the gap never opens", "Europe/Paris", []string{"sun 02:00-02:30"}, []openCase{
			{"2026-03-29T00:59:59Z", false},
			{"2026-03-29T01:00:00Z", false},
			{"2026-03-29T01:30:00Z", false},
			{"2026-03-22T01:00:00Z", true},
			{"2026-03-22T01:29:59Z", true},
			{"2026-03-22T01:30:00Z", false},
			{"2026-04-05T00:00:00Z", true}, // 02:00 CEST the Sunday after
		}},
		{"Paris spring forward, window ending in the gap", "Europe/Paris", []string{"sun 01:00-02:30"}, []openCase{
			{"2026-03-28T23:59:59Z", false},
			{"2026-03-29T00:00:00Z", true}, // 01:00 CET
			{"2026-03-29T00:59:59Z", true},
			{"2026-03-29T01:00:00Z", false}, // 03:00 CEST: the end at 02:30 took effect here
		}},
		{"Paris spring forward, overnight window one hour shorter", "Europe/Paris", []string{"sat 22:00-06:00"}, []openCase{
			{"2026-03-28T20:59:59Z", false},
			{"2026-03-28T21:00:00Z", true}, // 22:00 CET
			{"2026-03-29T01:00:00Z", true},
			{"2026-03-29T03:59:59Z", true},
			{"2026-03-29T04:00:00Z", false}, // 06:00 CEST: 7 hours
		}},
		{"Paris spring forward, whole Sunday is 23 hours", "Europe/Paris", []string{"sun 00:00-24:00"}, []openCase{
			{"2026-03-28T22:59:59Z", false},
			{"2026-03-28T23:00:00Z", true},
			{"2026-03-29T21:59:59Z", true},
			{"2026-03-29T22:00:00Z", false},
		}},
		// Paris falls back on 2026-10-25 at 01:00 UTC: 03:00 CEST becomes 02:00 CET.
		{"Paris fall back, window starting in the repeated hour", "Europe/Paris", []string{"sun 02:30-04:00"}, []openCase{
			{"2026-10-25T00:29:59Z", false},
			{"2026-10-25T00:30:00Z", true}, // first 02:30 (CEST)
			{"2026-10-25T01:00:00Z", true}, // 02:00 CET: the repeated hour does not close it
			{"2026-10-25T01:10:00Z", true},
			{"2026-10-25T02:59:59Z", true},
			{"2026-10-25T03:00:00Z", false}, // 04:00 CET: 2.5 hours open
		}},
		{"Paris fall back, window ending in the repeated hour", "Europe/Paris", []string{"sun 01:00-02:30"}, []openCase{
			{"2026-10-24T22:59:59Z", false},
			{"2026-10-24T23:00:00Z", true},  // 01:00 CEST
			{"2026-10-25T00:29:59Z", true},  // 02:29:59 CEST
			{"2026-10-25T00:30:00Z", false}, // first 02:30
			{"2026-10-25T01:10:00Z", false}, // 02:10 CET, second pass: stays closed
			{"2026-10-25T01:30:00Z", false},
		}},
		{"Paris fall back, overnight window one hour longer", "Europe/Paris", []string{"sat 22:00-06:00"}, []openCase{
			{"2026-10-24T19:59:59Z", false},
			{"2026-10-24T20:00:00Z", true}, // 22:00 CEST
			{"2026-10-25T04:59:59Z", true},
			{"2026-10-25T05:00:00Z", false}, // 06:00 CET: 9 hours
		}},
		// New York springs forward on 2026-03-08 at 07:00 UTC (02:00 EST -> 03:00 EDT) and falls
		// back on 2026-11-01 at 06:00 UTC (02:00 EDT -> 01:00 EST).
		{"New York spring forward, window touching the gap", "America/New_York", []string{"sun 02:30-04:00"}, []openCase{
			{"2026-03-08T06:59:59Z", false},
			{"2026-03-08T07:00:00Z", true}, // 03:00 EDT
			{"2026-03-08T07:59:59Z", true},
			{"2026-03-08T08:00:00Z", false}, // 04:00 EDT
			{"2026-03-01T07:30:00Z", true},  // 02:30 EST a week before
			{"2026-03-01T07:29:59Z", false},
		}},
		{"New York spring forward, overnight window", "America/New_York", []string{"sat 22:00-06:00"}, []openCase{
			{"2026-03-08T02:59:59Z", false},
			{"2026-03-08T03:00:00Z", true}, // 22:00 EST Saturday
			{"2026-03-08T09:59:59Z", true},
			{"2026-03-08T10:00:00Z", false}, // 06:00 EDT: 7 hours
		}},
		{"New York fall back, window in the repeated hour", "America/New_York", []string{"sun 01:30-03:00"}, []openCase{
			{"2026-11-01T05:29:59Z", false},
			{"2026-11-01T05:30:00Z", true}, // first 01:30 (EDT)
			{"2026-11-01T06:10:00Z", true}, // 01:10 EST, second pass
			{"2026-11-01T07:59:59Z", true},
			{"2026-11-01T08:00:00Z", false}, // 03:00 EST
		}},
		{"New York fall back, overnight window", "America/New_York", []string{"sat 22:00-06:00"}, []openCase{
			{"2026-11-01T01:59:59Z", false},
			{"2026-11-01T02:00:00Z", true}, // 22:00 EDT Saturday
			{"2026-11-01T10:59:59Z", true},
			{"2026-11-01T11:00:00Z", false}, // 06:00 EST: 9 hours
		}},
		{"always open", "Europe/Paris", nil, []openCase{
			{"2026-03-29T01:00:00Z", true},
			{"2026-10-25T01:30:00Z", true},
		}},
		{"covering the week", "America/New_York", []string{"daily 12:00-12:01", "daily 12:01-12:00"}, []openCase{
			{"2026-03-08T07:00:00Z", true},
			{"2026-11-01T06:30:00Z", true},
			{"2026-06-01T16:00:00Z", true},
		}},
	}
	for _, c := range cases {
		s := mustSchedule(t, c.tz, c.windows...)
		for _, ch := range c.checks {
			if got := s.Open(at(t, ch.at)); got != ch.want {
				t.Errorf("%s: %v.Open(%s) = %v; want %v", c.name, s, ch.at, got, ch.want)
			}
		}
	}
}

func TestScheduleNextChange(t *testing.T) {
	cases := []struct {
		name    string
		tz      string
		windows []string
		from    string
		want    string // RFC 3339 instant, "" for ok=false
	}{
		{"24/7", "UTC", nil, "2026-06-01T00:00:00Z", ""},
		{"24/7 Paris", "Europe/Paris", []string{"24/7"}, "2026-03-29T01:00:00Z", ""},
		{"full week", "Europe/Paris", []string{"daily 00:00-24:00"}, "2026-03-28T12:00:00Z", ""},
		{"full week in halves", "UTC", []string{"daily 00:00-12:00", "sun-sat 12:00-24:00"}, "2026-06-01T12:00:00Z", ""},
		{"full week overnight", "America/New_York", []string{"daily 20:00-08:00", "daily 08:00-20:00"}, "2026-11-01T05:00:00Z", ""},

		{"before opening", "UTC", []string{"mon-fri 08:00-20:00"}, "2026-06-01T07:00:00Z", "2026-06-01T08:00:00Z"},
		{"just before opening", "UTC", []string{"mon-fri 08:00-20:00"}, "2026-06-01T07:59:59.999999999Z", "2026-06-01T08:00:00Z"},
		{"at opening (strictly after t)", "UTC", []string{"mon-fri 08:00-20:00"}, "2026-06-01T08:00:00Z", "2026-06-01T20:00:00Z"},
		{"open", "UTC", []string{"mon-fri 08:00-20:00"}, "2026-06-01T12:00:00.5Z", "2026-06-01T20:00:00Z"},
		{"at closing", "UTC", []string{"mon-fri 08:00-20:00"}, "2026-06-01T20:00:00Z", "2026-06-02T08:00:00Z"},
		{"over the weekend", "UTC", []string{"mon-fri 08:00-20:00"}, "2026-06-05T20:00:00Z", "2026-06-08T08:00:00Z"},
		{"Saturday", "UTC", []string{"mon-fri 08:00-20:00"}, "2026-06-06T12:00:00Z", "2026-06-08T08:00:00Z"},
		{"Paris summer", "Europe/Paris", []string{"mon-fri 08:00-20:00"}, "2026-06-01T07:00:00Z", "2026-06-01T18:00:00Z"},
		{"touching windows merge", "UTC", []string{"mon 08:00-12:00", "mon 12:00-14:00"}, "2026-06-01T09:00:00Z", "2026-06-01T14:00:00Z"},
		{"overlapping windows merge", "UTC", []string{"mon 10:00-14:00", "mon 08:00-12:00"}, "2026-06-01T09:00:00Z", "2026-06-01T14:00:00Z"},
		{"contained window", "UTC", []string{"mon 08:00-18:00", "mon 10:00-12:00"}, "2026-06-01T11:00:00Z", "2026-06-01T18:00:00Z"},
		{"gap between windows", "UTC", []string{"mon 08:00-12:00", "mon 13:00-14:00"}, "2026-06-01T12:00:00Z", "2026-06-01T13:00:00Z"},
		{"day window ends at 24:00", "UTC", []string{"mon 20:00-24:00"}, "2026-06-01T21:00:00Z", "2026-06-02T00:00:00Z"},
		{"days chained over midnight", "UTC", []string{"mon-tue 00:00-24:00"}, "2026-06-01T21:00:00Z", "2026-06-03T00:00:00Z"},
		{"overnight", "UTC", []string{"fri 22:00-06:00"}, "2026-06-05T23:00:00Z", "2026-06-06T06:00:00Z"},
		{"over the week boundary", "UTC", []string{"sun 22:00-02:00"}, "2026-06-07T23:00:00Z", "2026-06-08T02:00:00Z"},
		{"into the next week", "UTC", []string{"sun 22:00-02:00"}, "2026-06-08T02:00:00Z", "2026-06-14T22:00:00Z"},
		{"across a week", "UTC", []string{"wed 10:00-11:00"}, "2026-06-03T11:00:00Z", "2026-06-10T10:00:00Z"},
		{"across a week, at opening", "UTC", []string{"wed 10:00-11:00"}, "2026-06-03T10:00:00Z", "2026-06-03T11:00:00Z"},
		{"across a week, just after opening", "UTC", []string{"wed 10:00-11:00"}, "2026-06-03T10:00:00.000000001Z", "2026-06-03T11:00:00Z"},
		{"across a week, one second before", "UTC", []string{"wed 10:00-11:00"}, "2026-06-10T09:59:59Z", "2026-06-10T10:00:00Z"},
		{"only a minute closed each week", "UTC", []string{"mon 00:01-24:00", "tue-sun 00:00-24:00"}, "2026-06-01T00:01:00Z", "2026-06-08T00:00:00Z"},
		{"only a minute closed, reopening", "UTC", []string{"mon 00:01-24:00", "tue-sun 00:00-24:00"}, "2026-06-08T00:00:00Z", "2026-06-08T00:01:00Z"},
		{"returned in t's zone does not matter", "Asia/Tokyo", []string{"mon 09:00-10:00"}, "2026-06-01T09:00:00+09:00", "2026-06-01T01:00:00Z"},

		{"Paris spring, before the gap", "Europe/Paris", []string{"sun 02:30-04:00"}, "2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z"},
		{"Paris spring, opened after the gap", "Europe/Paris", []string{"sun 02:30-04:00"}, "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"},
		{"Paris spring, window in the gap skips a week", "Europe/Paris", []string{"sun 02:00-02:30"}, "2026-03-22T01:30:00Z", "2026-04-05T00:00:00Z"},
		{"Paris spring, window in the gap, the week before", "Europe/Paris", []string{"sun 02:00-02:30"}, "2026-03-22T01:00:00Z", "2026-03-22T01:30:00Z"},
		{"Paris spring, overnight opens", "Europe/Paris", []string{"sat 22:00-06:00"}, "2026-03-28T12:00:00Z", "2026-03-28T21:00:00Z"},
		{"Paris spring, overnight closes", "Europe/Paris", []string{"sat 22:00-06:00"}, "2026-03-28T21:00:00Z", "2026-03-29T04:00:00Z"},
		{"Paris spring, weekdays around", "Europe/Paris", []string{"mon-fri 00:00-24:00"}, "2026-03-27T12:00:00Z", "2026-03-27T23:00:00Z"},
		{"Paris spring, weekdays reopen in summer time", "Europe/Paris", []string{"mon-fri 00:00-24:00"}, "2026-03-28T12:00:00Z", "2026-03-29T22:00:00Z"},
		{"Paris fall, opens at the first 02:30", "Europe/Paris", []string{"sun 02:30-04:00"}, "2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z"},
		{"Paris fall, repeated hour changes nothing", "Europe/Paris", []string{"sun 02:30-04:00"}, "2026-10-25T00:30:00Z", "2026-10-25T03:00:00Z"},
		{"Paris fall, from the second pass", "Europe/Paris", []string{"sun 02:30-04:00"}, "2026-10-25T01:30:00Z", "2026-10-25T03:00:00Z"},
		{"Paris fall, closes at the first 02:30", "Europe/Paris", []string{"sun 01:00-02:30"}, "2026-10-24T23:00:00Z", "2026-10-25T00:30:00Z"},
		{"Paris fall, no reopening in the repeated hour", "Europe/Paris", []string{"sun 01:00-02:30"}, "2026-10-25T00:30:00Z", "2026-11-01T00:00:00Z"},
		{"Paris fall, overnight closes", "Europe/Paris", []string{"sat 22:00-06:00"}, "2026-10-24T20:00:00Z", "2026-10-25T05:00:00Z"},
		{"New York spring, opens after the gap", "America/New_York", []string{"sun 02:30-04:00"}, "2026-03-08T00:00:00Z", "2026-03-08T07:00:00Z"},
		{"New York spring, closes", "America/New_York", []string{"sun 02:30-04:00"}, "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"},
		{"New York spring, overnight closes", "America/New_York", []string{"sat 22:00-06:00"}, "2026-03-08T03:00:00Z", "2026-03-08T10:00:00Z"},
		{"New York fall, opens at the first 01:30", "America/New_York", []string{"sun 01:30-03:00"}, "2026-11-01T04:00:00Z", "2026-11-01T05:30:00Z"},
		{"New York fall, closes", "America/New_York", []string{"sun 01:30-03:00"}, "2026-11-01T06:15:00Z", "2026-11-01T08:00:00Z"},
		{"New York fall, overnight closes", "America/New_York", []string{"sat 22:00-06:00"}, "2026-11-01T02:00:00Z", "2026-11-01T11:00:00Z"},
		{"New York fall, overnight next week", "America/New_York", []string{"sat 22:00-06:00"}, "2026-11-01T11:00:00Z", "2026-11-08T03:00:00Z"},
	}
	for _, c := range cases {
		s := mustSchedule(t, c.tz, c.windows...)
		next, ok := s.NextChange(at(t, c.from))
		if c.want == "" {
			if ok {
				t.Errorf("%s: %v.NextChange(%s) = %s, true; want ok=false", c.name, s, c.from, next.UTC().Format(time.RFC3339Nano))
			}
			// Without the shortcut for whole-week coverage, the search itself must find no change.
			s.full = false
			if next, ok := s.NextChange(at(t, c.from)); ok || !s.Open(at(t, c.from)) {
				t.Errorf("%s: searching %v from %s: NextChange = %s, %v; Open = %v", c.name, s, c.from, next.UTC().Format(time.RFC3339Nano), ok, s.Open(at(t, c.from)))
			}
			continue
		}
		if !ok || !next.Equal(at(t, c.want)) {
			t.Errorf("%s: %v.NextChange(%s) = %s, %v; want %s", c.name, s, c.from, next.UTC().Format(time.RFC3339Nano), ok, c.want)
		}
		if ok && next.Location().String() != s.Timezone() {
			t.Errorf("%s: NextChange returned a time in %v; want the schedule's zone %s", c.name, next.Location(), s.Timezone())
		}
	}
}

// TestScheduleDSTLengths checks the real length of windows on DST days: a window spanning
// the change is an hour shorter (spring) or longer (fall) than on other days.
func TestScheduleDSTLengths(t *testing.T) {
	cases := []struct {
		tz, window, opens string
		want              time.Duration
	}{
		{"Europe/Paris", "sat 22:00-06:00", "2026-03-28T21:00:00Z", 7 * time.Hour},
		{"Europe/Paris", "sat 22:00-06:00", "2026-03-21T21:00:00Z", 8 * time.Hour},
		{"Europe/Paris", "sat 22:00-06:00", "2026-10-24T20:00:00Z", 9 * time.Hour},
		{"Europe/Paris", "sun 00:00-24:00", "2026-03-28T23:00:00Z", 23 * time.Hour},
		{"Europe/Paris", "sun 00:00-24:00", "2026-10-24T22:00:00Z", 25 * time.Hour},
		{"Europe/Paris", "sun 02:30-04:00", "2026-03-29T01:00:00Z", time.Hour},
		{"Europe/Paris", "sun 02:30-04:00", "2026-10-25T00:30:00Z", 150 * time.Minute},
		{"America/New_York", "sat 22:00-06:00", "2026-03-08T03:00:00Z", 7 * time.Hour},
		{"America/New_York", "sat 22:00-06:00", "2026-11-01T02:00:00Z", 9 * time.Hour},
		{"America/New_York", "sun 01:30-03:00", "2026-11-01T05:30:00Z", 150 * time.Minute},
		{"Australia/Lord_Howe", "sun 01:00-03:00", "2026-04-04T14:00:00Z", 150 * time.Minute}, // 30-minute fall back
		{"Asia/Kathmandu", "mon 09:00-10:00", "2026-06-01T03:15:00Z", time.Hour},
	}
	for _, c := range cases {
		s := mustSchedule(t, c.tz, c.window)
		opens := at(t, c.opens)
		if s.Open(opens.Add(-time.Nanosecond)) || !s.Open(opens) {
			t.Errorf("%v: does not open at %s", s, c.opens)
			continue
		}
		next, ok := s.NextChange(opens)
		if !ok || next.Sub(opens) != c.want {
			t.Errorf("%v opening %s: closes at %s (ok=%v), after %v; want after %v", s, c.opens, next.UTC().Format(time.RFC3339), ok, next.Sub(opens), c.want)
		}
	}
}

// bruteResolve is the definition of schedResolve, computed by scanning minute by minute.
func bruteResolve(loc *time.Location, wall int64) int64 {
	for u := wall - 15*3600; u <= wall+15*3600; u += 60 {
		lt := time.Unix(u, 0).In(loc)
		if time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), 0, time.UTC).Unix() >= wall {
			return u
		}
	}
	panic("no instant")
}

func TestScheduleResolveMatchesDefinition(t *testing.T) {
	for _, tz := range []string{"UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kathmandu"} {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Fatal(err)
		}
		// Every quarter hour around each 2026 transition, plus a few ordinary days.
		var days []time.Time
		for _, d := range []string{"2026-01-15", "2026-06-15"} {
			v, _ := time.Parse(time.DateOnly, d)
			days = append(days, v)
		}
		for u := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); u.Year() == 2026; {
			_, end := u.In(loc).ZoneBounds()
			if end.IsZero() || end.Year() != 2026 {
				break
			}
			lt := end.In(loc)
			days = append(days, time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, time.UTC))
			u = end
		}
		for _, d := range days {
			for m := -24 * 60; m <= 48*60; m += 15 {
				wall := d.Unix() + int64(m)*60
				if got, want := schedResolve(loc, wall), bruteResolve(loc, wall); got != want {
					t.Errorf("%s: resolve(%s) = %s; want %s", tz, time.Unix(wall, 0).UTC().Format("2006-01-02 15:04"),
						time.Unix(got, 0).UTC().Format(time.RFC3339), time.Unix(want, 0).UTC().Format(time.RFC3339))
				}
			}
		}
	}
}

// naiveOpen evaluates a schedule on the wall clock alone, valid away from DST changes.
func naiveOpen(s Schedule, t time.Time) bool {
	lt := t.In(s.location())
	dow := int(lt.Weekday())
	prev := (dow + 6) % 7
	m := lt.Hour()*60 + lt.Minute()
	for _, w := range s.windows {
		if w.end > w.start {
			if w.days&(1<<dow) != 0 && w.start <= m && m < w.end {
				return true
			}
			continue
		}
		if w.days&(1<<dow) != 0 && m >= w.start || w.days&(1<<prev) != 0 && m < w.end {
			return true
		}
	}
	return false
}

// nearZoneChange reports whether loc changes offset within two days of t.
func nearZoneChange(loc *time.Location, t time.Time) bool {
	start, end := t.In(loc).ZoneBounds()
	return !start.IsZero() && t.Sub(start) < 48*time.Hour || !end.IsZero() && end.Sub(t) < 48*time.Hour
}

func TestScheduleNextChangeProperties(t *testing.T) {
	schedules := []Schedule{
		mustSchedule(t, "Europe/Paris", "mon-fri 08:00-20:00", "sat 10:00-14:00"),
		mustSchedule(t, "Europe/Paris", "sun 02:30-04:00", "sat 22:00-06:00", "wed 01:45-03:15"),
		mustSchedule(t, "Europe/Paris", "sun 02:00-02:30"), // vanishes on the spring-forward day
		mustSchedule(t, "America/New_York", "daily 01:30-02:30", "fri-mon 23:00-01:00", "tue 00:00-24:00"),
		mustSchedule(t, "America/New_York", "mon 00:01-24:00", "tue-sun 00:00-24:00"),
		mustSchedule(t, "Australia/Lord_Howe", "sun 01:45-02:15", "sat,sun 18:00-03:00"),
		mustSchedule(t, "Asia/Kathmandu", "mon-fri 09:00-17:30"),
		mustSchedule(t, "UTC", "thu 12:00-12:15"),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	yearStart := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const samples = 1500
	for _, s := range schedules {
		naiveChecked := 0
		for i := range samples {
			tm := yearStart.Add(time.Duration(rng.Int64N(int64(366 * 24 * time.Hour))))
			if i%3 == 0 {
				tm = tm.Truncate(15 * time.Minute) // land on boundaries often
			}
			open := s.Open(tm)
			if !nearZoneChange(s.location(), tm) {
				if want := naiveOpen(s, tm); open != want {
					t.Fatalf("%v.Open(%s) = %v; wall-clock evaluation says %v", s, tm.Format(time.RFC3339Nano), open, want)
				}
				naiveChecked++
			}
			next, ok := s.NextChange(tm)
			if !ok {
				t.Fatalf("%v.NextChange(%s): ok=false", s, tm.Format(time.RFC3339Nano))
			}
			gap := next.Sub(tm)
			if gap <= 0 || gap > 15*24*time.Hour {
				t.Fatalf("%v.NextChange(%s) = %s: not within (t, t+15d]", s, tm.Format(time.RFC3339Nano), next.Format(time.RFC3339))
			}
			for k := range 8 {
				x := tm.Add(gap * time.Duration(k) / 8)
				if s.Open(x) != open {
					t.Fatalf("%v: Open(%s) = %v but Open(%s) = %v and NextChange says %s", s,
						tm.Format(time.RFC3339Nano), open, x.Format(time.RFC3339Nano), !open, next.Format(time.RFC3339))
				}
				if k > 0 {
					if n2, ok := s.NextChange(x); !ok || !n2.Equal(next) {
						t.Fatalf("%v: NextChange(%s) = %s but NextChange(%s) = %s", s, tm.Format(time.RFC3339Nano), next.Format(time.RFC3339),
							x.Format(time.RFC3339Nano), n2.Format(time.RFC3339))
					}
				}
			}
			if s.Open(next.Add(-time.Nanosecond)) != open {
				t.Fatalf("%v: Open flips before NextChange(%s) = %s", s, tm.Format(time.RFC3339Nano), next.Format(time.RFC3339))
			}
			if s.Open(next) == open {
				t.Fatalf("%v: Open does not flip at NextChange(%s) = %s", s, tm.Format(time.RFC3339Nano), next.Format(time.RFC3339))
			}
			// For a handful of instants, check every minute up to the change.
			if i < 20 {
				for x := tm.Truncate(time.Minute).Add(time.Minute); x.Before(next); x = x.Add(time.Minute) {
					if s.Open(x) != open {
						t.Fatalf("%v: Open(%s) = %v, Open(%s) = %v, yet NextChange = %s", s, tm.Format(time.RFC3339Nano), open,
							x.Format(time.RFC3339), !open, next.Format(time.RFC3339))
					}
				}
			}
		}
		if naiveChecked < samples/2 {
			t.Errorf("%v: only %d of %d samples checked against the wall clock", s, naiveChecked, samples)
		}
	}
}
