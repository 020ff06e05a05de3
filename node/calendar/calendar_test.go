package calendar

import (
	"strings"
	"testing"
	"time"
)

// TestParseCalendar: a weekly event in its time zone (across a daylight-saving change) with
// an exception, a one-off event given by DURATION, and folded lines; what is written back
// reads the same.
func TestParseCalendar(t *testing.T) {
	ics := "BEGIN:VCALENDAR\r\nVERSION:2.0\r\n" +
		"BEGIN:VEVENT\r\nUID:weekly@example.org\r\nDTSTART;TZID=Europe/Paris:20261018T020000\r\nDTEND;TZID=Europe/Paris:20261018T040000\r\n" +
		"RRULE:FREQ=WEEKLY;BYDAY=SU;COUNT=4\r\nEXDATE;TZID=Europe/Paris:20261101T020000\r\nSUMMARY:Firmware\\, drivers\r\n  and fans\r\nEND:VEVENT\r\n" +
		"BEGIN:VEVENT\r\nUID:once@example.org\r\nDTSTART:20261120T220000Z\r\nDURATION:PT1H30M\r\nSUMMARY:PSU swap\r\nEND:VEVENT\r\n" +
		"BEGIN:VEVENT\r\nUID:past@example.org\r\nDTSTART:20260101T000000Z\r\nDURATION:PT1H\r\nEND:VEVENT\r\n" +
		"END:VCALENDAR\r\n"
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	wins, err := Occurrences([]byte(ics), from, from.Add(62*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	want := []Window{
		{time.Date(2026, 10, 18, 2, 0, 0, 0, paris), time.Date(2026, 10, 18, 4, 0, 0, 0, paris), "Firmware, drivers and fans"},
		{time.Date(2026, 10, 25, 2, 0, 0, 0, paris), time.Date(2026, 10, 25, 4, 0, 0, 0, paris), "Firmware, drivers and fans"},
		{time.Date(2026, 11, 8, 2, 0, 0, 0, paris), time.Date(2026, 11, 8, 4, 0, 0, 0, paris), "Firmware, drivers and fans"},
		{time.Date(2026, 11, 20, 22, 0, 0, 0, time.UTC), time.Date(2026, 11, 20, 23, 30, 0, 0, time.UTC), "PSU swap"},
	}
	if len(wins) != len(want) {
		t.Fatalf("windows %v", wins)
	}
	for i, w := range want {
		if !wins[i].From.Equal(w.From) || !wins[i].To.Equal(w.To) || wins[i].Note != w.Note {
			t.Errorf("window %d: %v - %v %q; want %v - %v %q", i, wins[i].From, wins[i].To, wins[i].Note, w.From, w.To, w.Note)
		}
	}
	// 02:00 in Paris is 00:00 UTC in summer and 01:00 UTC after the change of 25 October.
	if wins[0].From.UTC().Hour() != 0 || wins[2].From.UTC().Hour() != 1 {
		t.Errorf("time zone not followed: %v %v", wins[0].From.UTC(), wins[2].From.UTC())
	}

	var out strings.Builder
	if err := Write(&out, "gpunex maintenance", wins, from); err != nil {
		t.Fatal(err)
	}
	back, err := Occurrences([]byte(out.String()), from, from.Add(62*24*time.Hour))
	if err != nil || len(back) != len(wins) {
		t.Fatalf("round trip: %v %v\n%s", back, err, out.String())
	}
	for i := range back {
		if !back[i].From.Equal(wins[i].From) || !back[i].To.Equal(wins[i].To) || back[i].Note != wins[i].Note {
			t.Errorf("round trip %d: %v", i, back[i])
		}
	}

	for _, bad := range []string{
		"BEGIN:VCALENDAR\r\nEND:VCALENDAR\r\n",
		"BEGIN:VEVENT\r\nDTSTART:20261120T220000Z\r\nEND:VEVENT\r\n",
		"BEGIN:VEVENT\r\nDTSTART;TZID=Mars/Olympus:20261120T220000\r\nDURATION:PT1H\r\nEND:VEVENT\r\n",
		"BEGIN:VEVENT\r\nDTSTART:20261120T220000Z\r\nDURATION:PT1H\r\nRRULE:FREQ=MINUTELY\r\nEND:VEVENT\r\n",
	} {
		if _, err := Occurrences([]byte(bad), from, from.Add(62*24*time.Hour)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}
