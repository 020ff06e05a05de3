package onboarding

import (
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/config"
)

// TestReviewCalendar: a decision is due at the end of the third business day after the
// day the review started, skipping weekends and holidays, in the coordinator's time zone;
// the age counts the business days that ended.
func TestReviewCalendar(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	cal, err := NewReviewCalendar(config.ReviewConfig{BusinessDays: 3, Timezone: "Europe/Paris", Holidays: []string{"2026-12-25", "2027-01-01"}})
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, paris)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct{ since, due string }{
		{"2026-12-07 10:00", "2026-12-11 00:00"}, // Monday: due at the end of Thursday
		{"2026-12-10 16:00", "2026-12-16 00:00"}, // Thursday: Friday, Monday, Tuesday
		{"2026-12-11 09:00", "2026-12-17 00:00"}, // Friday: Monday to Wednesday
		{"2026-12-12 09:00", "2026-12-17 00:00"}, // Saturday: the same
		{"2026-12-23 09:00", "2026-12-30 00:00"}, // before Christmas: 24, 28, 29
		{"2026-12-30 09:00", "2027-01-06 00:00"}, // New Year's Day off: 31, 4, 5
	}
	for _, c := range cases {
		if got := cal.Due(at(c.since)); !got.Equal(at(c.due)) {
			t.Errorf("review from %s: due %s, want %s", c.since, got.In(paris).Format("2006-01-02 15:04 Mon"), c.due)
		}
	}
	// 23:30 UTC on a Monday is Tuesday in Paris: the review starts on Tuesday there, and
	// is due at the end of Friday (not Thursday, as from Monday).
	if got := cal.Due(time.Date(2026, 12, 7, 23, 30, 0, 0, time.UTC)); !got.Equal(at("2026-12-12 00:00")) {
		t.Errorf("Monday 23:30 UTC: due %s, want the end of Friday", got.In(paris))
	}
	for _, c := range []struct {
		since, now string
		age        int
	}{
		{"2026-12-07 10:00", "2026-12-07 18:00", 0},
		{"2026-12-07 10:00", "2026-12-08 09:00", 0}, // Tuesday has not ended
		{"2026-12-07 10:00", "2026-12-09 09:00", 1},
		{"2026-12-11 10:00", "2026-12-15 09:00", 1}, // the weekend does not count
		{"2026-12-23 10:00", "2026-12-29 09:00", 2}, // nor Christmas
	} {
		if got := cal.Age(at(c.since), at(c.now)); got != c.age {
			t.Errorf("review from %s, at %s: age %d, want %d", c.since, c.now, got, c.age)
		}
	}
}
