package money

import (
	"context"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// The payout schedule: weekly payouts on Mondays, monthly ones on the first business day
// of the month, in UTC; a due day is paid once, a missed one at the next check.
// docs/settlement.md, "Who is paid, and when".

// runOptions are a payout run's options: the operator's, and for the scheduled run the
// schedules it pays (a due day the coordinator missed included); nil pays the schedules
// due today.
type runOptions struct {
	api.PayoutRunOptions
	schedules map[string]bool
}

// pays reports whether a run pays providers of a schedule at time now.
func (o runOptions) pays(schedule string, now time.Time) bool {
	if o.Now {
		return true
	}
	if o.schedules != nil {
		return o.schedules[schedule]
	}
	return due(schedule, now)
}

// due reports whether a provider's schedule pays it at time now: weekly on Mondays,
// monthly on the first business day (Monday to Friday) of the month, in UTC.
func due(schedule string, now time.Time) bool {
	now = now.UTC()
	if schedule == protocol.PayoutWeekly {
		return now.Weekday() == time.Monday
	}
	d := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	for d.Weekday() == time.Saturday || d.Weekday() == time.Sunday {
		d = d.AddDate(0, 0, 1)
	}
	return now.Day() == d.Day()
}

// lastDue is the latest day, up to now's, on which a schedule pays (UTC midnight).
func lastDue(schedule string, now time.Time) time.Time {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	for i := 0; i < 40; i++ {
		if due(schedule, day) {
			return day
		}
		day = day.AddDate(0, 0, -1)
	}
	return day
}

// ScheduledPayouts pays each schedule once per due day: weekly on Mondays, monthly on the
// first business day. A due day the coordinator missed (it was down) is paid at the next
// check, as long as no later due day has come.
func (s *payouts) ScheduledPayouts(ctx context.Context) {
	now := s.clock.Now().UTC()
	schedules := map[string]bool{}
	var keys []string
	for _, sch := range []string{protocol.PayoutWeekly, protocol.PayoutMonthly} {
		key := sch + "/" + lastDue(sch, now).Format("2006-01-02")
		if done, _ := s.ledger.Payouts.ScheduledPayoutDone(key); !done {
			schedules[sch] = true
			keys = append(keys, key)
		}
	}
	if len(schedules) == 0 {
		return
	}
	v, err := s.run(ctx, runOptions{schedules: schedules})
	if err != nil {
		s.log.Warn("scheduled payouts failed; they are retried at the next check", "err", err)
		return
	}
	for _, k := range keys {
		s.ledger.Payouts.MarkScheduledPayoutDone(k)
	}
	if v.BatchID != "" && v.State != "empty" {
		s.log.Info("scheduled payouts", "batch", v.BatchID, "payouts", len(v.Payouts), "usdc", v.TotalUSDC)
	}
}
