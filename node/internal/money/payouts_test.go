package money

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// TestPayoutSchedule: weekly payouts are due on Mondays, monthly ones on the first business
// day of the month (UTC); lastDue is the latest due day up to today.
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

// skippedLine is the line of a run's skipped list naming a provider.
func skippedLine(v api.BatchView, p party) string {
	for _, s := range v.Skipped {
		if strings.HasPrefix(s, p.id.String()+":") {
			return s
		}
	}
	return ""
}

func paidProviders(v api.BatchView) []string {
	var out []string
	for _, p := range v.Payouts {
		out = append(out, p.Provider)
	}
	slices.Sort(out)
	return out
}

func ids(ps ...party) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.id.String())
	}
	slices.Sort(out)
	return out
}

// TestPayoutWhoIsPaid: a run pays the providers whose schedule is due today and whose
// pending earnings reach the minimum; the others are listed with the reason. --now pays
// every schedule, --min-usdc lowers the minimum.
func TestPayoutWhoIsPaid(t *testing.T) {
	c := newCoordinator(t, func(cfg *config.Config) { cfg.Settlement.MinPayoutUSDC = "1.00" })
	small := c.usdcProvider(t, protocol.PayoutWeekly)
	c.earn(t, small.party, 1_000_000) // 0.90 after the commission: below 1.00
	weekly := c.usdcProvider(t, protocol.PayoutWeekly)
	c.earn(t, weekly.party, 2_000_000)
	monthly := c.usdcProvider(t, protocol.PayoutMonthly)
	c.earn(t, monthly.party, 2_000_000)
	silent := newParty() // earned, sent no payout settings
	c.earn(t, silent, 2_000_000)

	v, err := c.RunPayouts(context.Background(), api.PayoutRunOptions{}) // a Monday
	if err != nil {
		t.Fatal(err)
	}
	if got := paidProviders(v); !slices.Equal(got, ids(weekly.party)) || v.Payouts[0].Amount != 1_800_000 {
		t.Fatalf("paid %v (%+v), want the weekly provider its 1.80", got, v.Payouts)
	}
	for p, why := range map[party]string{
		small.party:   "0.90 USDC pending, below the minimum of 1.00",
		monthly.party: "monthly payouts are not due today",
		silent:        "1.80 USDC pending but no payout settings received",
	} {
		if line := skippedLine(v, p); !strings.Contains(line, why) {
			t.Errorf("skipped %q, want %q", line, why)
		}
	}

	c.clock.Advance(24 * time.Hour) // Tuesday: nothing due without --now
	c.earn(t, weekly.party, 2_000_000)
	if v, err := c.RunPayouts(context.Background(), api.PayoutRunOptions{}); err != nil || v.State != "empty" ||
		!strings.Contains(skippedLine(v, weekly.party), "weekly payouts are not due today") {
		t.Fatalf("Tuesday: %+v %v", v, err)
	}
	zero := protocol.MicroUSDC(0)
	v, err = c.RunPayouts(context.Background(), api.PayoutRunOptions{Now: true, Min: &zero})
	if err != nil || !slices.Equal(paidProviders(v), ids(small.party, weekly.party, monthly.party)) {
		t.Fatalf("--now --min-usdc 0: %+v %v", v, err)
	}
	c.paidOnce(t)
}

// TestPayoutDryRun: a dry run plans and checks the batch, stores and sends nothing; the
// earnings stay pending for the real run.
func TestPayoutDryRun(t *testing.T) {
	c := newCoordinator(t)
	c.payees(t, 2)
	v, err := c.RunPayouts(context.Background(), api.PayoutRunOptions{Now: true, DryRun: true})
	if err != nil || v.BatchID != "dry-run" || len(v.Payouts) != 2 || v.Total != 1_800_000 {
		t.Fatalf("dry run: %+v %v", v, err)
	}
	if bs, _ := c.ledger.Payouts.Batches(); len(bs) != 0 || c.chain.sends != 0 {
		t.Fatalf("a dry run stored %d batches and sent %d transactions", len(bs), c.chain.sends)
	}
	c.chain.usdc = 0
	if _, err := c.RunPayouts(context.Background(), api.PayoutRunOptions{Now: true, DryRun: true}); !errors.Is(err, chain.ErrUnderfunded) {
		t.Fatalf("a dry run skips the chain checks: %v", err)
	}
	c.chain.usdc = 1_000_000_000
	if v, err := c.RunPayouts(context.Background(), runNow); err != nil || len(v.Payouts) != 2 {
		t.Fatalf("the real run: %+v %v", v, err)
	}
	c.paidOnce(t)
}

// TestScheduledPayouts: the settlement loop's check pays each schedule once per due day,
// catches up a due day the coordinator missed until the next one, and retries a failed
// run at the next check.
func TestScheduledPayouts(t *testing.T) {
	c := newCoordinator(t)
	weekly := c.usdcProvider(t, protocol.PayoutWeekly)
	monthly := c.usdcProvider(t, protocol.PayoutMonthly)
	earnBoth := func() {
		c.earn(t, weekly.party, 1_000_000)
		c.earn(t, monthly.party, 1_000_000)
	}
	batches := func() []ledger.Batch { bs, _ := c.ledger.Payouts.Batches(); return bs }
	paidIn := func(b ledger.Batch) []string {
		var out []string
		for _, p := range b.Payouts {
			out = append(out, p.Provider)
		}
		slices.Sort(out)
		return out
	}
	ctx := context.Background()

	// Monday 7 December: the weekly day, and December's first business day (the 1st) not
	// paid yet: both.
	earnBoth()
	c.ScheduledPayouts(ctx)
	if bs := batches(); len(bs) != 1 || !slices.Equal(paidIn(bs[0]), ids(weekly.party, monthly.party)) {
		t.Fatalf("first check: %d batches", len(bs))
	}
	// Later checks of the same day, and of the days until the next due day, pay nothing.
	earnBoth()
	for _, d := range []time.Duration{time.Hour, 48 * time.Hour} {
		c.clock.Advance(d)
		c.ScheduledPayouts(ctx)
		if n := len(batches()); n != 1 {
			t.Fatalf("%d batches after a check on a day already paid", n)
		}
	}
	// Monday 14 December, down all day: the check of Tuesday catches up the weekly
	// payout; the monthly one waits for January.
	c.clock.Advance(6 * 24 * time.Hour) // Tuesday 15, 15:00
	c.ScheduledPayouts(ctx)
	if bs := batches(); len(bs) != 2 || !slices.Equal(paidIn(bs[0]), ids(weekly.party)) {
		t.Fatalf("catch-up: %d batches", len(bs))
	}
	// Friday 1 January 2027, the first business day, with the treasury empty: the run
	// fails and is retried at the next check, once the treasury is funded. (The weekly
	// provider has nothing pending: the catch-up paid it.)
	c.clock.Advance(time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC).Sub(c.clock.Now()))
	c.chain.usdc = 0
	c.ScheduledPayouts(ctx)
	if n := len(batches()); n != 2 {
		t.Fatalf("%d batches after a failed run", n)
	}
	c.chain.usdc = 1_000_000_000
	c.clock.Advance(time.Hour)
	c.ScheduledPayouts(ctx)
	if bs := batches(); len(bs) != 3 || !slices.Equal(paidIn(bs[0]), ids(monthly.party)) {
		t.Fatalf("retry on 1 January: %d batches, %v", len(bs), paidIn(bs[0]))
	}
	c.paidOnce(t)
}
