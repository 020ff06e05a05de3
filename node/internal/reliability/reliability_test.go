package reliability

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// heldOffers are the offers a coordinator holds, by provider.
type heldOffers map[peer.ID]*protocol.SignedOffer

func (h heldOffers) Get(p peer.ID) (*protocol.SignedOffer, time.Time) { return h[p], time.Time{} }

// probeLog records the probes sent, with the fake time of each, and misses those of the
// providers marked down.
type probeLog struct {
	mu    sync.Mutex
	clock clock.Clock
	at    map[peer.ID][]time.Time
	down  map[peer.ID]bool
}

func newProbeLog(clk clock.Clock) *probeLog {
	return &probeLog{clock: clk, at: map[peer.ID][]time.Time{}, down: map[peer.ID]bool{}}
}

func (l *probeLog) probe(_ context.Context, p peer.ID) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at[p] = append(l.at[p], l.clock.Now())
	if l.down[p] {
		return errors.New("no answer")
	}
	return nil
}

func (l *probeLog) times(p peer.ID) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at[p]...)
}

// scoresSent records the score records the scorer publishes.
type scoresSent struct {
	mu  sync.Mutex
	raw [][]byte
}

func (s *scoresSent) publish(_ context.Context, raw []byte) error {
	s.mu.Lock()
	s.raw = append(s.raw, raw)
	s.mu.Unlock()
	return nil
}

func (s *scoresSent) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.raw)
}

// latest checks the newest record published, at now, as a node taking it would.
func (s *scoresSent) latest(t *testing.T, coordinator peer.ID, now time.Time) *protocol.SignedScore {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.raw) == 0 {
		t.Fatal("no score record published")
	}
	r, err := protocol.CheckScore(s.raw[len(s.raw)-1], now, protocol.NewTrust(coordinator))
	if err != nil {
		t.Fatalf("the score record published: %v", err)
	}
	return r
}

func offerWith(availability string, maintenance ...protocol.MaintenanceWindow) *protocol.SignedOffer {
	return &protocol.SignedOffer{Offer: protocol.Offer{Availability: availability, Maintenance: maintenance}}
}

// TestProbesFollowTheDeclaredSchedule: over a week of the fake clock, a provider declaring
// "mon-fri 08:00-20:00 (Europe/Paris)" is probed only on weekdays between 8:00 and 20:00 in
// Paris, about once per interval; one declaring 24/7 with a maintenance window is never probed
// inside the window; one the coordinator holds no offer of is probed around the clock. None
// of them loses score for the hours it owes nothing.
func TestProbesFollowTheDeclaredSchedule(t *testing.T) {
	const every = 5 * time.Minute
	s := newSimulated(t, 3, 0, every)
	office, maintained, unknown := s.providers[0], s.providers[1], s.providers[2]
	start := s.clock.Now() // Tuesday 2026-12-01 00:00 UTC
	window := protocol.MaintenanceWindow{From: start.Add(26 * time.Hour), To: start.Add(30 * time.Hour), Note: "new PSU"}
	s.sc.offers = heldOffers{office: offerWith("mon-fri 08:00-20:00 (Europe/Paris)"), maintained: offerWith("24/7", window)}
	log := newProbeLog(s.clock)
	s.sc.probeFn = log.probe
	s.run(7*24*time.Hour, time.Minute)

	paris, _ := time.LoadLocation("Europe/Paris")
	officeProbes := log.times(office)
	for _, at := range officeProbes {
		local := at.In(paris)
		if wd := local.Weekday(); wd == time.Saturday || wd == time.Sunday || local.Hour() < 8 || local.Hour() >= 20 {
			t.Fatalf("the office-hours provider probed at %s", local.Format("Mon 15:04 MST"))
		}
	}
	// 5 days of 12 hours at one probe per 5 minutes: 720.
	if n := len(officeProbes); n < 600 || n > 840 {
		t.Fatalf("the office-hours provider was probed %d times in its 60 hours; want about 720", n)
	}
	for _, at := range log.times(maintained) {
		if !at.Before(window.From) && at.Before(window.To) {
			t.Fatalf("probed at %s, inside the maintenance window", at)
		}
	}
	if n := len(log.times(unknown)); n < 1700 || n > 2350 {
		t.Fatalf("the provider of no offer was probed %d times in a week; want about 2016", n)
	}
	for _, p := range s.providers {
		st, _ := s.sc.reliability.UpdateReliability(p.String(), func(*ledger.ReliabilityState) error { return nil })
		if st.LastScore < 90 || st.EventsTotal != 0 {
			t.Fatalf("a provider that answered every probe it owed: score %d, events %v", st.LastScore, st.Events)
		}
	}
}

// TestScoreRecords: the first probe's score is signed at once; a steady provider's is not
// signed again at each probe, a miss that moves the score is, with the trend and the
// reason; a record about to expire is replaced. A probe outside the declared hours or in
// maintenance counts nothing.
func TestScoreRecords(t *testing.T) {
	s := newSimulated(t, 1, 0, 5*time.Minute)
	p := s.providers[0]
	offers := heldOffers{p: offerWith("24/7")}
	s.sc.offers = offers
	log := newProbeLog(s.clock)
	s.sc.probeFn = log.probe
	sent := &scoresSent{}
	s.sc.publishFn = sent.publish
	ctx := context.Background()
	probe := func() { s.sc.probeOne(ctx, p); s.clock.Advance(5 * time.Minute) }

	probe()
	first := sent.latest(t, s.sc.id, s.clock.Now())
	if sent.count() != 1 || first.Provider != p.String() || first.Probes <= 0 || first.Trend != 0 {
		t.Fatalf("after the first probe: %d records", sent.count())
	}
	if !first.ExpiresAt.Equal(first.IssuedAt.Add(protocol.ScoreTTL)) {
		t.Fatalf("the record expires at %s, issued %s", first.ExpiresAt, first.IssuedAt)
	}
	// A provider answering every probe: its score climbs from the prior, one record per
	// point it gains or per ScoreRefresh, not one per probe.
	halfLife := s.sc.cfg.HalfLife.Duration
	const probes = 48
	for i := range probes {
		before := sent.count()
		now := s.clock.Now()
		prev, _ := s.sc.reliability.UpdateReliability(p.String(), func(*ledger.ReliabilityState) error { return nil })
		probe()
		st, _ := s.sc.reliability.UpdateReliability(p.String(), func(*ledger.ReliabilityState) error { return nil })
		score := st.Reliability.Score(now, halfLife)
		worth := score-prev.LastScore >= ScoreStep || prev.LastScore-score >= ScoreStep || now.Sub(prev.LastPublished) >= ScoreRefresh
		if published := sent.count() > before; published != worth {
			t.Fatalf("probe %d: score %d after %d published %s ago: published %v", i+2, score, prev.LastScore, now.Sub(prev.LastPublished), published)
		}
	}
	if n := sent.count(); n > probes/3 {
		t.Fatalf("a provider answering every probe had its score signed %d times in %d probes", n, probes+1)
	}
	steady := sent.latest(t, s.sc.id, s.clock.Now())
	log.down[p] = true
	probe()
	last := sent.latest(t, s.sc.id, s.clock.Now())
	if last.Seq == steady.Seq || last.Trend >= 0 || last.Score >= steady.Score || len(last.Why) != 1 || !strings.HasPrefix(last.Why[0], "missed probe ") {
		t.Fatalf("after a missed probe: %+v", last.ScoreRecord)
	}

	// Maintenance, then night hours of a schedule: not probed, nothing counted.
	offers[p] = offerWith("24/7", protocol.MaintenanceWindow{From: s.clock.Now().Add(-time.Minute), To: s.clock.Now().Add(time.Hour)})
	before := len(log.times(p))
	stBefore, _ := s.sc.reliability.UpdateReliability(p.String(), func(*ledger.ReliabilityState) error { return nil })
	probe()
	offers[p] = offerWith("mon-fri 08:00-09:00")
	probe()
	st, _ := s.sc.reliability.UpdateReliability(p.String(), func(*ledger.ReliabilityState) error { return nil })
	if len(log.times(p)) != before || st.EventsTotal != stBefore.EventsTotal {
		t.Fatalf("probed %d times in maintenance and outside the declared hours", len(log.times(p))-before)
	}

	// Back, steady: the record is signed again before it expires.
	log.down[p] = false
	offers[p] = offerWith("24/7")
	for s.clock.Now().Before(last.ExpiresAt) {
		probe()
	}
	if newest := sent.latest(t, s.sc.id, s.clock.Now()); newest.Seq == last.Seq {
		t.Fatalf("the record of %s was not replaced before it expired", last.IssuedAt)
	}
}

// TestBenchmarkConsistency: a GPU benchmarked again at 60% of its first score lowers the
// consistency component and says which GPU; the same attestation seen again changes nothing.
func TestBenchmarkConsistency(t *testing.T) {
	s := newSimulated(t, 1, 0, 5*time.Minute)
	p := s.providers[0]
	attested := func(seq uint64, perf int) *protocol.SignedOffer {
		o := offerWith("24/7")
		o.Attest = &protocol.SignedAttestation{Attestation: protocol.Attestation{Seq: seq, GPUs: []protocol.GPUBenchmark{{UUID: "GPU-1", PerfScore: perf}}}}
		return o
	}
	offers := heldOffers{p: attested(1, 90)}
	s.sc.offers = offers
	s.sc.probeFn = newProbeLog(s.clock).probe
	state := func() ledger.ReliabilityState {
		st, _ := s.sc.reliability.UpdateReliability(p.String(), func(*ledger.ReliabilityState) error { return nil })
		return st
	}
	s.sc.probeOne(context.Background(), p)
	s.clock.Advance(time.Hour)
	good := state().Reliability.Consistency.Ratio(s.clock.Now(), s.sc.cfg.HalfLife.Duration)
	offers[p] = attested(2, 54)
	s.sc.probeOne(context.Background(), p)
	st := state()
	if r := st.Reliability.Consistency.Ratio(s.clock.Now(), s.sc.cfg.HalfLife.Duration); r >= good || st.FirstPerf["GPU-1"] != 90 {
		t.Fatalf("consistency %.3f after a run at 60%% (was %.3f), first score %d", r, good, st.FirstPerf["GPU-1"])
	}
	if len(st.Events) != 1 || st.Events[0] != protocol.WhySlowerGPU("GPU-1", 60) {
		t.Fatalf("events: %q", st.Events)
	}
	w := st.Reliability.Consistency.Weight(s.clock.Now(), s.sc.cfg.HalfLife.Duration)
	s.sc.probeOne(context.Background(), p)
	if w2 := state().Reliability.Consistency.Weight(s.clock.Now(), s.sc.cfg.HalfLife.Duration); w2 != w {
		t.Fatalf("the same attestation counted twice: weight %.2f then %.2f", w, w2)
	}
}

// TestUptimeProbeOverTheNetwork: a provider answers a trusted coordinator's probe with a
// proof the coordinator checks, and refuses an untrusted one's; the scorer probes the
// providers whose application its ledger holds approved.
func TestUptimeProbeOverTheNetwork(t *testing.T) {
	newPeer := func(sk crypto.PrivKey) *p2p.Peer {
		p, err := p2p.New(p2p.Options{Key: sk, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, OfferValidator: acceptAll{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	coordKey, coordID := recordtest.NewKey()
	provKey, _ := recordtest.NewKey()
	strangerKey, _ := recordtest.NewKey()
	cp, pp, sp := newPeer(coordKey), newPeer(provKey), newPeer(strangerKey)
	answered := 0
	pp.Handle(protocol.UptimeProtocol, UptimeHandler(pp, clock.System(), protocol.NewTrust(coordID), func() { answered++ }))
	for _, x := range []*p2p.Peer{cp, sp} {
		if err := x.Host.Connect(context.Background(), peer.AddrInfo{ID: pp.ID, Addrs: pp.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Applications.PutApplication(ledger.Application{ID: "0123456789ab", Provider: pp.ID.String(), Status: protocol.StatusApproved}); err != nil {
		t.Fatal(err)
	}
	if err := l.Applications.PutApplication(ledger.Application{ID: "0123456789ac", Provider: sp.ID.String(), Status: protocol.StatusRejected}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(nil, nil)
	cfg := newSimulated(t, 0, 0, time.Minute).sc.cfg
	sc := NewScorer(ScorerDeps{Base: subsystem.Base{Peer: cp, Clock: clock.System(), Log: quietLogger(), Metrics: m}, Reliability: l.Reliability, Applications: l.Applications, Serials: l.Serials, Coordinator: cfg,
		Offers: heldOffers{}, Publish: (&scoresSent{}).publish})
	if ps, err := sc.providersFn(); err != nil || len(ps) != 1 || ps[0] != pp.ID {
		t.Fatalf("the providers probed: %v %v", ps, err)
	}
	sc.probeOne(context.Background(), pp.ID)
	if answered != 1 || testutil.ToFloat64(m.UptimeProbes.WithLabelValues("answered")) != 1 {
		t.Fatalf("the trusted coordinator's probe: answered %d", answered)
	}
	stranger := NewScorer(ScorerDeps{Base: subsystem.Base{Peer: sp, Clock: clock.System(), Log: quietLogger()}, Reliability: l.Reliability, Applications: l.Applications, Serials: l.Serials, Coordinator: cfg,
		Offers: heldOffers{}, Publish: (&scoresSent{}).publish})
	if err := stranger.probe(context.Background(), pp.ID); err == nil || answered != 1 {
		t.Fatalf("an untrusted coordinator's probe: %v, answered %d", err, answered)
	}
}

// TestBookRefusesWhatItShould: the score book refuses an untrusted coordinator's record
// (ignored by gossip) and a forged one (rejected), tells the node of each record taken, and
// stops listing a record once it expires.
func TestBookRefusesWhatItShould(t *testing.T) {
	aKey, a := recordtest.NewKey()
	strangerKey, stranger := recordtest.NewKey()
	_, prov := recordtest.NewKey()
	clk := clock.NewFake(time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC))
	book := NewBook(clk, metrics.New(nil, nil), protocol.NewTrust(a))
	var taken []int
	book.OnTake(func(s *protocol.SignedScore) { taken = append(taken, s.Score) })
	record := func(key crypto.PrivKey, by peer.ID, seq uint64, score int) []byte {
		raw, err := protocol.Seal(protocol.KindScore, protocol.ScoreRecord{Version: protocol.ScoreVersion, Coordinator: by.String(),
			Provider: prov.String(), Seq: seq, IssuedAt: clk.Now(), ExpiresAt: clk.Now().Add(time.Hour), Score: score}, key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	if v := book.Validate(context.Background(), stranger, record(strangerKey, stranger, 1, 99)); v != p2p.Ignore {
		t.Fatalf("an untrusted coordinator's record: verdict %v", v)
	}
	forged := record(aKey, a, 1, 50)
	forged[len(forged)-3] ^= 1
	if v := book.Validate(context.Background(), a, forged); v != p2p.Reject {
		t.Fatalf("a forged record: verdict %v", v)
	}
	if v := book.Validate(context.Background(), a, record(aKey, a, 2, 80)); v != p2p.Accept {
		t.Fatalf("a trusted record: verdict %v", v)
	}
	if len(taken) != 1 || taken[0] != 80 || book.Score(prov, stranger) != nil {
		t.Fatalf("records taken: %v", taken)
	}
	clk.Advance(time.Hour)
	if book.Score(prov, a) != nil || len(book.Scores()) != 0 {
		t.Fatal("an expired record is still listed")
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type acceptAll struct{}

func (acceptAll) Validate(string, []byte) error        { return nil }
func (acceptAll) Select(string, [][]byte) (int, error) { return 0, nil }

// TestAnsweredProbeCatchesUpTheOffer: after a provider answers a probe, the coordinator makes
// sure it holds the provider's offer (offers.Catalogue.CatchUp); after a missed probe it
// does not try (the provider is not there to ask).
func TestAnsweredProbeCatchesUpTheOffer(t *testing.T) {
	s := newSimulated(t, 2, 2, 5*time.Minute) // the first provider misses every probe
	var caughtUp []peer.ID
	s.sc.catchUp = func(_ context.Context, p peer.ID) bool { caughtUp = append(caughtUp, p); return true }
	for _, p := range s.providers {
		s.sc.probeOne(context.Background(), p)
	}
	if len(caughtUp) != 1 || caughtUp[0] != s.providers[1] {
		t.Fatalf("offers caught up after probes of %v: %v, want the answering provider's only", s.providers, caughtUp)
	}
}
