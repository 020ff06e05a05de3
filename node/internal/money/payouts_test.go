package money

import (
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

func TestPayoutSchedule(t *testing.T) {
	day := func(s string) time.Time { d, _ := time.Parse("2006-01-02", s); return d.Add(15 * time.Hour) }
	cases := []struct {
		schedule, now, due, last string
	}{
		{protocol.PayoutWeekly, "2026-12-07", "yes", "2026-12-07"}, // a Monday
		{protocol.PayoutWeekly, "2026-12-09", "no", "2026-12-07"},
		{protocol.PayoutMonthly, "2026-11-02", "yes", "2026-11-02"}, // Nov 1 is a Sunday
		{protocol.PayoutMonthly, "2026-11-01", "no", "2026-10-01"},  // before it: October's
		{protocol.PayoutMonthly, "2026-08-03", "yes", "2026-08-03"}, // Aug 1 is a Saturday
		{protocol.PayoutMonthly, "2026-12-01", "yes", "2026-12-01"}, // a Tuesday
		{protocol.PayoutMonthly, "2026-12-15", "no", "2026-12-01"},
	}
	for _, c := range cases {
		if got := due(c.schedule, day(c.now)); got != (c.due == "yes") {
			t.Errorf("due(%s, %s) = %v", c.schedule, c.now, got)
		}
		if got := lastDue(c.schedule, day(c.now)).Format("2006-01-02"); got != c.last {
			t.Errorf("lastDue(%s, %s) = %s, want %s", c.schedule, c.now, got, c.last)
		}
	}
}
