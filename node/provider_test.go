package node

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/calendar"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
)

// TestProviderFollowsSchedule: outside its windows a provider's offer is withdrawn (and
// says when it comes back); when a window opens it is offered again, without anyone acting.
func TestProviderFollowsSchedule(t *testing.T) {
	// Monday 2026-11-30 07:00 in Paris (06:00 UTC).
	paris, _ := time.LoadLocation("Europe/Paris")
	fake := clock.NewFake(time.Date(2026, 11, 30, 7, 0, 0, 0, paris))
	cfg := providerConfig(0)
	cfg.Provider.Availability = config.AvailabilityConfig{Timezone: "Europe/Paris", Windows: []string{"mon-fri 08:00-20:00"}}
	h, sk := newHost(t)
	defer h.Close()
	l, _ := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	defer l.Close()
	cfg.Trust.Coordinators = []string{testCoordinatorID.String()}
	if err := l.Applicant.SetOwnCertificate(testCertificate(t, testCoordinatorKey, h.ID(), []protocol.CertifiedGPU{{Model: "H100-80GB", Count: 1}}, fake.Now())); err != nil {
		t.Fatal(err)
	}
	n, err := New(context.Background(), cfg, sk, Deps{Host: h, Ledger: l, Clock: fake, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())

	// next waits for the next offer published. Other loops of the node wait on the same
	// clock, so the test cannot tell when the publisher is parked on its timer: when no new
	// offer comes, a timer set just after the test moved the clock is due one republish
	// interval later, and moving the clock by that much (which crosses no window boundary
	// here) lets it fire.
	// Only an offer built at or after the clock's last move counts: one built just before
	// (a publish already under way) says what held then.
	var lastSeq uint64
	next := func(what string) (withdrawn string, gpus int) {
		t.Helper()
		moved := fake.Now()
		deadline := time.Now().Add(5 * time.Second)
		for i := 1; time.Now().Before(deadline); i++ {
			if so := n.publisher.Current(); so != nil && so.Offer.Seq > lastSeq && !so.Offer.IssuedAt.Before(moved) {
				lastSeq = so.Offer.Seq
				return so.Offer.Withdrawn, len(so.Offer.GPUs)
			}
			time.Sleep(5 * time.Millisecond)
			if i%50 == 0 {
				fake.Advance(cfg.Offers.Republish.Duration)
			}
		}
		t.Fatalf("%s: no new offer published", what)
		return "", 0
	}
	w, g := next("before the window")
	if g != 0 || !strings.Contains(w, "outside availability window; back at 2026-11-30T07:00:00Z") {
		t.Fatalf("before the window: withdrawn=%q gpus=%d", w, g)
	}
	fake.Advance(time.Hour) // 08:00 Paris: the window opens
	if w, g := next("window open"); w != "" || g != 1 {
		t.Fatalf("in the window: withdrawn=%q gpus=%d", w, g)
	}
	fake.Advance(12 * time.Hour) // 20:00 Paris: it closes
	if w, g := next("window closed"); g != 0 || !strings.Contains(w, "back at 2026-12-01T07:00:00Z") {
		t.Fatalf("after the window: withdrawn=%q gpus=%d", w, g)
	}
	fake.Advance(12 * time.Hour) // Tuesday 08:00: open again
	if w, g := next("next morning"); w != "" || g != 1 {
		t.Fatalf("next morning: withdrawn=%q gpus=%d", w, g)
	}
	// A renter on the same clock sees it only while the window is open.
	if len(n.book.Live(fake.Now())) != 1 {
		t.Fatal("open offer not live in the provider's own book")
	}
}

// TestAvailabilityFromCalendar: a provider imports its availability from a calendar URL it
// follows. The new hours apply without a restart (the offer is announced again, open or
// withdrawn as they say), a change of the calendar is applied when the node reads it again,
// a calendar that no longer reads as weekly changes nothing and is reported, the setting
// survives a restart, and a reset goes back to the config's hours.
func TestAvailabilityFromCalendar(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	fake := clock.NewFake(time.Date(2026, 11, 30, 7, 0, 0, 0, paris)) // Monday 07:00 in Paris
	cfg := providerConfig(0)
	cfg.Provider.Availability = config.AvailabilityConfig{Timezone: "Europe/Paris", Windows: []string{"mon-fri 08:00-20:00"}}
	cfg.Trust.Coordinators = []string{testCoordinatorID.String()}
	h, sk := newHost(t)
	defer h.Close()
	l, _ := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	defer l.Close()
	if err := l.Applicant.SetOwnCertificate(testCertificate(t, testCoordinatorKey, h.ID(), []protocol.CertifiedGPU{{Model: "H100-80GB", Count: 1}}, fake.Now())); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	served := ""
	calendarServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "text/calendar")
		io.WriteString(w, served)
	}))
	defer calendarServer.Close()
	serve := func(events ...string) {
		mu.Lock()
		defer mu.Unlock()
		served = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\n"
		for _, e := range events {
			served += "BEGIN:VEVENT\r\n" + e + "END:VEVENT\r\n"
		}
		served += "END:VCALENDAR\r\n"
	}

	start := func() (*Node, *api.Client, func()) {
		n, err := New(context.Background(), cfg, sk, Deps{Host: h, Ledger: l, Clock: fake, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		home, _, err := config.Init(t.TempDir(), config.InitOptions{Role: config.RoleProvider})
		if err != nil {
			t.Fatal(err)
		}
		token, _ := home.Token()
		srv, err := n.ServeAPI("127.0.0.1:0", token)
		if err != nil {
			t.Fatal(err)
		}
		home.WriteAPIAddr(srv.Addr())
		cl, err := api.NewClient(home)
		if err != nil {
			t.Fatal(err)
		}
		return n, cl, func() { srv.Close(context.Background()); n.Close(context.Background()) }
	}
	n, cl, stop := start()
	ctx := context.Background()

	// waitOffer waits until the offer announced says what want says, moving the clock by
	// small steps while it waits (the node's loops sleep on it).
	waitOffer := func(what string, want func(o protocol.Offer) bool) protocol.Offer {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for i := 1; time.Now().Before(deadline); i++ {
			if so := n.publisher.Current(); so != nil && want(so.Offer) {
				return so.Offer
			}
			time.Sleep(5 * time.Millisecond)
			if i%20 == 0 {
				fake.Advance(5 * time.Minute)
			}
		}
		if so := n.publisher.Current(); so != nil {
			t.Fatalf("%s: the offer announces %q, withdrawn %q", what, so.Offer.Availability, so.Offer.Withdrawn)
		}
		t.Fatalf("%s: no offer", what)
		return protocol.Offer{}
	}
	waitOffer("config's hours", func(o protocol.Offer) bool { return strings.HasPrefix(o.Withdrawn, "outside availability window") })

	// The calendar opens the GPUs every day from 06:00 to 22:00: offered at once.
	serve("DTSTART;TZID=Europe/Paris:20261102T060000\r\nDTEND;TZID=Europe/Paris:20261102T220000\r\nRRULE:FREQ=DAILY\r\nSUMMARY:GPUs for rent\r\n")
	data, err := calendar.Read(ctx, calendarServer.URL)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := calendar.Weekly(data, fake.Now())
	if err != nil {
		t.Fatal(err)
	}
	v, err := cl.SetAvailability(ctx, api.Availability{Timezone: sched.Timezone(), Windows: sched.Windows(), Source: calendarServer.URL, Follow: "1h"})
	if err != nil || !v.OpenNow || v.FromConfig || v.Text != "daily 06:00-22:00 (Europe/Paris)" {
		t.Fatalf("set: %+v %v", v, err)
	}
	o := waitOffer("calendar's hours", func(o protocol.Offer) bool { return o.Withdrawn == "" && len(o.GPUs) == 1 })
	if o.Availability != "daily 06:00-22:00 (Europe/Paris)" {
		t.Fatalf("the offer announces %q", o.Availability)
	}
	if !n.publisher.Open(fake.Now()) {
		t.Fatal("jobs would be refused inside the calendar's hours")
	}

	// The calendar changes to weekends only: applied when the node reads it again.
	serve("DTSTART;TZID=Europe/Paris:20261107T000000\r\nDURATION:P2D\r\nRRULE:FREQ=WEEKLY;BYDAY=SA\r\n")
	o = waitOffer("calendar changed", func(o protocol.Offer) bool { return strings.HasPrefix(o.Withdrawn, "outside availability window") })
	if o.Availability != "sat,sun 00:00-24:00 (Europe/Paris)" || !strings.Contains(o.Withdrawn, "back at 2026-12-04T23:00:00Z") {
		t.Fatalf("after the calendar changed the offer is %q, %q", o.Availability, o.Withdrawn)
	}

	// A calendar that no longer reads as weekly changes nothing, and says why.
	serve("DTSTART:20261210T100000Z\r\nDURATION:PT2H\r\nSUMMARY:Open day\r\n")
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; ; i++ {
		if v, err = cl.Availability(ctx); err == nil && strings.Contains(v.Error, "does not repeat") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a broken calendar is not reported: %+v %v", v, err)
		}
		time.Sleep(5 * time.Millisecond)
		if i%20 == 0 {
			fake.Advance(5 * time.Minute)
		}
	}
	if v.Text != "sat,sun 00:00-24:00 (Europe/Paris)" || v.Checked.IsZero() || v.Source != calendarServer.URL || v.Follow != "1h0m0s" {
		t.Fatalf("after a broken calendar: %+v", v)
	}

	// Refused: hours that do not parse, following a file or a plain http URL elsewhere than
	// on this host, following too often.
	for _, bad := range []api.Availability{
		{Timezone: "Europe/Paris", Windows: []string{"mon 25:00-26:00"}},
		{Timezone: "Mars/Olympus", Windows: []string{"mon 10:00-12:00"}},
		{Timezone: "UTC", Windows: []string{"mon 10:00-12:00"}, Source: "/etc/cal.ics", Follow: "1h"},
		{Timezone: "UTC", Windows: []string{"mon 10:00-12:00"}, Source: "http://calendar.example.org/hours.ics", Follow: "1h"},
		{Timezone: "UTC", Windows: []string{"mon 10:00-12:00"}, Source: calendarServer.URL, Follow: "1m"},
	} {
		if _, err := cl.SetAvailability(ctx, bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", bad, err)
		}
	}

	// A restart keeps the calendar's hours.
	stop()
	n, cl, stop = start()
	defer func() { stop() }()
	if got := n.publisher.Schedule().String(); got != "sat,sun 00:00-24:00 (Europe/Paris)" {
		t.Fatalf("after a restart the availability is %s", got)
	}
	// Reset: back to the config's hours, the calendar no longer followed.
	if v, err = cl.ResetAvailability(ctx); err != nil || !v.FromConfig || v.Text != "mon-fri 08:00-20:00 (Europe/Paris)" || v.Follow != "" {
		t.Fatalf("reset: %+v %v", v, err)
	}
	waitOffer("reset", func(o protocol.Offer) bool { return o.Availability == "mon-fri 08:00-20:00 (Europe/Paris)" })
}
