package reliability

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// noOffers: the coordinator holds no offer of the simulated providers (they owe uptime 24/7).
type noOffers struct{}

func (noOffers) Get(peer.ID) (*protocol.SignedOffer, time.Time) { return nil, time.Time{} }

// simulated is a coordinator's scorer over n simulated providers: an in-memory prober (the
// providers whose index is a multiple of downEvery miss every probe; 0: none) and a counting
// publisher, on a fake clock.
type simulated struct {
	sc        *Scorer
	clock     *clock.Fake
	providers []peer.ID
	probes    atomic.Int64
	published atomic.Int64
	down      map[peer.ID]bool
}

func newSimulated(t testing.TB, n, downEvery int, every time.Duration) *simulated {
	t.Helper()
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := &simulated{clock: clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), down: map[peer.ID]bool{}}
	for i := range n {
		_, pub, _ := crypto.GenerateEd25519Key(rand.Reader)
		id, _ := peer.IDFromPublicKey(pub)
		s.providers = append(s.providers, id)
		if downEvery > 0 && i%downEvery == 0 {
			s.down[id] = true
		}
	}
	cfg := config.Defaults(config.RoleCoordinator).Coordinator
	cfg.ProbeInterval = config.Duration{Duration: every}
	s.sc = NewScorer(ScorerDeps{Reliability: l.Reliability, Applications: l.Applications, Serials: l.Serials, Base: subsystem.Base{Clock: s.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, Coordinator: cfg, Offers: noOffers{},
		Probe: func(_ context.Context, p peer.ID) error {
			s.probes.Add(1)
			if s.down[p] {
				return errors.New("no answer")
			}
			return nil
		},
		Providers: func() ([]peer.ID, error) { return s.providers, nil },
		Publish:   func(context.Context, []byte) error { s.published.Add(1); return nil },
	})
	sk, pub, _ := crypto.GenerateEd25519Key(rand.Reader)
	id, _ := peer.IDFromPublicKey(pub)
	s.sc.UseKey(id, sk)
	return s
}

// run drives the schedule over a span of the fake clock in steps, with probeWorkers workers,
// as Run does on the real clock.
func (s *simulated) run(span, step time.Duration) {
	sch := newSchedule(s.sc.cfg.ProbeInterval.Duration)
	sch.set(s.providers, s.clock.Now())
	end := s.clock.Now().Add(span)
	for s.clock.Now().Before(end) {
		ready, _ := sch.take(s.clock.Now())
		work := make(chan peer.ID)
		var wg sync.WaitGroup
		for range min(probeWorkers, len(ready)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := range work {
					s.sc.probeOne(context.Background(), p)
					sch.done(p, s.clock.Now())
				}
			}()
		}
		for _, p := range ready {
			work <- p
		}
		close(work)
		wg.Wait()
		s.clock.Advance(step)
	}
}

// TestScheduleSpreadsProbes: each provider is probed about once per interval, at its own
// moments (not in rounds), and a steady provider's score is signed again only when it moves
// or needs refreshing, while a provider that stops answering is told at once.
func TestScheduleSpreadsProbes(t *testing.T) {
	const n, every = 200, 5 * time.Minute
	s := newSimulated(t, n, 10, every)
	s.run(6*time.Hour, 10*time.Second)
	perProvider := float64(s.probes.Load()) / n
	if perProvider < 60 || perProvider > 84 { // 72 expected in 6 hours
		t.Fatalf("%.1f probes per provider in 6 hours at one per %s", perProvider, every)
	}
	if pub := float64(s.published.Load()) / n; pub >= perProvider/2 {
		t.Fatalf("%.1f score records per provider for %.1f probes: a steady score is signed again at every probe", pub, perProvider)
	}
	// A record is published again at the first probe after it is ScoreRefresh old.
	stale := ScoreRefresh + every*3/2
	down, _ := s.sc.reliability.UpdateReliability(s.providers[0].String(), func(*ledger.ReliabilityState) error { return nil })
	if down.LastScore >= 60 || down.EventsTotal < 60 || s.clock.Now().Sub(down.LastPublished) > stale {
		t.Fatalf("a provider that never answers: %+v", down)
	}
	up, _ := s.sc.reliability.UpdateReliability(s.providers[1].String(), func(*ledger.ReliabilityState) error { return nil })
	if up.LastScore < 90 || s.clock.Now().Sub(up.LastPublished) > stale {
		t.Fatalf("a steady provider: score %d, published %s ago", up.LastScore, s.clock.Now().Sub(up.LastPublished))
	}
}

// BenchmarkScorer10k: the coordinator's probing and scoring work for 10,000 providers over a
// simulated hour (probe interval 5 minutes, one provider in 20 down), with the network
// replaced by an in-memory prober. It reports the CPU it took per simulated hour as a fraction
// of one core, and the probes and score records per hour.
func BenchmarkScorer10k(b *testing.B) {
	for b.Loop() {
		s := newSimulated(b, 10_000, 20, 5*time.Minute)
		// Warm up: the first score of each provider is always signed.
		s.run(10*time.Minute, 5*time.Second)
		s.probes.Store(0)
		s.published.Store(0)
		before := cpuTime()
		s.run(time.Hour, 5*time.Second)
		cpu := cpuTime() - before
		b.ReportMetric(cpu.Seconds()/3600, "cores")
		b.ReportMetric(float64(s.probes.Load()), "probes/h")
		b.ReportMetric(float64(s.published.Load()), "records/h")
	}
}

// TestRunProbesAndStops: Run, on the real clock, probes each provider about once per
// interval, returns promptly when its context ends, and does not count a probe cut short by
// the stop as a miss.
func TestRunProbesAndStops(t *testing.T) {
	const n, every = 50, 100 * time.Millisecond
	s := newSimulated(t, n, 0, every)
	s.sc.clock = clock.System()
	hung := s.providers[0]
	s.sc.probeFn = func(ctx context.Context, p peer.ID) error {
		if p == hung {
			<-ctx.Done() // answers nothing until the coordinator stops
			return ctx.Err()
		}
		s.probes.Add(1)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { s.sc.Run(ctx); close(stopped) }()
	time.Sleep(time.Second)
	cancel()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if per := float64(s.probes.Load()) / (n - 1); per < 4 || per > 16 {
		t.Fatalf("%.1f probes per provider in 1 s at one per %s", per, every)
	}
	if st, _ := s.sc.reliability.UpdateReliability(hung.String(), func(*ledger.ReliabilityState) error { return nil }); st.EventsTotal != 0 {
		t.Fatalf("a probe cut short by the stop counted: %v", st.Events)
	}
}
