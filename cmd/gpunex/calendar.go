package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/teambition/rrule-go"
)

// iCalendar (RFC 5545) for maintenance: `gpunex maintenance import FILE|URL` plans the
// occurrences of a calendar's events, `gpunex maintenance export` writes the windows the
// provider announces. Recurrence rules are expanded by rrule-go; the calendar's own framing
// (folded lines, VEVENT, DTSTART/DTEND/DURATION with TZID, EXDATE, SUMMARY) is read here.

// Limits of an imported calendar.
const (
	maxCalendarBytes  = 1 << 20
	maxCalendarEvents = 500
	maxOccurrences    = 1000
)

// calWindow is one occurrence of a calendar event.
type calWindow struct {
	From, To time.Time
	Note     string
}

// readCalendar reads a calendar from a file, or from an http(s) URL.
func readCalendar(src string) ([]byte, error) {
	var r io.Reader
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		c := &http.Client{Timeout: 30 * time.Second}
		resp, err := c.Get(src)
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
// the one before).
func unfold(data []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), maxCalendarBytes)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")) && len(out) > 0 {
			out[len(out)-1] += line[1:]
			continue
		}
		out = append(out, line)
	}
	return out
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
		l, err := time.LoadLocation(tz)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("TZID %q: %w", tz, err)
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

// parseCalendar lists the occurrences of a calendar's events that end after from and start
// before to, sorted by start.
func parseCalendar(data []byte, from, to time.Time) ([]calWindow, error) {
	lines := unfold(data)
	var out []calWindow
	events := 0
	for i := 0; i < len(lines); i++ {
		if strings.ToUpper(lines[i]) != "BEGIN:VEVENT" {
			continue
		}
		if events++; events > maxCalendarEvents {
			return nil, fmt.Errorf("over %d events", maxCalendarEvents)
		}
		var start, end time.Time
		var allDay bool
		var dur time.Duration
		var summary, uid string
		var recur []string // DTSTART, RRULE and EXDATE lines for rrule-go
		for i++; i < len(lines) && strings.ToUpper(lines[i]) != "END:VEVENT"; i++ {
			name, params, value := calProp(lines[i])
			var err error
			switch name {
			case "DTSTART":
				start, allDay, err = calTime(value, params)
				recur = append(recur, lines[i])
			case "DTEND":
				end, _, err = calTime(value, params)
			case "DURATION":
				dur, err = calDuration(value)
			case "RRULE", "EXDATE", "RDATE":
				recur = append(recur, lines[i])
			case "SUMMARY":
				summary = strings.NewReplacer(`\,`, ",", `\;`, ";", `\n`, " ", `\\`, `\`).Replace(value)
			case "UID":
				uid = value
			}
			if err != nil {
				return nil, fmt.Errorf("event %s: %w", uid, err)
			}
		}
		if start.IsZero() {
			return nil, fmt.Errorf("event %s: no DTSTART", uid)
		}
		switch {
		case !end.IsZero():
			dur = end.Sub(start)
		case dur == 0 && allDay:
			dur = 24 * time.Hour
		}
		if dur <= 0 {
			return nil, fmt.Errorf("event %s: no DTEND or DURATION after its start", uid)
		}
		if len(summary) > 200 {
			summary = summary[:200]
		}
		starts := []time.Time{start}
		if len(recur) > 1 {
			set, err := rrule.StrToRRuleSet(strings.Join(recur, "\n"))
			if err != nil {
				return nil, fmt.Errorf("event %s: %w", uid, err)
			}
			starts = set.Between(from.Add(-dur), to, true)
		}
		for _, s := range starts {
			if s.Add(dur).After(from) && s.Before(to) {
				out = append(out, calWindow{From: s, To: s.Add(dur), Note: summary})
			}
			if len(out) > maxOccurrences {
				return nil, fmt.Errorf("over %d occurrences before %s", maxOccurrences, to.Format(time.DateOnly))
			}
		}
	}
	if events == 0 {
		return nil, errors.New("no VEVENT in the calendar")
	}
	sort.Slice(out, func(i, k int) bool { return out[i].From.Before(out[k].From) })
	return out, nil
}

// calEscape escapes a TEXT value.
func calEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, ",", `\,`, ";", `\;`, "\n", `\n`).Replace(s)
}

// writeCalendar writes windows as an iCalendar of one VEVENT each, in UTC.
func writeCalendar(w io.Writer, name string, windows []calWindow, now time.Time) error {
	var b strings.Builder
	b.WriteString("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//gpunex//gpunex//EN\r\nCALSCALE:GREGORIAN\r\n")
	fmt.Fprintf(&b, "X-WR-CALNAME:%s\r\n", calEscape(name))
	for _, win := range windows {
		fmt.Fprintf(&b, "BEGIN:VEVENT\r\nUID:%d-%d@gpunex\r\nDTSTAMP:%s\r\nDTSTART:%s\r\nDTEND:%s\r\nSUMMARY:%s\r\nEND:VEVENT\r\n",
			win.From.Unix(), win.To.Unix(), now.UTC().Format("20060102T150405Z"), win.From.UTC().Format("20060102T150405Z"),
			win.To.UTC().Format("20060102T150405Z"), calEscape(win.Note))
	}
	b.WriteString("END:VCALENDAR\r\n")
	_, err := io.WriteString(w, b.String())
	return err
}
