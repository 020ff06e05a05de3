package offers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// benchResults are the provider's benchmark results as the publisher sees them.
type benchResults struct {
	latest   *protocol.SignedAttestation
	delisted map[string]int
}

func (b benchResults) Latest() *protocol.SignedAttestation { return b.latest }
func (b benchResults) Delisted() map[string]int            { return b.delisted }

// newPublisher is the world's node as a provider declaring 4 L4s at 1.50 and 2 A100s at
// 3.00 in region "EU-West", available as windows says (none: 24/7), certified for approved.
func newPublisher(t *testing.T, w *world, approved []protocol.CertifiedGPU, windows ...string) *Publisher {
	t.Helper()
	if approved != nil {
		me := provider{key: w.key, id: w.peer.ID}
		if err := w.ledger.Applicant.SetOwnCertificate(testCertificate(t, testCoordinatorKey, me.id, approved, w.clock.Now())); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Defaults(config.RoleProvider)
	cfg.Provider = config.ProviderConfig{Region: "EU-West", Availability: config.AvailabilityConfig{Timezone: "UTC", Windows: windows},
		GPUs: []config.GPUConfig{{Model: "l4-24gb", Count: 4, VRAMGB: 24, PriceUSDC: "1.50"}, {Model: "A100-80GB", Count: 2, VRAMGB: 80, PriceUSDC: "3.00"}}}
	p, err := NewPublisher(PublisherDeps{Base: subsystem.Base{Peer: w.peer, Metrics: w.metrics, Log: quietLogger(), Clock: w.clock}, Own: w.ledger.Provider, Applicant: w.ledger.Applicant, Catalogue: w.cat,
		Provider: cfg.Provider, Offers: cfg.Offers})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func offered(o protocol.Offer) string {
	var out []string
	for _, g := range o.GPUs {
		out = append(out, fmt.Sprintf("%d x %s at %s", g.Count, g.Model, g.PricePerGPUHour))
	}
	return strings.Join(out, ", ")
}

// TestPublisherOffersWhatIsCertified: the offer carries the declared GPUs at their
// configured prices, no more of a model than the certificate approves and none of a model
// it does not list, in the normalised region; a price set while running replaces the
// configured one and is published at once; a price for an undeclared model or out of range
// is refused.
func TestPublisherOffersWhatIsCertified(t *testing.T) {
	w := newWorld(t)
	p := newPublisher(t, w, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}})
	o, err := p.build(w.clock.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := offered(o); got != "2 x L4-24GB at 1.50" || o.Region != "eu-west" || o.Availability != "24/7" || o.Withdrawn != "" {
		t.Fatalf("the offer: %s in %s, %s, withdrawn %q", got, o.Region, o.Availability, o.Withdrawn)
	}
	if !o.ExpiresAt.Equal(o.IssuedAt.Add(p.cfg.TTL.Duration)) || len(o.Addrs) == 0 {
		t.Fatalf("the offer's validity or addresses: %s to %s, %v", o.IssuedAt, o.ExpiresAt, o.Addrs)
	}
	so, err := p.SetPrice(context.Background(), "l4-24gb", 1_200_000)
	if err != nil {
		t.Fatal(err)
	}
	if got := offered(so.Offer); got != "2 x L4-24GB at 1.20" || p.Current() != so {
		t.Fatalf("after a price change: %s", got)
	}
	if held, _ := w.book.Get(w.peer.ID); held != so {
		t.Fatal("the published offer is not in the node's own book")
	}
	if _, err := p.SetPrice(context.Background(), "H100-80GB", 1_000_000); !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("a price for an undeclared model: %v", err)
	}
	for _, bad := range []protocol.MicroUSDC{0, -1, protocol.MaxPricePerGPUHour + 1} {
		if _, err := p.SetPrice(context.Background(), "L4-24GB", bad); !errors.Is(err, ErrBadPrice) {
			t.Errorf("price %d: %v", bad, err)
		}
	}
	// The certificate now approves the A100s too.
	if err := w.ledger.Applicant.SetOwnCertificate(testCertificate(t, testCoordinatorKey, w.peer.ID,
		[]protocol.CertifiedGPU{{Model: "L4-24GB", Count: 8}, {Model: "A100-80GB", Count: 2}}, w.clock.Now())); err != nil {
		t.Fatal(err)
	}
	o, _ = p.build(w.clock.Now(), "")
	if got := offered(o); got != "4 x L4-24GB at 1.20, 2 x A100-80GB at 3.00" {
		t.Fatalf("with both models approved: %s", got)
	}
	p.Withdraw(context.Background(), "provider shutting down")
	if cur := p.Current(); cur.Offer.Withdrawn != "provider shutting down" || len(cur.Offer.GPUs) != 0 {
		t.Fatalf("after the withdrawal: %+v", cur.Offer)
	}
	if _, err := p.SetPrice(context.Background(), "L4-24GB", 1_000_000); !errors.Is(err, errShuttingDown) {
		t.Fatalf("a price change after the withdrawal: %v", err)
	}
}

// TestPublisherWithdraws: outside its availability the offer is withdrawn and says when the
// GPUs are back; GPUs under a benchmark threshold are left out, and a host under the
// minimum withdraws the whole offer; without a valid certificate nothing is published.
func TestPublisherWithdraws(t *testing.T) {
	w := newWorld(t)
	p := newPublisher(t, w, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}}, "mon-fri 08:00-20:00")
	w.clock.Advance(12 * time.Hour) // Monday 21:00 UTC
	o, err := p.build(w.clock.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	if o.Withdrawn != "outside availability window; back at 2026-12-01T08:00:00Z" || len(o.GPUs) != 0 {
		t.Fatalf("at night: withdrawn %q, %s", o.Withdrawn, offered(o))
	}
	if o.Availability != "mon-fri 08:00-20:00 (UTC)" {
		t.Fatalf("the availability announced: %q", o.Availability)
	}
	w.clock.Advance(12 * time.Hour) // Tuesday 09:00
	p.UseAttestations(benchResults{delisted: map[string]int{"L4-24GB": 1}})
	if o, _ = p.build(w.clock.Now(), ""); offered(o) != "3 x L4-24GB at 1.50" {
		t.Fatalf("with one GPU delisted: %s", offered(o))
	}
	p.UseAttestations(benchResults{delisted: map[string]int{"L4-24GB": 4}})
	if o, _ = p.build(w.clock.Now(), ""); o.Withdrawn != "no GPU approved by the certificate and passing the benchmarks" {
		t.Fatalf("with every GPU delisted: %q", o.Withdrawn)
	}
	slowHost := &protocol.SignedAttestation{Attestation: protocol.Attestation{HostBelow: "link 95/940 Mbit/s under the 100 Mbit/s minimum"},
		Challenge: &protocol.Challenge{IssuedAt: w.clock.Now()}}
	p.UseAttestations(benchResults{latest: slowHost})
	if o, _ = p.build(w.clock.Now(), ""); !strings.HasPrefix(o.Withdrawn, "delisted: link 95/940") {
		t.Fatalf("a host under the minimum: %q", o.Withdrawn)
	}

	// Revoked: nothing is published.
	if err := w.cat.TakeRevocation(w.revocation(testCoordinatorKey, provider{id: w.peer.ID}, 0), "gossip"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.build(w.clock.Now(), ""); !errors.Is(err, errNotCertified) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("with the certificate revoked: %v", err)
	}
	if err := w.ledger.Applicant.SetOwnCertificate(nil); err != nil {
		t.Fatal(err)
	}
	if err := p.publish(context.Background()); !errors.Is(err, errNotCertified) {
		t.Fatalf("with no certificate: %v", err)
	}
}

// TestMaintenance: a window is planned ahead and at most 7 days long, a rule is read as
// documented, not both at once; the offer announces the windows not over yet within the
// horizon, earliest first, at most protocol.MaxMaintenanceWindows; a window removed is no
// longer announced.
func TestMaintenance(t *testing.T) {
	w := newWorld(t)
	p := newPublisher(t, w, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}})
	now := w.clock.Now()
	for _, c := range []struct {
		m    ledger.Maintenance
		want string
	}{
		{ledger.Maintenance{From: now.Add(time.Hour), To: now.Add(time.Hour)}, "to must be after from"},
		{ledger.Maintenance{From: now.Add(time.Hour), To: now.Add(8 * 24 * time.Hour)}, "at most"},
		{ledger.Maintenance{From: now.Add(-2 * time.Hour), To: now.Add(-time.Hour)}, "already over"},
		{ledger.Maintenance{From: now.Add(time.Hour), To: now.Add(2 * time.Hour), Rule: "first sunday 02:00 2h"}, "either a window"},
		{ledger.Maintenance{Rule: "every day at noon"}, ""},
		{ledger.Maintenance{From: now.Add(time.Hour), To: now.Add(2 * time.Hour), Note: strings.Repeat("x", 201)}, "note"},
	} {
		if _, err := p.AddMaintenance(c.m); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an invalid request naming %q", c.m, err, c.want)
		}
	}
	psu, err := p.AddMaintenance(ledger.Maintenance{From: now.Add(48 * time.Hour), To: now.Add(50 * time.Hour), Note: "new PSU"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.AddMaintenance(ledger.Maintenance{Rule: "first sunday 02:00 2h Europe/Paris", Note: "monthly"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AddMaintenance(ledger.Maintenance{From: now.Add(70 * 24 * time.Hour), To: now.Add(71 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	o, _ := p.build(now, "")
	var got []string
	for _, m := range o.Maintenance {
		got = append(got, m.From.Format("2006-01-02 15:04")+" "+m.Note)
	}
	// Within 62 days of Monday 30 November: the PSU, then the first Sundays of December and
	// January at 02:00 in Paris (01:00 UTC); not the window 70 days ahead.
	if s := strings.Join(got, "; "); s != "2026-12-02 09:00 new PSU; 2026-12-06 01:00 monthly; 2027-01-03 01:00 monthly" {
		t.Fatalf("maintenance announced: %s", s)
	}
	if err := p.RemoveMaintenance(psu.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveMaintenance(psu.ID); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("removing it twice: %v", err)
	}
	for i := range protocol.MaxMaintenanceWindows + 4 {
		from := now.Add(time.Duration(i+1) * 24 * time.Hour)
		if _, err := p.AddMaintenance(ledger.Maintenance{From: from, To: from.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	ws := p.MaintenanceWindows(now)
	if len(ws) != protocol.MaxMaintenanceWindows || !ws[0].From.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("%d windows announced, the first at %s", len(ws), ws[0].From)
	}
}

// TestPublisherFollowsItsSchedule: a running publisher withdraws its offer when its
// availability window closes and offers its GPUs again when it opens, without waiting for
// the republish interval. Once Run has returned, nothing of the publisher touches the peer
// any more, so that the peer can close (under -race, the gossip-peer watcher still running
// after Run raced the topic's close).
func TestPublisherFollowsItsSchedule(t *testing.T) {
	w := newWorld(t)
	p := newPublisher(t, w, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}}, "mon-fri 08:00-20:00")
	p.cfg.Republish.Duration = 6 * time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// until moves the clock 10 minutes at a time until the offer published satisfies ok.
	until := func(what string, ok func(o protocol.Offer) bool) protocol.Offer {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if cur := p.Current(); cur != nil && ok(cur.Offer) {
				return cur.Offer
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s at %s", what, w.clock.Now())
			}
			time.Sleep(10 * time.Millisecond) // the loop waits on the clock again
			if cur := p.Current(); cur != nil && !ok(cur.Offer) {
				w.clock.Advance(10 * time.Minute)
			}
		}
	}
	first := until("the first offer", func(o protocol.Offer) bool { return len(o.GPUs) == 1 })
	closed := until("the withdrawal at 20:00", func(o protocol.Offer) bool { return o.Withdrawn != "" })
	at := func(h int) time.Time { return time.Date(2026, 11, 30, h, 0, 0, 0, time.UTC) }
	if !first.IssuedAt.Before(at(10)) || closed.IssuedAt.Before(at(20)) || !closed.IssuedAt.Before(at(20).Add(30*time.Minute)) ||
		!strings.HasPrefix(closed.Withdrawn, "outside availability window") {
		t.Fatalf("offered at %s, withdrawn at %s (%q)", first.IssuedAt, closed.IssuedAt, closed.Withdrawn)
	}
	back := until("the GPUs offered again on Tuesday", func(o protocol.Offer) bool { return o.Withdrawn == "" })
	if tuesday := at(8).AddDate(0, 0, 1); back.IssuedAt.Before(tuesday) || !back.IssuedAt.Before(tuesday.Add(30*time.Minute)) {
		t.Fatalf("offered again at %s", back.IssuedAt)
	}
}

// TestTrustStore: a certificate's signature is checked once, but its expiry at every offer;
// a revocation by a coordinator no longer trusted has no effect after a restart.
func TestTrustStore(t *testing.T) {
	w := newWorld(t)
	p := w.certified() // valid 30 days
	if _, _, err := w.book.Accept(w.offer(p, 1, 1_000_000, nil), "gossip"); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(30 * 24 * time.Hour)
	if _, _, err := w.book.Accept(w.offer(p, 2, 1_000_000, nil), "gossip"); protocol.Reason(err) != "expired" {
		t.Fatalf("an offer carrying a certificate expired since it was first checked: %v", err)
	}
	q := w.certified()
	if err := w.cat.TakeRevocation(w.revocation(testCoordinatorKey, q, 0), "gossip"); err != nil {
		t.Fatal(err)
	}
	other, _ := recordtest.NewKey()
	otherID, _ := peer.IDFromPrivateKey(other)
	trust, err := NewTrust(w.ledger.Offers, []peer.ID{otherID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := protocol.OpenCertificate(q.cert, nil)
	if trust.RevocationOf(cert) != nil || len(trust.Revocations()) != 0 {
		t.Fatal("a revocation by a coordinator no longer trusted still counts")
	}
}

// TestPublisherUnheard: a provider's offer is unheard while one of the topics it travels on
// (its certified model's, the previous release's) has no gossip peer, whatever the topics
// of models it is not certified for have; the node then dials its coordinators
// (p2p.Joined.Unheard).
func TestPublisherUnheard(t *testing.T) {
	w, coord, stranger := newWorld(t), newWorld(t), newWorld(t)
	w.cat.boot = []peer.AddrInfo{{ID: coord.peer.ID}}
	p := newPublisher(t, w, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}})
	if p.Unheard() {
		t.Fatal("unheard before anything was published")
	}
	if _, err := p.SetPrice(context.Background(), "L4-24GB", 1_200_000); err != nil {
		t.Fatal(err)
	}
	if !p.Unheard() {
		t.Fatal("an offer published with no peer counts as heard")
	}
	waitHeard := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); p.Unheard() == want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("heard: %v, want %v (gossip peers %v)", !p.Unheard(), want, w.peer.GossipPeerCounts())
			}
		}
	}
	// A stranger following every topic the offer travels on does not count.
	stranger.follows(t)
	if err := stranger.cat.Follow([]string{"L4-24GB"}); err != nil {
		t.Fatal(err)
	}
	w.connect(stranger)
	for deadline := time.Now().Add(5 * time.Second); w.peer.GossipPeerCounts()[protocol.ModelTopic("L4-24GB")] == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stranger's subscription never reached the provider")
		}
	}
	if !p.Unheard() {
		t.Fatal("heard by a stranger counts as heard by the coordinator")
	}
	// The coordinator follows the L4 topic only: the previous release's has no coordinator yet.
	if err := coord.cat.Follow([]string{"L4-24GB"}); err != nil {
		t.Fatal(err)
	}
	w.connect(coord)
	for deadline := time.Now().Add(5 * time.Second); !w.peer.GossipsWith(coord.peer.ID)[protocol.ModelTopic("L4-24GB")]; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the coordinator's subscription never reached the provider")
		}
	}
	if !p.Unheard() {
		t.Fatal("heard with the coordinator not on the previous release's topic")
	}
	// Following the previous release's topic too, the coordinator hears every topic the
	// offer travels on; the A100 topic (not certified) stays unpeered and does not count.
	if err := coord.cat.FollowPrevious(); err != nil {
		t.Fatal(err)
	}
	waitHeard(true)
	if n := w.peer.GossipPeerCounts()[protocol.ModelTopic("A100-80GB")]; n != 0 {
		t.Fatalf("the A100 topic has %d gossip peers", n)
	}
}
