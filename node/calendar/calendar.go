package calendar

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/teambition/rrule-go"
)

// Package calendar reads and writes iCalendar (RFC 5545) for a provider's maintenance and
// availability: the occurrences of a calendar's events become maintenance windows, and a
// calendar of weekly events becomes the weekly availability schedule; both are written back
// as .ics. Recurrence rules are expanded by rrule-go; the calendar's own framing (folded
// lines, VEVENT, DTSTART/DTEND/DURATION with TZID, EXDATE, SUMMARY) is read here.

// Limits of an imported calendar: a followed one is anyone's text, read again every few
// minutes.
const (
	maxCalendarBytes  = 1 << 20
	maxCalendarLines  = 50_000 // unfolded; 500 events of Outlook's 30-odd lines fit
	maxCalendarEvents = 500
	maxOccurrences    = 1000
)

// Window is one occurrence of a calendar event.
type Window struct {
	From, To time.Time
	Note     string
}

// IsURL says whether a calendar source is an http(s) URL rather than a file.
func IsURL(src string) bool {
	return strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://")
}

// CheckFollow says whether a calendar source may be followed (read again and applied with
// nobody watching): an https:// URL, or an http:// one on this host's loopback (a local
// file server). Over plain http anyone on the way could set the provider's hours: close
// them to withdraw its offer, or open them while the operator is away, so that probes are
// missed.
func CheckFollow(src string) error {
	if !IsURL(src) {
		return fmt.Errorf("%s: only an https:// calendar URL is followed", src)
	}
	u, err := url.Parse(src)
	if err != nil {
		return fmt.Errorf("calendar URL: %w", err)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%s: no host in the calendar URL", src)
	}
	if strings.EqualFold(u.Scheme, "https") || u.Hostname() == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s: a followed calendar needs an https:// URL: over plain http anyone on the way could change the provider's hours (import it once, without --follow, to check what it says)", src)
}

// Read reads a calendar from a file, or from an http(s) URL, up to 1 MiB.
func Read(ctx context.Context, src string) ([]byte, error) {
	var r io.Reader
	if IsURL(src) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/calendar")
		c := &http.Client{Timeout: 30 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %s", src, resp.Status)
		}
		r = resp.Body
	} else {
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxCalendarBytes+1))
	if err == nil && len(b) > maxCalendarBytes {
		err = fmt.Errorf("%s: over %d bytes", src, maxCalendarBytes)
	}
	return b, err
}

// unfold joins RFC 5545's folded lines (a line starting with a space or a tab continues
// the one before). The parts of a line are gathered and made a string once: adding each to
// the string so far copied the whole line at every continuation, and 1 MiB of short folds
// took a minute of CPU.
func unfold(data []byte) ([]string, error) {
	var out []string
	var line []byte // the line being gathered
	started := false
	end := func() error {
		if !started {
			return nil
		}
		if len(out) == maxCalendarLines {
			return fmt.Errorf("over %d lines: no provider's hours need that many", maxCalendarLines)
		}
		out = append(out, string(line))
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), maxCalendarBytes)
	for sc.Scan() {
		part := bytes.TrimRight(sc.Bytes(), "\r")
		if len(part) > 0 && (part[0] == ' ' || part[0] == '\t') && started {
			line = append(line, part[1:]...)
			continue
		}
		if err := end(); err != nil {
			return nil, err
		}
		line, started = append(line[:0], part...), true
	}
	if err := end(); err != nil {
		return nil, err
	}
	return out, sc.Err()
}

// calProp splits "NAME;PARAM=V:VALUE" into name, params and value.
func calProp(line string) (name string, params map[string]string, value string) {
	head, value, _ := strings.Cut(line, ":")
	parts := strings.Split(head, ";")
	params = map[string]string{}
	for _, p := range parts[1:] {
		if k, v, ok := strings.Cut(p, "="); ok {
			params[strings.ToUpper(k)] = strings.Trim(v, `"`)
		}
	}
	return strings.ToUpper(parts[0]), params, value
}

// calTime reads a DATE-TIME or DATE value: UTC with Z, in its TZID, or floating (taken in
// UTC); a DATE is midnight.
func calTime(value string, params map[string]string) (time.Time, bool, error) {
	loc := time.UTC
	if tz := params["TZID"]; tz != "" {
		l, err := time.LoadLocation(ianaZone(tz))
		if err != nil {
			return time.Time{}, false, fmt.Errorf("TZID %q: neither an IANA time zone (Europe/Paris) nor a Windows one (W. Europe Standard Time): %w", tz, err)
		}
		loc = l
	}
	if params["VALUE"] == "DATE" || len(value) == 8 {
		t, err := time.ParseInLocation("20060102", value, loc)
		return t, true, err
	}
	if strings.HasSuffix(value, "Z") {
		t, err := time.Parse("20060102T150405Z", value)
		return t, false, err
	}
	t, err := time.ParseInLocation("20060102T150405", value, loc)
	return t, false, err
}

//go:generate go run gen_windowszones.go

// ianaZone is the IANA name of a TZID: Outlook and Exchange name zones the Windows way
// ("W. Europe Standard Time"), mapped as CLDR does (windowsZones); others are IANA names
// already (their VTIMEZONE is not read).
func ianaZone(tzid string) string {
	if iana, ok := windowsZones[tzid]; ok {
		return iana
	}
	return tzid
}

// calDuration reads an RFC 5545 DURATION such as PT2H30M, P1D or P1W.
func calDuration(s string) (time.Duration, error) {
	orig := s
	s = strings.TrimPrefix(strings.TrimPrefix(s, "+"), "P")
	var d time.Duration
	inTime := false
	num := 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			num = num*10 + int(c-'0')
		case c == 'T':
			inTime = true
		case c == 'W':
			d += time.Duration(num) * 7 * 24 * time.Hour
			num = 0
		case c == 'D':
			d += time.Duration(num) * 24 * time.Hour
			num = 0
		case c == 'H' && inTime:
			d += time.Duration(num) * time.Hour
			num = 0
		case c == 'M' && inTime:
			d += time.Duration(num) * time.Minute
			num = 0
		case c == 'S' && inTime:
			d += time.Duration(num) * time.Second
			num = 0
		default:
			return 0, fmt.Errorf("DURATION %q", orig)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("DURATION %q", orig)
	}
	return d, nil
}

// event is one VEVENT of a calendar.
type event struct {
	uid, summary string
	start        time.Time
	zone         string        // the TZID of DTSTART; "" for UTC or floating times
	dur          time.Duration // real length
	wall         time.Duration // length on the wall clock of its zone (differs across a DST change)
	startWall    time.Time     // DTSTART as written, read as UTC
	rule         string        // RRULE's value, or ""
	rdates       []time.Time   // RDATE
	exdates      []time.Time   // EXDATE
}

// name says which event an error is about.
func (e event) name() string {
	switch {
	case e.summary != "" && e.uid != "":
		return fmt.Sprintf("%q (%s)", e.summary, e.uid)
	case e.summary != "":
		return fmt.Sprintf("%q", e.summary)
	}
	return e.uid
}

// repeats says whether the event has a recurrence rule or dates.
func (e event) repeats() bool { return e.rule != "" || len(e.rdates) > 0 }

// maxSteps bounds the occurrences a calendar's rules are expanded through, from their
// DTSTARTs on, all together (a tenth of a second): an hourly rule started ten years ago
// fits, rules that would make a followed calendar eat the node's CPU do not (500 events
// were 500 times that).
const maxSteps = 200_000

// starts lists the starts of the event's occurrences that overlap [from, to), taking the
// occurrences walked through from *steps, what is left of the calendar's maxSteps. A rule
// rrule-go cannot expand (it panics on some: BYDAY=-6MO in a month, BYEASTER far off) or one
// that takes more occurrences than are left to get there is an error naming the event.
func (e event) starts(from, to time.Time, steps *int) (_ []time.Time, err error) {
	starts := []time.Time{e.start}
	if e.repeats() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("event %s: RRULE %q cannot be expanded: %v", e.name(), e.rule, r)
			}
		}()
		set := &rrule.Set{}
		set.DTStart(e.start)
		if e.rule != "" {
			opt, err := rrule.StrToROptionInLocation(e.rule, e.start.Location())
			if err != nil {
				return nil, fmt.Errorf("event %s: RRULE: %w", e.name(), err)
			}
			if opt.Freq == rrule.SECONDLY || opt.Freq == rrule.MINUTELY {
				return nil, fmt.Errorf("event %s: RRULE FREQ=%s: a rule repeating more often than hourly is no maintenance or availability", e.name(), opt.Freq)
			}
			if len(opt.Byeaster) > 0 {
				return nil, fmt.Errorf("event %s: RRULE BYEASTER is not supported", e.name())
			}
			opt.Dtstart = e.start
			r, err := rrule.NewRRule(*opt)
			if err != nil {
				return nil, fmt.Errorf("event %s: RRULE: %w", e.name(), err)
			}
			set.RRule(r)
		} else {
			set.RDate(e.start)
		}
		for _, t := range e.rdates {
			set.RDate(t)
		}
		for _, t := range e.exdates {
			set.ExDate(t)
		}
		starts = nil
		next := set.Iterator()
		for ; ; *steps-- {
			t, ok := next()
			if !ok || !t.Before(to) {
				break
			}
			if *steps <= 0 {
				return nil, fmt.Errorf("event %s: over %d occurrences, with the calendar's other series, from its start to %s: start the series later", e.name(), maxSteps, to.Format(time.DateOnly))
			}
			if !t.Before(from.Add(-e.dur)) {
				starts = append(starts, t)
			}
		}
	}
	out := starts[:0]
	for _, s := range starts {
		if s.Add(e.dur).After(from) && s.Before(to) {
			out = append(out, s)
		}
	}
	return out, nil
}

// parseEvents reads the VEVENTs of a calendar (other components, such as VTIMEZONE, are
// skipped: zones are read by their IANA name, or their Windows name mapped to it).
func parseEvents(data []byte) ([]event, error) {
	lines, err := unfold(data)
	if err != nil {
		return nil, err
	}
	var out []event
	for i := 0; i < len(lines); i++ {
		if strings.ToUpper(lines[i]) != "BEGIN:VEVENT" {
			continue
		}
		if len(out) == maxCalendarEvents {
			return nil, fmt.Errorf("over %d events", maxCalendarEvents)
		}
		var e event
		var end, startWall, endWall time.Time
		var allDay bool
		for i++; i < len(lines) && strings.ToUpper(lines[i]) != "END:VEVENT"; i++ {
			name, params, value := calProp(lines[i])
			var err error
			switch name {
			case "DTSTART":
				e.start, allDay, err = calTime(value, params)
				startWall, _, _ = calTime(value, map[string]string{"VALUE": params["VALUE"]})
				e.zone = ianaZone(params["TZID"])
			case "DTEND":
				end, _, err = calTime(value, params)
				endWall, _, _ = calTime(value, map[string]string{"VALUE": params["VALUE"]})
			case "DURATION":
				e.dur, err = calDuration(value)
			case "RRULE":
				if e.rule != "" {
					err = errors.New("more than one RRULE")
				}
				e.rule = value
			case "RDATE", "EXDATE":
				for _, v := range strings.Split(value, ",") {
					t, _, terr := calTime(v, params)
					if terr != nil {
						err = fmt.Errorf("%s: %w", name, terr)
						break
					}
					if name == "RDATE" {
						e.rdates = append(e.rdates, t)
					} else {
						e.exdates = append(e.exdates, t)
					}
				}
			case "SUMMARY":
				e.summary = strings.NewReplacer(`\,`, ",", `\;`, ";", `\n`, " ", `\\`, `\`).Replace(value)
			case "UID":
				e.uid = value
			}
			if err != nil {
				return nil, fmt.Errorf("event %s: %w", e.name(), err)
			}
		}
		if len(e.summary) > 200 {
			e.summary = e.summary[:200]
		}
		if e.start.IsZero() {
			return nil, fmt.Errorf("event %s: no DTSTART", e.name())
		}
		e.startWall = startWall
		e.wall = e.dur
		switch {
		case !end.IsZero():
			e.dur = end.Sub(e.start)
			// As written: a time in a spring-forward gap is not moved out of it.
			e.wall = endWall.Sub(startWall)
		case e.dur == 0 && allDay:
			e.dur, e.wall = 24*time.Hour, 24*time.Hour
		}
		if e.dur <= 0 {
			return nil, fmt.Errorf("event %s: no DTEND or DURATION after its start", e.name())
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("no VEVENT in the calendar")
	}
	return out, nil
}

// wallClock reads t's wall clock as if it were UTC, so that differences between wall clocks
// ignore offset changes.
func wallClock(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}

// Occurrences lists the occurrences of a calendar's events that end after from and start
// before to, sorted by start. Recurrences are expanded in their time zones; EXDATE is
// honoured.
func Occurrences(data []byte, from, to time.Time) ([]Window, error) {
	events, err := parseEvents(data)
	if err != nil {
		return nil, err
	}
	var out []Window
	steps := maxSteps
	for _, e := range events {
		starts, err := e.starts(from, to, &steps)
		if err != nil {
			return nil, err
		}
		for _, s := range starts {
			out = append(out, Window{From: s, To: s.Add(e.dur), Note: e.summary})
			if len(out) > maxOccurrences {
				return nil, fmt.Errorf("over %d occurrences before %s", maxOccurrences, to.Format(time.DateOnly))
			}
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].From.Before(out[k].From) })
	return out, nil
}

// calEscape escapes a TEXT value.
func calEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, ",", `\,`, ";", `\;`, "\n", `\n`).Replace(s)
}

// header starts a calendar.
func header(b *strings.Builder, name string) {
	b.WriteString("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//gpunex//gpunex//EN\r\nCALSCALE:GREGORIAN\r\n")
	fmt.Fprintf(b, "X-WR-CALNAME:%s\r\n", calEscape(name))
}

// Write writes windows as an iCalendar of one VEVENT each, in UTC.
func Write(w io.Writer, name string, windows []Window, now time.Time) error {
	var b strings.Builder
	header(&b, name)
	for _, win := range windows {
		fmt.Fprintf(&b, "BEGIN:VEVENT\r\nUID:%d-%d@gpunex\r\nDTSTAMP:%s\r\nDTSTART:%s\r\nDTEND:%s\r\nSUMMARY:%s\r\nEND:VEVENT\r\n",
			win.From.Unix(), win.To.Unix(), now.UTC().Format("20060102T150405Z"), win.From.UTC().Format("20060102T150405Z"),
			win.To.UTC().Format("20060102T150405Z"), calEscape(win.Note))
	}
	b.WriteString("END:VCALENDAR\r\n")
	_, err := io.WriteString(w, b.String())
	return err
}
