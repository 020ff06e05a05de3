package onboarding

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/notify"
	"github.com/gpunex/gpunex/protocol"
)

// Review deadlines: a decision on an application is due a number of business days after
// its review started (its submission, or the applicant's latest answer to a question);
// the queue shows each application's age and due date, the applicant sees the date, and
// the reviewers are reminded once when it nears and once when it passes.

// ReviewCalendar counts business days: Monday to Friday in a time zone, less holidays.
type ReviewCalendar struct {
	days     int
	loc      *time.Location
	holidays map[string]bool
}

// NewReviewCalendar reads coordinator.review (checked by config.Validate).
func NewReviewCalendar(r config.ReviewConfig) (*ReviewCalendar, error) {
	loc, err := time.LoadLocation(r.Timezone)
	if err != nil {
		return nil, fmt.Errorf("coordinator.review.timezone: %w", err)
	}
	c := &ReviewCalendar{days: r.BusinessDays, loc: loc, holidays: map[string]bool{}}
	for _, h := range r.Holidays {
		c.holidays[h] = true
	}
	if c.days < 1 {
		c.days = 1
	}
	return c, nil
}

func (c *ReviewCalendar) businessDay(day time.Time) bool {
	wd := day.Weekday()
	return wd != time.Saturday && wd != time.Sunday && !c.holidays[day.Format(time.DateOnly)]
}

// startOfDay is midnight of t's day in the calendar's time zone.
func (c *ReviewCalendar) startOfDay(t time.Time) time.Time {
	y, m, d := t.In(c.loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, c.loc)
}

// Due is the end of the Nth business day after the day the review started: started on a
// Monday, 3 business days are due at the end of Thursday; on a Friday or a Saturday, at
// the end of Wednesday.
func (c *ReviewCalendar) Due(since time.Time) time.Time {
	day := c.startOfDay(since)
	for n := 0; n < c.days; {
		day = day.AddDate(0, 0, 1)
		if c.businessDay(day) {
			n++
		}
	}
	return day.AddDate(0, 0, 1) // the end of that day
}

// Age is how many business days have ended since the day the review started.
func (c *ReviewCalendar) Age(since, now time.Time) int {
	n := 0
	today := c.startOfDay(now)
	for day := c.startOfDay(since).AddDate(0, 0, 1); day.Before(today); day = day.AddDate(0, 0, 1) {
		if c.businessDay(day) {
			n++
		}
	}
	return n
}

// awaitsReview tells whether the decision is the reviewers' to make (an application with
// a question pending waits for the applicant).
func awaitsReview(a ledger.Application) bool { return a.Status == protocol.StatusPending }

func reviewSince(a ledger.Application) time.Time {
	if a.ReviewSince.IsZero() {
		return a.SubmittedAt
	}
	return a.ReviewSince
}

// decisionDue is when a decision on a is due, zero when it awaits none.
func (c *Coordinator) decisionDue(a ledger.Application) time.Time {
	if !awaitsReview(a) {
		return time.Time{}
	}
	return c.cal.Due(reviewSince(a))
}

// View is an application as the coordinator's API shows it, with its review's age and due
// date and the coordinator's measurement of the applicant's link (full adds the record and
// the trail).
func (c *Coordinator) View(a ledger.Application, full bool) api.ApplicationView {
	v := ViewApplication(a, full)
	c.withMeasurement(&v, a.Raw)
	if len(a.Certificate) > 0 {
		if cert, err := protocol.OpenCertificate(a.Certificate, c.trust); err == nil {
			v.CertificateSerial, v.CertificateExpires = cert.Serial, cert.ExpiresAt
		}
	}
	if due := c.decisionDue(a); !due.IsZero() {
		now := c.clock.Now()
		v.DecisionDue = due
		v.AgeBusinessDays = c.cal.Age(reviewSince(a), now)
		v.Overdue = !now.Before(due)
	}
	return v
}

// SortByDue orders applications by their due date, soonest first; those awaiting no
// decision come last, oldest submitted first.
func SortByDue(v []api.ApplicationView) {
	sort.SliceStable(v, func(i, j int) bool {
		a, b := v[i].DecisionDue, v[j].DecisionDue
		switch {
		case a.IsZero() != b.IsZero():
			return !a.IsZero()
		case !a.Equal(b):
			return a.Before(b)
		}
		return v[i].SubmittedAt.Before(v[j].SubmittedAt)
	})
}

// remindEvery is how often the reminders are checked.
const remindEvery = time.Minute

// RemindLoop reminds the reviewers of applications whose decision is due within a
// business day, and of those overdue: each reminder once per review (kept in the ledger).
func (c *Coordinator) RemindLoop(ctx context.Context) {
	for {
		c.Remind(ctx)
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(remindEvery):
		}
	}
}

// Remind sends the reminders that are due now and returns how many it sent.
func (c *Coordinator) Remind(ctx context.Context) int {
	ids := c.queue.openIDs()
	sort.Strings(ids)
	now := c.clock.Now()
	sent := 0
	for _, id := range ids {
		a, err := c.applications.GetApplication(id)
		if err != nil {
			c.log.Warn("reminders: the application cannot be read", "application", id, "err", err)
			continue
		}
		due := c.decisionDue(a)
		if due.IsZero() {
			continue
		}
		kind := ""
		switch {
		case !now.Before(due) && a.Reminded != "overdue":
			kind = "overdue"
		case a.Reminded == "" && !now.Before(c.dueSoon(a)):
			kind = "due-soon"
		}
		if kind == "" {
			continue
		}
		c.mu.Lock()
		updated, err := c.update(a.ID, func(u *ledger.Application) error {
			if u.Status != a.Status || !reviewSince(*u).Equal(reviewSince(a)) || u.Reminded == kind {
				return errStale
			}
			u.Reminded = kind
			u.Events = append(u.Events, ledger.Event{At: now, Actor: "coordinator", Action: "reminded", Detail: kind + ": decision due " + due.UTC().Format(time.RFC3339)})
			return nil
		})
		c.mu.Unlock()
		if err != nil {
			if err != errStale {
				c.log.Warn("reminders: the application cannot be updated", "application", a.ID, "err", err)
			}
			continue
		}
		c.remind(ctx, updated, kind, due, now)
		sent++
	}
	return sent
}

// dueSoon is when an application's decision becomes due within a business day: the
// start of its last business day.
func (c *Coordinator) dueSoon(a ledger.Application) time.Time {
	return c.cal.Due(reviewSince(a)).AddDate(0, 0, -1)
}

var errStale = fmt.Errorf("the application changed")

// remind tells the reviewers, by e-mail to coordinator.review.remind_email and by the
// webhook, and logs it.
func (c *Coordinator) remind(ctx context.Context, a ledger.Application, kind string, due, now time.Time) {
	age := c.cal.Age(reviewSince(a), now)
	subject := fmt.Sprintf("gpunex: application %s: decision due %s", a.ID, due.In(c.cal.loc).Format("Mon 2 Jan 15:04 MST"))
	if kind == "overdue" {
		subject = fmt.Sprintf("gpunex: application %s is overdue (due %s)", a.ID, due.In(c.cal.loc).Format("Mon 2 Jan 15:04 MST"))
	}
	body := fmt.Sprintf("Application %s from provider %s has waited %d business days for a decision (since %s); it is due %s.\n\n"+
		"Review it: gpunex coordinator applications show %s\n", a.ID, a.Provider, age, reviewSince(a).In(c.cal.loc).Format(time.DateTime),
		due.In(c.cal.loc).Format(time.DateTime+" MST"), a.ID)
	event := map[string]any{"reminder": kind, "application": a.ID, "provider": a.Provider, "status": a.Status,
		"decision_due": due.UTC(), "age_business_days": age, "at": now.UTC()}
	c.log.Warn("application review "+map[string]string{"overdue": "overdue", "due-soon": "due within a business day"}[kind], "application", a.ID, "due", due)
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := c.out.Send(ctx, notify.Notice{To: c.cfg.Review.RemindEmail, Subject: subject, Body: body, Event: event}); err != nil {
			c.log.Warn("reminder not delivered", "application", a.ID, "err", err)
		}
	}()
}
