package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
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
	if err := l.SetOwnCertificate(testCertificate(t, testCoordinatorKey, h.ID(), []protocol.CertifiedGPU{{Model: "H100-80GB", Count: 1}}, fake.Now())); err != nil {
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
	var lastSeq uint64
	next := func(what string) (withdrawn string, gpus int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for i := 1; time.Now().Before(deadline); i++ {
			if so := n.publisher.Current(); so != nil && so.Offer.Seq > lastSeq {
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
