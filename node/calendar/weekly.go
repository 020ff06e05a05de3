package calendar

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// A provider's availability is a weekly schedule in one time zone (protocol.Schedule). A
// calendar describes one when each of its events repeats every week from now on: a weekly
// event (BYDAY for several days) or a daily one, in the same time zone. The wall-clock times
// of the events are kept, so a window stays "09:00-18:00" on both sides of a daylight-saving
// change, as the schedule itself does.

// weeksChecked is how many coming weeks must show the same pattern for a calendar to be read
// as weekly.
const weeksChecked = 4

// weekMinutes is the number of minutes in a week.
const weekMinutes = 7 * 24 * 60

// weeklyKey is one occurrence read as a weekly window: its wall-clock start in minutes after
// Sunday 00:00 and its wall-clock length in minutes.
type weeklyKey struct{ start, length int }

// Weekly reads a calendar of weekly events as an availability schedule, as from now. It
// refuses, naming the event, a calendar whose events do not repeat every week (a one-off
// event, an event every other week, one that stops or starts within the next four weeks, or
// an exception), whose events are in different time zones, or that would need more windows
// than a schedule holds.
func Weekly(data []byte, now time.Time) (protocol.Schedule, error) {
	events, err := parseEvents(data)
	if err != nil {
		return protocol.Schedule{}, err
	}
	zone := ""
	keys := map[weeklyKey]bool{}
	steps := maxSteps
	for i, e := range events {
		if i > 0 && e.zone != zone {
			return protocol.Schedule{}, fmt.Errorf("events %s and %s are in different time zones (%s, %s); an availability calendar has one",
				events[0].name(), e.name(), zoneName(zone), zoneName(e.zone))
		}
		zone = e.zone
		if !e.repeats() {
			return protocol.Schedule{}, fmt.Errorf("event %s does not repeat; availability is weekly: give each event a weekly or daily rule (RRULE), and plan a one-off absence with `gpunex maintenance import`", e.name())
		}
		if e.wall%time.Minute != 0 || e.start.Second() != 0 {
			return protocol.Schedule{}, fmt.Errorf("event %s: availability is set to the minute", e.name())
		}
		// The series is expanded on the wall clock of its zone (read as UTC): a window stays
		// "09:00-18:00" across a daylight-saving change, weeks are cut every 168 wall-clock
		// hours, and no wall time falls in a spring-forward gap.
		wall, wallNow := e.onWallClock(), wallClock(now.In(e.start.Location()))
		starts, err := wall.starts(wallNow, wallNow.Add(weeksChecked*7*24*time.Hour), &steps)
		if err != nil {
			return protocol.Schedule{}, err
		}
		var weeks [weeksChecked][]weeklyKey
		for _, s := range starts {
			if s.Before(wallNow) {
				continue // under way: the next week's occurrence stands for it
			}
			k := int(s.Sub(wallNow) / (7 * 24 * time.Hour))
			weeks[k] = append(weeks[k], weeklyKey{
				start:  int(s.Weekday())*24*60 + s.Hour()*60 + s.Minute(),
				length: int(e.wall / time.Minute),
			})
		}
		if len(starts) == 0 {
			return protocol.Schedule{}, fmt.Errorf("event %s has no occurrence in the coming %d weeks", e.name(), weeksChecked)
		}
		for k := 1; k < weeksChecked; k++ {
			if !slices.Equal(weeks[k], weeks[0]) {
				day := wallNow.Add(time.Duration(k) * 7 * 24 * time.Hour).Format(time.DateOnly)
				return protocol.Schedule{}, fmt.Errorf("event %s does not repeat every week (its week from %s differs from this week's: an interval, an end, a start or an exception); availability is weekly, so keep one-off absences out of it and plan them with `gpunex maintenance import`", e.name(), day)
			}
		}
		for _, k := range weeks[0] {
			keys[k] = true
		}
	}
	windows, err := weeklyWindows(keys)
	if err != nil {
		return protocol.Schedule{}, err
	}
	return protocol.ParseSchedule(zoneName(zone), windows)
}

// onWallClock is the event with its times read on its zone's wall clock, as if in UTC, and
// its length on that clock.
func (e event) onWallClock() event {
	w := e
	loc := e.start.Location()
	w.start, w.dur = e.startWall, e.wall
	w.rdates, w.exdates = nil, nil
	for _, t := range e.rdates {
		w.rdates = append(w.rdates, wallClock(t.In(loc)))
	}
	for _, t := range e.exdates {
		w.exdates = append(w.exdates, wallClock(t.In(loc)))
	}
	return w
}

// zoneName names an event's zone for a schedule ("" is UTC).
func zoneName(zone string) string {
	if zone == "" {
		return "UTC"
	}
	return zone
}

// weeklyWindows writes weekly keys as schedule windows: a window shorter than a day as it
// is (running past midnight if it does), a longer one split at each midnight; windows of
// the same hours are merged into one with a list of days.
func weeklyWindows(keys map[weeklyKey]bool) ([]string, error) {
	type hours struct{ start, end int }
	days := map[hours]uint8{}
	for k := range keys {
		if k.length >= weekMinutes {
			return []string{"24/7"}, nil
		}
		day, start := k.start/(24*60), k.start%(24*60)
		if k.length < 24*60 {
			end := (start + k.length) % (24 * 60)
			if end == 0 {
				end = 24 * 60
			}
			days[hours{start, end}] |= 1 << day
			continue
		}
		for left := k.length; left > 0; day, start = (day+1)%7, 0 {
			end := min(start+left, 24*60)
			days[hours{start, end}] |= 1 << day
			left -= end - start
		}
	}
	var out []string
	for h, mask := range days {
		var names []string
		for d := range 7 {
			if mask&(1<<d) != 0 {
				names = append(names, strings.ToLower(time.Weekday(d).String()[:3]))
			}
		}
		out = append(out, fmt.Sprintf("%s %02d:%02d-%02d:%02d", strings.Join(names, ","), h.start/60, h.start%60, h.end/60, h.end%60))
	}
	if len(out) > protocol.MaxScheduleWindows {
		return nil, fmt.Errorf("the calendar needs %d weekly windows; a schedule holds at most %d", len(out), protocol.MaxScheduleWindows)
	}
	sort.Strings(out)
	return out, nil
}

// icalDays are RFC 5545's weekday codes, indexed by time.Weekday.
var icalDays = [7]string{"SU", "MO", "TU", "WE", "TH", "FR", "SA"}

// WriteWeekly writes an availability schedule as an iCalendar: one weekly event per window,
// in the schedule's time zone (with its VTIMEZONE), starting in the week of now. A 24/7
// schedule is one event lasting the whole week. Weekly reads it back as the same schedule.
func WriteWeekly(w io.Writer, name string, s protocol.Schedule, now time.Time) error {
	loc, err := time.LoadLocation(s.Timezone())
	if err != nil {
		return err
	}
	// The week of now, from Monday, in dates only: the times are written as text from the
	// windows' minutes, so that none is moved by a daylight-saving change that week.
	local := now.In(loc)
	monday := time.Date(local.Year(), local.Month(), local.Day()-(int(local.Weekday())+6)%7, 0, 0, 0, 0, time.UTC)
	stamp := now.UTC().Format("20060102T150405Z")
	at := func(day, minutes int) string {
		d := monday.AddDate(0, 0, day+minutes/(24*60))
		text := fmt.Sprintf("%sT%02d%02d00", d.Format("20060102"), minutes%(24*60)/60, minutes%60)
		if loc == time.UTC {
			return ":" + text + "Z"
		}
		return ";TZID=" + s.Timezone() + ":" + text
	}
	var b strings.Builder
	header(&b, name)
	if loc != time.UTC {
		writeTimezone(&b, s.Timezone(), loc, local.Year())
	}
	spans := s.Spans()
	if s.IsAlwaysOpen() {
		spans = nil
		fmt.Fprintf(&b, "BEGIN:VEVENT\r\nUID:always@gpunex\r\nDTSTAMP:%s\r\nDTSTART%s\r\nDURATION:P7D\r\nRRULE:FREQ=WEEKLY\r\nSUMMARY:Available\r\nEND:VEVENT\r\n",
			stamp, at(0, 0))
	}
	for i, span := range spans {
		// The first day in a Monday-first week is the series' first occurrence.
		first := slices.MinFunc(span.Days, func(a, b time.Weekday) int { return (int(a)+6)%7 - (int(b)+6)%7 })
		day := (int(first) + 6) % 7
		end := span.End
		if span.End <= span.Start {
			end += 24 * 60 // ends the next day
		}
		start, stop := at(day, span.Start), at(day, end)
		var codes []string
		for _, d := range span.Days {
			codes = append(codes, icalDays[d])
		}
		fmt.Fprintf(&b, "BEGIN:VEVENT\r\nUID:window-%d@gpunex\r\nDTSTAMP:%s\r\nDTSTART%s\r\nDTEND%s\r\nRRULE:FREQ=WEEKLY;WKST=MO;BYDAY=%s\r\nSUMMARY:Available\r\nEND:VEVENT\r\n",
			i+1, stamp, start, stop, strings.Join(codes, ","))
	}
	b.WriteString("END:VCALENDAR\r\n")
	_, err = io.WriteString(w, b.String())
	return err
}

// transition is a change of a zone's offset.
type transition struct {
	at       time.Time
	from, to int // offsets in seconds east of UTC
	name     string
	dst      bool
}

// transitions lists the offset changes of loc between from and to, to the second.
func transitions(loc *time.Location, from, to time.Time) []transition {
	var out []transition
	prev := from.In(loc)
	for t := from.Add(24 * time.Hour); t.Before(to); t = t.Add(24 * time.Hour) {
		_, a := prev.Zone()
		_, b := t.In(loc).Zone()
		if a != b || prev.IsDST() != t.In(loc).IsDST() {
			lo, hi := prev, t
			for hi.Sub(lo) > time.Second {
				mid := lo.Add(hi.Sub(lo) / 2)
				_, m := mid.In(loc).Zone()
				if m == a && mid.In(loc).IsDST() == prev.IsDST() {
					lo = mid
				} else {
					hi = mid
				}
			}
			name, off := hi.In(loc).Zone()
			out = append(out, transition{at: hi, from: a, to: off, name: name, dst: hi.In(loc).IsDST()})
		}
		prev = t.In(loc)
	}
	return out
}

// yearlyRule describes a transition as "the nth (or last) weekday of a month at a wall time",
// in the offset before it.
func yearlyRule(tr transition) (month time.Month, weekday time.Weekday, nth, clock int) {
	local := tr.at.In(time.FixedZone("", tr.from))
	nth = (local.Day()-1)/7 + 1
	if local.AddDate(0, 0, 7).Month() != local.Month() {
		nth = -1
	}
	return local.Month(), local.Weekday(), nth, local.Hour()*3600 + local.Minute()*60 + local.Second()
}

// writeTimezone writes the VTIMEZONE of a zone: its offset changes from the year before year
// to eight years after, as a yearly rule per kind of change where one describes them all, or
// one by one.
func writeTimezone(b *strings.Builder, tzid string, loc *time.Location, year int) {
	offset := func(s int) string {
		sign := "+"
		if s < 0 {
			sign, s = "-", -s
		}
		return fmt.Sprintf("%s%02d%02d", sign, s/3600, s/60%60)
	}
	fmt.Fprintf(b, "BEGIN:VTIMEZONE\r\nTZID:%s\r\n", tzid)
	from := time.Date(year-1, 1, 1, 0, 0, 0, 0, time.UTC)
	trs := transitions(loc, from, time.Date(year+9, 1, 1, 0, 0, 0, 0, time.UTC))
	observance := func(tr transition, rule string) {
		kind := "STANDARD"
		if tr.dst {
			kind = "DAYLIGHT"
		}
		fmt.Fprintf(b, "BEGIN:%s\r\nDTSTART:%s\r\n%sTZOFFSETFROM:%s\r\nTZOFFSETTO:%s\r\nTZNAME:%s\r\nEND:%s\r\n",
			kind, tr.at.In(time.FixedZone("", tr.from)).Format("20060102T150405"), rule, offset(tr.from), offset(tr.to), tr.name, kind)
	}
	if len(trs) == 0 {
		name, off := from.In(loc).Zone()
		observance(transition{at: time.Date(1970, 1, 1, 0, 0, 0, 0, time.FixedZone("", off)), from: off, to: off, name: name, dst: from.In(loc).IsDST()}, "")
		b.WriteString("END:VTIMEZONE\r\n")
		return
	}
	for _, dst := range []bool{false, true} {
		var kind []transition
		for _, tr := range trs {
			if tr.dst == dst {
				kind = append(kind, tr)
			}
		}
		if len(kind) == 0 {
			continue
		}
		month, weekday, nth, clock := yearlyRule(kind[0])
		yearly := len(kind) > 1
		for _, tr := range kind[1:] {
			m, wd, n, c := yearlyRule(tr)
			yearly = yearly && m == month && wd == weekday && n == nth && c == clock && tr.from == kind[0].from && tr.to == kind[0].to
		}
		if yearly {
			observance(kind[0], fmt.Sprintf("RRULE:FREQ=YEARLY;BYMONTH=%d;BYDAY=%d%s\r\n", int(month), nth, icalDays[weekday]))
			continue
		}
		for _, tr := range kind {
			observance(tr, "")
		}
	}
	b.WriteString("END:VTIMEZONE\r\n")
}
