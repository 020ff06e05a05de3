package calendar

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// ics wraps events in a calendar.
func ics(events ...string) []byte {
	var b strings.Builder
	b.WriteString("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//test//EN\r\n")
	for i, e := range events {
		b.WriteString("BEGIN:VEVENT\r\nUID:e" + string(rune('a'+i)) + "@example.org\r\n")
		b.WriteString(strings.ReplaceAll(strings.TrimSpace(e), "\n", "\r\n") + "\r\n")
		b.WriteString("END:VEVENT\r\n")
	}
	b.WriteString("END:VCALENDAR\r\n")
	return []byte(b.String())
}

// TestWeeklyAvailability: a provider's calendar of weekly events (working hours on weekdays,
// a night that runs past midnight, Saturday mornings) becomes the schedule a provider would
// write by hand, on both sides of a daylight-saving change; a weekend-long event and a daily
// all-day event are split and merged; calendars that do not repeat weekly are refused with
// the event named.
func TestWeeklyAvailability(t *testing.T) {
	now := time.Date(2026, 10, 20, 12, 0, 0, 0, time.UTC) // the Paris clocks go back on 25 October
	for _, c := range []struct {
		name string
		cal  []byte
		want string
	}{
		{"office", ics(
			"DTSTART;TZID=Europe/Paris:20260907T090000\nDTEND;TZID=Europe/Paris:20260907T180000\nRRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR\nSUMMARY:Office hours",
			"DTSTART;TZID=Europe/Paris:20260911T220000\nDTEND;TZID=Europe/Paris:20260912T060000\nRRULE:FREQ=WEEKLY",
			"DTSTART;TZID=Europe/Paris:20260912T100000\nDURATION:PT4H\nRRULE:FREQ=WEEKLY;BYDAY=SA;UNTIL=20301231T000000Z",
		), "fri 22:00-06:00, mon-fri 09:00-18:00, sat 10:00-14:00 (Europe/Paris)"},
		{"weekend", ics(
			"DTSTART:20260102T180000Z\nDTEND:20260105T080000Z\nRRULE:FREQ=WEEKLY;BYDAY=FR",
		), "fri 18:00-24:00, mon 00:00-08:00, sat,sun 00:00-24:00 (UTC)"},
		{"every day", ics(
			"DTSTART;VALUE=DATE:20260101\nRRULE:FREQ=DAILY",
		), "daily 00:00-24:00 (UTC)"},
		{"all week", ics(
			"DTSTART;TZID=America/New_York:20260105T000000\nDURATION:P7D\nRRULE:FREQ=WEEKLY",
		), "24/7"},
	} {
		s, err := Weekly(c.cal, now)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if s.String() != c.want {
			t.Errorf("%s: %s, want %s", c.name, s, c.want)
		}
	}

	// In Paris, 09:00 is 07:00 UTC in summer and 08:00 UTC in winter: the schedule follows.
	office, _ := Weekly(ics("DTSTART;TZID=Europe/Paris:20260907T090000\nDTEND;TZID=Europe/Paris:20260907T180000\nRRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"), now)
	if !office.Open(time.Date(2026, 10, 23, 7, 30, 0, 0, time.UTC)) || office.Open(time.Date(2026, 10, 26, 7, 30, 0, 0, time.UTC)) {
		t.Errorf("the office schedule does not follow Paris time: %s", office)
	}

	for _, c := range []struct {
		name, want string
		cal        []byte
	}{
		{"one-off", "does not repeat", ics("DTSTART:20261024T100000Z\nDURATION:PT2H\nSUMMARY:Open day")},
		{"fortnightly", "does not repeat every week", ics("DTSTART:20261019T100000Z\nDURATION:PT2H\nRRULE:FREQ=WEEKLY;INTERVAL=2")},
		{"ending", "does not repeat every week", ics("DTSTART:20261019T100000Z\nDURATION:PT2H\nRRULE:FREQ=WEEKLY;COUNT=3")},
		{"exception", "from 2026-11-03", ics("DTSTART:20261019T100000Z\nDURATION:PT2H\nRRULE:FREQ=DAILY\nEXDATE:20261106T100000Z")},
		{"starting later", "does not repeat every week", ics("DTSTART:20261110T100000Z\nDURATION:PT2H\nRRULE:FREQ=DAILY")},
		{"ended", "no occurrence", ics("DTSTART:20250101T100000Z\nDURATION:PT2H\nRRULE:FREQ=DAILY;COUNT=3")},
		{"monthly", "does not repeat every week", ics("DTSTART:20261001T100000Z\nDURATION:PT2H\nRRULE:FREQ=MONTHLY")},
		{"two zones", "different time zones", ics(
			"DTSTART;TZID=Europe/Paris:20260907T090000\nDURATION:PT2H\nRRULE:FREQ=DAILY",
			"DTSTART:20260907T090000Z\nDURATION:PT2H\nRRULE:FREQ=DAILY")},
		{"seconds", "to the minute", ics("DTSTART:20261019T100030Z\nDURATION:PT2H\nRRULE:FREQ=DAILY")},
	} {
		_, err := Weekly(c.cal, now)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestWeeklyRoundTrip: a schedule written as an iCalendar reads back as the same schedule,
// whatever the day it is exported and imported on; the zone is described by a VTIMEZONE with
// its yearly rules.
func TestWeeklyRoundTrip(t *testing.T) {
	schedules := []protocol.Schedule{protocol.AlwaysOpen()}
	for _, c := range []struct {
		tz      string
		windows []string
	}{
		{"Europe/Paris", []string{"mon-fri 09:00-18:00", "fri 22:00-06:00", "sat,sun 10:00-14:00"}},
		{"UTC", []string{"daily 00:00-08:00"}},
		{"America/New_York", []string{"sun 20:00-24:00", "wed 00:00-03:30"}},
		{"Asia/Kolkata", []string{"mon,wed,fri 10:00-16:00"}},
	} {
		s, err := protocol.ParseSchedule(c.tz, c.windows)
		if err != nil {
			t.Fatal(err)
		}
		schedules = append(schedules, s)
	}
	for _, s := range schedules {
		for day := range 9 {
			now := time.Date(2026, 3, 24+day, 23, 0, 0, 0, time.UTC) // across the March DST changes
			var out strings.Builder
			if err := WriteWeekly(&out, "gpunex availability", s, now); err != nil {
				t.Fatal(err)
			}
			back, err := Weekly([]byte(out.String()), now)
			if err != nil {
				t.Fatalf("%s exported on %s: %v\n%s", s, now.Format(time.DateOnly), err, out.String())
			}
			if !sameSchedule(back, s) {
				t.Errorf("%s exported on %s reads back as %s\n%s", s, now.Format(time.DateOnly), back, out.String())
			}
		}
	}
	paris, _ := protocol.ParseSchedule("Europe/Paris", []string{"mon 09:00-10:00"})
	var out strings.Builder
	if err := WriteWeekly(&out, "x", paris, time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"BEGIN:VTIMEZONE\r\nTZID:Europe/Paris\r\n",
		"BEGIN:DAYLIGHT\r\nDTSTART:20250330T020000\r\nRRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU\r\nTZOFFSETFROM:+0100\r\nTZOFFSETTO:+0200\r\nTZNAME:CEST\r\n",
		"BEGIN:STANDARD\r\nDTSTART:20251026T030000\r\nRRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU\r\nTZOFFSETFROM:+0200\r\nTZOFFSETTO:+0100\r\nTZNAME:CET\r\n",
		"DTSTART;TZID=Europe/Paris:20261130T090000\r\nDTEND;TZID=Europe/Paris:20261130T100000\r\nRRULE:FREQ=WEEKLY;WKST=MO;BYDAY=MO\r\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("export lacks %q:\n%s", want, out.String())
		}
	}
}

// sameSchedule says whether two schedules have the same zone and windows, in any order.
func sameSchedule(a, b protocol.Schedule) bool {
	if a.IsAlwaysOpen() || b.IsAlwaysOpen() {
		return a.IsAlwaysOpen() == b.IsAlwaysOpen()
	}
	wa, wb := a.Windows(), b.Windows()
	slices.Sort(wa)
	slices.Sort(wb)
	return a.Timezone() == b.Timezone() && slices.Equal(wa, wb)
}

// TestCalendarHostileRules: rules rrule-go cannot expand, and rules that would take the
// node's CPU (a followed calendar is anyone's text), are errors naming the event, not a
// crash or a stall.
func TestCalendarHostileRules(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ rule, want string }{
		{"FREQ=MONTHLY;BYDAY=-6MO", "cannot be expanded"},
		{"FREQ=YEARLY;BYEASTER=-100", "BYEASTER"},
		{"FREQ=SECONDLY", "more often than hourly"},
		{"FREQ=MINUTELY;INTERVAL=5", "more often than hourly"},
	} {
		cal := ics("DTSTART:20000101T000000Z\nDURATION:PT1H\nRRULE:" + c.rule + "\nSUMMARY:hostile")
		if _, err := Weekly(cal, now); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"hostile"`) {
			t.Errorf("Weekly %s: %v", c.rule, err)
		}
		if _, err := Occurrences(cal, now, now.Add(62*24*time.Hour)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Occurrences %s: %v", c.rule, err)
		}
	}
	// An hourly series from 1970 is too long a walk to now.
	cal := ics("DTSTART:19700101T000000Z\nDURATION:PT1H\nRRULE:FREQ=HOURLY")
	if _, err := Occurrences(cal, now, now.Add(24*time.Hour)); err == nil || !strings.Contains(err.Error(), "start the series later") {
		t.Errorf("hourly since 1970: %v", err)
	}
}

// TestWeeklyAcrossDaylightSaving: a weekly calendar reads as the same schedule whatever the
// day it is imported, including the weeks of a change and windows inside the hour a spring
// change skips; exported in such a week, windows keep their wall-clock times.
func TestWeeklyAcrossDaylightSaving(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	for _, c := range []struct {
		cal  []byte
		want string
	}{
		{ics("DTSTART;TZID=Europe/Paris:20250907T090000\nDTEND;TZID=Europe/Paris:20250907T180000\nRRULE:FREQ=DAILY"), "daily 09:00-18:00 (Europe/Paris)"},
		{ics("DTSTART;TZID=Europe/Paris:20250101T020000\nDTEND;TZID=Europe/Paris:20250101T060000\nRRULE:FREQ=DAILY"), "daily 02:00-06:00 (Europe/Paris)"},
	} {
		for _, start := range []time.Time{time.Date(2026, 3, 1, 0, 0, 0, 0, paris), time.Date(2026, 10, 1, 0, 0, 0, 0, paris)} {
			for h := 0; h < 31*24; h += 7 {
				now := start.Add(time.Duration(h)*time.Hour + 30*time.Minute)
				s, err := Weekly(c.cal, now)
				if err != nil || s.String() != c.want {
					t.Fatalf("imported at %s: %v %v, want %s", now, s, err, c.want)
				}
			}
		}
	}
	s, _ := protocol.ParseSchedule("Europe/Paris", []string{"sun 02:30-04:00", "sat 22:00-02:30", "sun 01:00-02:30"})
	for day := 23; day <= 31; day++ {
		now := time.Date(2026, 3, day, 12, 0, 0, 0, paris)
		var out strings.Builder
		WriteWeekly(&out, "x", s, now)
		back, err := Weekly([]byte(out.String()), now)
		if err != nil || !sameSchedule(back, s) {
			t.Fatalf("exported on %s: %v %v\n%s", now.Format(time.DateOnly), back, err, out.String())
		}
	}
}
