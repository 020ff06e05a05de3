package protocol

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Provider availability schedule: a weekly calendar of windows in a time zone. Outside its
// windows a provider's GPU offer is withdrawn.
//
// Windows are local wall-clock times. Each occurrence of a window is the half-open interval
// of instants [resolve(start), resolve(end)), where resolve maps a wall-clock time to the
// earliest instant whose local reading is at or after it. So across DST changes:
//   - a boundary at a wall time that does not exist (inside a spring-forward gap) takes effect
//     at the first instant after the gap (02:30 in Europe/Paris on the last Sunday of March
//     acts as 03:00 local);
//   - a boundary at a wall time that occurs twice (fall-back) takes the first occurrence, and
//     the repeated hour does not open or close the window again;
//   - a window spanning the night of a change lasts one hour less or more in real time.

// MaxScheduleWindows caps the number of windows in one schedule.
const MaxScheduleWindows = 32

// ErrBadSchedule is wrapped by every error ParseSchedule returns (errors.Is works; the
// message itself names the offending timezone or window).
var ErrBadSchedule = errors.New("bad schedule")

type scheduleError struct{ msg string }

func (e *scheduleError) Error() string { return e.msg }
func (e *scheduleError) Unwrap() error { return ErrBadSchedule }

func scheduleErrorf(format string, args ...any) error {
	return &scheduleError{msg: fmt.Sprintf(format, args...)}
}

const (
	schedMinutesPerDay = 24 * 60
	schedAllDays       = 1<<7 - 1
	// schedSearchDays is how many local days after t NextChange examines. A week plus one
	// would do for ordinary schedules; two weeks also covers a window that vanishes in a
	// spring-forward gap (e.g. "sun 02:00-02:30"), leaving 14 days between changes.
	schedSearchDays = 15
	// schedMaxOffset bounds any UTC offset (real ones stay within ±14h).
	schedMaxOffset = 26 * 3600
)

// schedDayNames is indexed by time.Weekday (Sunday = 0).
var schedDayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// Schedule is a weekly availability calendar in a time zone. A Schedule with no windows is
// open all the time (24/7). The zero Schedule is 24/7 in UTC. Schedules are immutable.
type Schedule struct {
	tz      string         // zone name as given; "" means UTC
	loc     *time.Location // nil means UTC
	windows []schedWindow
	full    bool // the windows cover every minute of the week
}

type schedWindow struct {
	days  uint8 // bit d set: the window starts on time.Weekday(d)
	start int   // minutes after local midnight, 0..1439
	end   int   // minutes after local midnight of the start day, 1..1440, or of the next day when end < start
	text  string
}

// AlwaysOpen returns the 24/7 schedule (in UTC).
func AlwaysOpen() Schedule { return Schedule{} }

// ParseSchedule builds a schedule. timezone is an IANA name ("Europe/Paris", "UTC", "" means
// UTC; "Local" is refused because it differs between machines). Each window is
// "DAYS HH:MM-HH:MM" where DAYS is a day ("mon"), a range ("mon-fri", wrapping like "fri-mon"
// allowed), a comma list ("sat,sun", "mon-wed,fri"), "daily" or "*". Day names are 3-letter
// English, case-insensitive; the hour may have one digit ("8:00"). End "24:00" (or "00:00")
// means midnight at the end of the day. An end earlier than the start (e.g.
// "fri 22:00-06:00") means the window runs past midnight into the next day (the day list
// names the day the window starts). The single string "24/7" (or an empty list) means always
// open. Start == End is an error. Overlapping windows simply union. At most
// MaxScheduleWindows windows. Errors wrap ErrBadSchedule and name the offending window, e.g.
// `window "mon 25:00-26:00": hour must be 00-24`.
func ParseSchedule(timezone string, windows []string) (Schedule, error) {
	var s Schedule
	tz := strings.TrimSpace(timezone)
	switch {
	case tz == "" || strings.EqualFold(tz, "UTC"):
		s.tz, s.loc = "UTC", time.UTC
	case strings.EqualFold(tz, "Local"):
		return Schedule{}, scheduleErrorf("timezone %q: name an IANA time zone such as \"Europe/Paris\" or \"UTC\"; the machine's local zone is not portable", timezone)
	default:
		loc, err := time.LoadLocation(tz)
		if err != nil {
			return Schedule{}, scheduleErrorf("timezone %q: unknown time zone; expected an IANA name such as \"Europe/Paris\" or \"UTC\"", timezone)
		}
		s.tz, s.loc = tz, loc
	}
	if len(windows) == 1 && strings.TrimSpace(windows[0]) == "24/7" {
		return s, nil
	}
	if len(windows) > MaxScheduleWindows {
		return Schedule{}, scheduleErrorf("schedule has %d windows; at most %d are allowed", len(windows), MaxScheduleWindows)
	}
	for _, raw := range windows {
		w, err := parseSchedWindow(raw)
		if err != nil {
			return Schedule{}, err
		}
		s.windows = append(s.windows, w)
	}
	s.full = schedCoversWeek(s.windows)
	return s, nil
}

func parseSchedWindow(raw string) (schedWindow, error) {
	fail := func(format string, args ...any) (schedWindow, error) {
		return schedWindow{}, scheduleErrorf("window %q: %s", raw, fmt.Sprintf(format, args...))
	}
	if strings.TrimSpace(raw) == "24/7" {
		return fail(`"24/7" must be the only window`)
	}
	fields := strings.Fields(raw)
	if len(fields) != 2 {
		return fail(`expected "DAYS HH:MM-HH:MM", e.g. "mon-fri 08:00-20:00"`)
	}
	days, msg := parseSchedDays(fields[0])
	if msg != "" {
		return fail("%s", msg)
	}
	from, to, ok := strings.Cut(fields[1], "-")
	if !ok {
		return fail(`expected a time range HH:MM-HH:MM, e.g. "08:00-20:00"`)
	}
	start, msg := parseSchedClock(from)
	if msg != "" {
		return fail("%s", msg)
	}
	end, msg := parseSchedClock(to)
	if msg != "" {
		return fail("%s", msg)
	}
	if start == schedMinutesPerDay {
		return fail("start must be before 24:00")
	}
	if start == end {
		return fail(`start and end are equal; a window needs a length (use "24/7" to be always open)`)
	}
	if end == 0 {
		end = schedMinutesPerDay // "22:00-00:00" is "22:00-24:00"
	}
	w := schedWindow{days: days, start: start, end: end}
	w.text = schedDaysText(days) + " " + schedClockText(start) + "-" + schedClockText(end)
	return w, nil
}

// parseSchedDays parses a day list; a non-empty second result is the error message.
func parseSchedDays(s string) (uint8, string) {
	s = strings.ToLower(s)
	var mask uint8
	for item := range strings.SplitSeq(s, ",") {
		if item == "daily" || item == "*" {
			mask = schedAllDays
			continue
		}
		if item == "" {
			return 0, fmt.Sprintf(`empty day in %q; expected days such as "mon", "mon-fri", "sat,sun" or "daily"`, s)
		}
		a, b, isRange := strings.Cut(item, "-")
		if isRange && (a == "" || b == "" || strings.Contains(b, "-")) {
			return 0, fmt.Sprintf(`bad day range %q; expected two days such as "mon-fri"`, item)
		}
		da, ok := schedDay(a)
		if !ok {
			return 0, fmt.Sprintf(`unknown day %q; expected mon, tue, wed, thu, fri, sat, sun, a range such as "mon-fri", or "daily"`, a)
		}
		if !isRange {
			mask |= 1 << da
			continue
		}
		db, ok := schedDay(b)
		if !ok {
			return 0, fmt.Sprintf(`unknown day %q; expected mon, tue, wed, thu, fri, sat, sun, a range such as "mon-fri", or "daily"`, b)
		}
		for d := da; ; d = (d + 1) % 7 {
			mask |= 1 << d
			if d == db {
				break
			}
		}
	}
	return mask, ""
}

func schedDay(name string) (int, bool) {
	for d, n := range schedDayNames {
		if n == name {
			return d, true
		}
	}
	return 0, false
}

// parseSchedClock parses "HH:MM" (or "H:MM") into minutes after midnight, 0..1440; a
// non-empty second result is the error message.
func parseSchedClock(s string) (int, string) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) < 1 || len(h) > 2 || len(m) != 2 || !schedDigits(h) || !schedDigits(m) {
		return 0, fmt.Sprintf("time %q must be HH:MM, e.g. \"08:00\"", s)
	}
	hour := schedAtoi(h)
	minute := schedAtoi(m)
	switch {
	case hour > 24:
		return 0, "hour must be 00-24"
	case minute > 59:
		return 0, "minute must be 00-59"
	case hour == 24 && minute != 0:
		return 0, fmt.Sprintf("time %q is past 24:00, the end of the day", s)
	}
	return hour*60 + minute, ""
}

func schedDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func schedAtoi(s string) int {
	n := 0
	for _, c := range []byte(s) {
		n = n*10 + int(c-'0')
	}
	return n
}

func schedClockText(minutes int) string {
	return fmt.Sprintf("%02d:%02d", minutes/60, minutes%60)
}

// schedDaysText writes a day set canonically: "daily", or runs of consecutive days in
// Monday-first order, a run that wraps over the weekend first ("fri-mon"), runs of three or
// more days as a range ("mon-fri"), shorter ones as a list ("sat,sun").
func schedDaysText(mask uint8) string {
	if mask&schedAllDays == schedAllDays {
		return "daily"
	}
	in := func(i int) bool { return mask&(1<<(((i%7)+7)%7)) != 0 }
	// Scan a week starting on Monday, or earlier if Monday continues a run from the weekend.
	first := 1
	for range 6 {
		if !in(first - 1) {
			break
		}
		first--
	}
	var parts []string
	for i := first; i < first+7; {
		if !in(i) {
			i++
			continue
		}
		j := i
		for j+1 < first+7 && in(j+1) {
			j++
		}
		a, b := schedDayNames[((i%7)+7)%7], schedDayNames[((j%7)+7)%7]
		switch j - i {
		case 0:
			parts = append(parts, a)
		case 1:
			parts = append(parts, a+","+b)
		default:
			parts = append(parts, a+"-"+b)
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// schedCoversWeek reports whether the windows, as wall-clock intervals, cover every minute
// of the week. If they do, the schedule is open at every instant whatever the DST rules,
// because resolving wall times to instants is monotonic.
func schedCoversWeek(windows []schedWindow) bool {
	const week = 7 * schedMinutesPerDay
	var covered [week]bool
	for _, w := range windows {
		end := w.end
		if end < w.start {
			end += schedMinutesPerDay
		}
		for d := range 7 {
			if w.days&(1<<d) == 0 {
				continue
			}
			for m := d*schedMinutesPerDay + w.start; m < d*schedMinutesPerDay+end; m++ {
				covered[m%week] = true
			}
		}
	}
	return !slices.Contains(covered[:], false)
}

// IsAlwaysOpen reports whether the schedule is open at every instant: it has no windows, or
// its windows cover the whole week.
func (s Schedule) IsAlwaysOpen() bool { return len(s.windows) == 0 || s.full }

// Timezone returns the IANA name of the schedule's zone ("UTC" for the zero Schedule).
func (s Schedule) Timezone() string {
	if s.tz == "" {
		return "UTC"
	}
	return s.tz
}

func (s Schedule) location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// Windows returns the normalised text of each window, in the order given, e.g.
// "mon-fri 08:00-20:00". It is empty for a schedule declared 24/7.
// ParseSchedule(s.Timezone(), s.Windows()) rebuilds s.
func (s Schedule) Windows() []string {
	if len(s.windows) == 0 {
		return nil
	}
	out := make([]string, len(s.windows))
	for i, w := range s.windows {
		out[i] = w.text
	}
	return out
}

// WeeklyWindow is one window of a schedule in numbers: the days it starts on, and its start
// and end in minutes after local midnight. An End at or before Start ends on the next day;
// End 1440 is midnight at the end of the start day.
type WeeklyWindow struct {
	Days       []time.Weekday
	Start, End int
}

// Spans returns the schedule's windows in numbers, in the order given; none for 24/7.
func (s Schedule) Spans() []WeeklyWindow {
	var out []WeeklyWindow
	for _, w := range s.windows {
		ww := WeeklyWindow{Start: w.start, End: w.end}
		for d := range 7 {
			if w.days&(1<<d) != 0 {
				ww.Days = append(ww.Days, time.Weekday(d))
			}
		}
		out = append(out, ww)
	}
	return out
}

// String returns "24/7" for a schedule without windows, otherwise the windows and the zone,
// e.g. "mon-fri 08:00-20:00, sat 10:00-14:00 (Europe/Paris)".
func (s Schedule) String() string {
	if len(s.windows) == 0 {
		return "24/7"
	}
	return strings.Join(s.Windows(), ", ") + " (" + s.Timezone() + ")"
}

// Open reports whether t falls inside a window (start inclusive, end exclusive), evaluated
// in the schedule's zone in local wall-clock time (see the DST rules at the top of this file).
func (s Schedule) Open(t time.Time) bool {
	if s.IsAlwaysOpen() {
		return true
	}
	sec := t.Unix() // whole seconds, rounded down: boundaries are whole seconds
	spans, _ := s.spans(t, 1)
	for _, sp := range spans {
		if sp.from <= sec && sec < sp.to {
			return true
		}
	}
	return false
}

// NextChange returns the first instant strictly after t at which Open changes value,
// expressed in the schedule's zone; ok is false when it never changes (24/7, or windows that
// cover the whole week). The search looks at most about two weeks ahead.
func (s Schedule) NextChange(t time.Time) (next time.Time, ok bool) {
	if s.IsAlwaysOpen() {
		return time.Time{}, false
	}
	spans, horizon := s.spans(t, schedSearchDays)
	slices.SortFunc(spans, func(a, b schedSpan) int {
		switch {
		case a.from < b.from:
			return -1
		case a.from > b.from:
			return 1
		}
		return 0
	})
	// Merge overlapping and touching occurrences: the merged spans are exactly the open
	// periods (up to horizon), separated by closed gaps.
	merged := spans[:0]
	for _, sp := range spans {
		if n := len(merged); n > 0 && sp.from <= merged[n-1].to {
			merged[n-1].to = max(merged[n-1].to, sp.to)
			continue
		}
		merged = append(merged, sp)
	}
	sec := t.Unix()
	for _, sp := range merged {
		var b int64
		switch {
		case sec < sp.from:
			b = sp.from // closed now, opens at b
		case sec < sp.to:
			b = sp.to // open now, closes at b
		default:
			continue
		}
		if b >= horizon {
			break // occurrences beyond the horizon were not looked at
		}
		return time.Unix(b, 0).In(s.location()), true
	}
	return time.Time{}, false
}

// schedSpan is one occurrence of a window: the instants [from, to), in Unix seconds.
type schedSpan struct{ from, to int64 }

// spans lists the occurrences of the windows that start on the local days from two days
// before t's local date to after days after it, and the horizon: the instant where the first
// day not examined begins. The union of the spans is exact for instants before horizon and
// at or after the local midnight starting t's date minus one day.
func (s Schedule) spans(t time.Time, after int) (spans []schedSpan, horizon int64) {
	loc := s.location()
	lt := t.In(loc)
	base := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, time.UTC).Unix()
	wd := int(lt.Weekday())
	for k := -2; k <= after; k++ {
		day := base + int64(k)*86400
		dow := ((wd+k)%7 + 7) % 7
		for _, w := range s.windows {
			if w.days&(1<<dow) == 0 {
				continue
			}
			end := w.end
			if end < w.start {
				end += schedMinutesPerDay
			}
			from := schedResolve(loc, day+int64(w.start)*60)
			to := schedResolve(loc, day+int64(end)*60)
			if from < to { // an occurrence can vanish inside a DST gap
				spans = append(spans, schedSpan{from, to})
			}
		}
	}
	return spans, schedResolve(loc, base+int64(after+1)*86400)
}

// schedResolve maps a wall-clock time in loc, given as Unix seconds as if loc were UTC, to
// the earliest instant (Unix seconds) whose wall-clock reading is at or after it: the time
// itself normally, the end of the gap for a time skipped by a spring-forward, the first
// occurrence for a time repeated by a fall-back.
func schedResolve(loc *time.Location, wall int64) int64 {
	// Walk the zone periods (constant offset) from well before wall. Within a period the
	// wall clock rises with the instant, so the first period whose wall clock reaches wall
	// holds the answer.
	u := time.Unix(wall-schedMaxOffset, 0).In(loc)
	for range 8 {
		_, off := u.Zone()
		_, end := u.ZoneBounds()
		if end.IsZero() || end.Unix()+int64(off) > wall {
			return max(u.Unix(), wall-int64(off))
		}
		u = end
	}
	_, off := u.Zone() // unreachable with real zones: 8 transitions within 52 hours
	return max(u.Unix(), wall-int64(off))
}
