package calendar

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones must not depend on the host's zoneinfo
)

// outlook is a calendar as Outlook and Exchange write it: its zones named by Windows
// (TZID:W. Europe Standard Time), with their VTIMEZONE, and Microsoft's own properties.
const outlook = `BEGIN:VCALENDAR
METHOD:PUBLISH
PRODID:Microsoft Exchange Server 2010
VERSION:2.0
X-WR-CALNAME:GPU hours
BEGIN:VTIMEZONE
TZID:W. Europe Standard Time
BEGIN:STANDARD
DTSTART:16010101T030000
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
RRULE:FREQ=YEARLY;INTERVAL=1;BYDAY=-1SU;BYMONTH=10
END:STANDARD
BEGIN:DAYLIGHT
DTSTART:16010101T020000
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
RRULE:FREQ=YEARLY;INTERVAL=1;BYDAY=-1SU;BYMONTH=3
END:DAYLIGHT
END:VTIMEZONE
BEGIN:VEVENT
DESCRIPTION:\n
RRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=MO,TU,WE,TH,FR;WKST=MO
UID:040000008200E00074C5B7101A82E00800000000D0A1B2C3D4E5DA01000000000000000
 0100000012345678901234567890ABCDEF
SUMMARY:GPUs for rent
DTSTART;TZID=W. Europe Standard Time:20261102T090000
DTEND;TZID=W. Europe Standard Time:20261102T180000
CLASS:PUBLIC
PRIORITY:5
DTSTAMP:20261201T101500Z
TRANSP:OPAQUE
STATUS:CONFIRMED
SEQUENCE:0
X-MICROSOFT-CDO-APPT-SEQUENCE:0
X-MICROSOFT-CDO-BUSYSTATUS:BUSY
X-MICROSOFT-CDO-IMPORTANCE:1
X-MICROSOFT-DISALLOW-COUNTER:FALSE
END:VEVENT
END:VCALENDAR
`

// TestOutlookCalendar (issue 33): a calendar from Outlook or Exchange names its zones the
// Windows way; they are read as the IANA zones CLDR maps them to, for availability and for
// maintenance alike.
func TestOutlookCalendar(t *testing.T) {
	data := []byte(strings.ReplaceAll(outlook, "\n", "\r\n"))
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s, err := Weekly(data, now)
	if err != nil || s.String() != "mon-fri 09:00-18:00 (Europe/Berlin)" {
		t.Fatalf("availability from Outlook: %v %v", s, err)
	}
	pst := strings.NewReplacer("W. Europe Standard Time", "Pacific Standard Time", "BYDAY=MO,TU,WE,TH,FR", "BYDAY=SU;COUNT=6").Replace(outlook)
	wins, err := Occurrences([]byte(pst), now, now.Add(62*24*time.Hour))
	if err != nil || len(wins) != 2 {
		t.Fatalf("maintenance from Outlook: %v %v", wins, err)
	}
	if want := time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC); !wins[0].From.Equal(want) {
		t.Errorf("a Sunday 09:00 in Pacific Standard Time starts at %s, want %s", wins[0].From.UTC(), want)
	}
	bad := strings.ReplaceAll(outlook, "W. Europe Standard Time", "Customized Time Zone")
	if _, err := Weekly([]byte(bad), now); err == nil || !strings.Contains(err.Error(), "Customized Time Zone") {
		t.Errorf("a zone neither IANA nor Windows names: %v", err)
	}
}

// TestWindowsZonesLoad: every Windows zone of the table is read as a zone this binary knows.
func TestWindowsZonesLoad(t *testing.T) {
	if len(windowsZones) < 100 {
		t.Fatalf("%d Windows zones", len(windowsZones))
	}
	for win, iana := range windowsZones {
		if _, err := time.LoadLocation(iana); err != nil {
			t.Errorf("%s: %s: %v", win, iana, err)
		}
	}
}
