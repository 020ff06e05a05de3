// Package reliability is the reliability score of providers (docs/reliability.md): the
// coordinator's probe rounds and signed score records, a provider's answer to probes, and the
// book of score records every node keeps.
package reliability

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Reliability: the coordinator probes each certified provider at random moments; a signed
// answer is an uptime proof, a miss inside the provider's availability is downtime. With the
// benchmark consistency of its attestations, this makes the provider's score, which the
// coordinator signs and gossips (docs/reliability.md).

// UptimeHandler answers a trusted coordinator's probe with a signed uptime proof: the handler
// of protocol.UptimeProtocol on a provider.
func UptimeHandler(pr *p2p.Peer, clk clock.Clock, trust protocol.Trust) network.StreamHandler {
	return func(s network.Stream) { handleUptime(pr, clk, trust, s) }
}

func handleUptime(pr *p2p.Peer, clk clock.Clock, trust protocol.Trust, s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	remote := s.Conn().RemotePeer()
	var p protocol.UptimeProbe
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxUptimeProbeSize, &p); err != nil || !trust[remote] || p.Coordinator != remote.String() {
		s.Reset()
		return
	}
	raw, err := protocol.Seal(protocol.KindUptimeProof, protocol.UptimeProof{
		Version: protocol.ScoreVersion, Provider: pr.ID.String(), Coordinator: p.Coordinator, Nonce: p.Nonce, SignedAt: clk.Now().UTC(),
	}, pr.Key)
	if err != nil {
		s.Reset()
		return
	}
	protocol.WriteFrame(s, raw)
}

// probe asks a provider for an uptime proof.
func (sc *Scorer) probe(ctx context.Context, p peer.ID) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := sc.peer.OpenStream(ctx, p, protocol.UptimeProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	var nonce [16]byte
	rand.Read(nonce[:])
	probe := protocol.UptimeProbe{Nonce: hex.EncodeToString(nonce[:]), Coordinator: sc.peer.ID.String()}
	if err := protocol.WriteJSONFrame(s, probe); err != nil {
		return err
	}
	raw, err := protocol.ReadFrame(bufio.NewReader(s), protocol.MaxUptimeProofSize)
	if err != nil {
		return err
	}
	_, err = protocol.CheckUptimeProof(raw, p.String(), probe.Coordinator, probe.Nonce)
	return err
}

// Offers gives the latest offer a node holds from a provider (its availability and
// maintenance, its attestation).
type Offers interface {
	Get(p peer.ID) (*protocol.SignedOffer, time.Time)
}

// ScorerDeps are what the coordinator's scorer needs.
type ScorerDeps struct {
	Peer        *p2p.Peer
	Ledger      *ledger.Ledger
	Clock       clock.Clock
	Log         *slog.Logger
	Coordinator config.CoordinatorConfig
	Offers      Offers
	// Topic is the scores gossip topic.
	Topic *p2p.Topic
}

// Scorer is the coordinator's side: probe rounds, state, score records.
type Scorer struct {
	peer   *p2p.Peer
	ledger *ledger.Ledger
	clock  clock.Clock
	log    *slog.Logger
	cfg    config.CoordinatorConfig
	offers Offers
	topic  *p2p.Topic
}

// NewScorer returns the coordinator's scorer; Run starts its rounds.
func NewScorer(d ScorerDeps) *Scorer {
	return &Scorer{peer: d.Peer, ledger: d.Ledger, clock: d.Clock, log: d.Log, cfg: d.Coordinator, offers: d.Offers, topic: d.Topic}
}

// certified lists the providers whose application is approved.
func (sc *Scorer) certified() []peer.ID {
	apps, err := sc.ledger.Applications()
	if err != nil {
		return nil
	}
	var out []peer.ID
	for _, a := range apps {
		if a.Status == protocol.StatusApproved {
			if p, err := peer.Decode(a.Provider); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// owesUptime says whether a provider is inside its declared availability now and outside
// its declared maintenance, from its latest offer (24/7 when the coordinator holds none).
func (sc *Scorer) owesUptime(p peer.ID, now time.Time) bool {
	so, _ := sc.offers.Get(p)
	if so == nil {
		return true
	}
	if protocol.InMaintenance(so.Offer.Maintenance, now) {
		return false
	}
	sched, err := protocol.ParseAvailability(so.Offer.Availability)
	if err != nil {
		return true
	}
	return sched.Open(now)
}

// probeConcurrency is how many probes a round runs at once.
const probeConcurrency = 128

// round probes every certified provider once (in parallel, a few at a time), records the
// outcomes and the benchmark consistency of new attestations, then signs and gossips a
// score record for each.
func (sc *Scorer) round(ctx context.Context) {
	provs := sc.certified()
	halfLife := sc.cfg.HalfLife.Duration
	var wg sync.WaitGroup
	// Many at a time: a provider that is down holds its slot until the probe times out
	// (10 s), and a round must fit its interval with thousands of providers.
	sem := make(chan struct{}, probeConcurrency)
	for _, p := range provs {
		wg.Add(1)
		sem <- struct{}{}
		go func(p peer.ID) {
			defer func() { <-sem; wg.Done() }()
			now := sc.clock.Now()
			owes := sc.owesUptime(p, now)
			var err error
			if owes {
				err = sc.probe(ctx, p)
			}
			so, _ := sc.offers.Get(p)
			st, uerr := sc.ledger.UpdateReliability(p.String(), func(s *ledger.ReliabilityState) error {
				if owes {
					good := 1.0
					if err != nil {
						good = 0
						s.AddEvent(fmt.Sprintf("missed probe %s", now.UTC().Format("Mon 15:04 UTC")))
					}
					s.Reliability.Uptime.Add(now, good, halfLife)
				}
				if so != nil && so.Attest != nil && so.Attest.Seq > s.LastAttestSeq {
					s.LastAttestSeq = so.Attest.Seq
					for _, g := range so.Attest.GPUs {
						if g.PerfScore <= 0 {
							continue
						}
						first, ok := s.FirstPerf[g.UUID]
						if !ok {
							s.FirstPerf[g.UUID] = g.PerfScore
							first = g.PerfScore
						}
						ratio := math.Min(1, float64(g.PerfScore)/float64(first))
						if ratio < 0.95 {
							s.AddEvent(fmt.Sprintf("GPU %s at %d%% of its first benchmark", g.UUID, int(ratio*100)))
						}
						s.Reliability.Consistency.Add(now, ratio, halfLife)
					}
				}
				return nil
			})
			if uerr != nil {
				sc.log.Warn("recording a probe failed", "provider", p, "err", uerr)
				return
			}
			sc.publish(ctx, st, now)
		}(p)
	}
	wg.Wait()
}

// publish signs a provider's score and gossips it.
func (sc *Scorer) publish(ctx context.Context, st ledger.ReliabilityState, now time.Time) {
	halfLife := sc.cfg.HalfLife.Duration
	r := st.Reliability
	score := r.Score(now, halfLife)
	seq, err := sc.ledger.NextSerial("score", now)
	if err != nil {
		return
	}
	trend := 0
	if st.LastScore >= 0 {
		trend = score - st.LastScore
	}
	sc.ledger.UpdateReliability(st.Provider, func(s *ledger.ReliabilityState) error { s.LastScore = score; return nil })
	raw, err := protocol.Seal(protocol.KindScore, protocol.ScoreRecord{
		Version: protocol.ScoreVersion, Coordinator: sc.peer.ID.String(), Provider: st.Provider, Seq: seq,
		IssuedAt: now.UTC(), ExpiresAt: now.UTC().Add(protocol.ScoreTTL), Score: score,
		Uptime: r.Uptime.Ratio(now, halfLife), Completion: r.Completion.Ratio(now, halfLife), Consistency: r.Consistency.Ratio(now, halfLife),
		Probes: r.Uptime.Weight(now, halfLife), Jobs: r.Completion.Weight(now, halfLife), Benchmarks: r.Consistency.Weight(now, halfLife),
		Trend: trend, Why: st.Events, HalfLifeSecs: int64(halfLife / time.Second),
	}, sc.peer.Key)
	if err != nil {
		return
	}
	// Publishing runs the topic validator here first, which keeps the record in this
	// node's own score book.
	if err := sc.topic.Publish(ctx, raw); err != nil {
		sc.log.Debug("gossiping a score failed", "err", err)
	}
}

// Run runs probe rounds at random moments around the probe interval.
func (sc *Scorer) Run(ctx context.Context) {
	for {
		iv := sc.cfg.ProbeInterval.Duration
		wait := iv/2 + time.Duration(mrand.Int64N(int64(iv)))
		select {
		case <-ctx.Done():
			return
		case <-sc.clock.After(wait):
		}
		sc.round(ctx)
	}
}

// Book holds the latest score record of each provider, from trusted coordinators.
type Book struct {
	clock   clock.Clock
	metrics *metrics.Metrics
	trust   protocol.Trust

	mu     sync.Mutex
	scores map[peer.ID]*protocol.SignedScore
}

// NewBook returns an empty score book that takes records from the trusted coordinators.
func NewBook(clk clock.Clock, m *metrics.Metrics, trust protocol.Trust) *Book {
	return &Book{clock: clk, metrics: m, trust: trust, scores: map[peer.ID]*protocol.SignedScore{}}
}

// Take checks a score record and keeps it when newer.
func (b *Book) Take(raw []byte, source string) error {
	s, err := protocol.CheckScore(raw, b.clock.Now(), b.trust)
	if err != nil {
		b.metrics.RecordsRejected.WithLabelValues(string(protocol.KindScore), source, protocol.Reason(err)).Inc()
		return err
	}
	p, _ := peer.Decode(s.Provider)
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.scores[p]; cur != nil && cur.Signer == s.Signer && cur.Seq >= s.Seq {
		return fmt.Errorf("%w: score seq %d, have %d", protocol.ErrReplay, s.Seq, cur.Seq)
	}
	b.scores[p] = s
	b.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindScore), source).Inc()
	return nil
}

// Validate is the scores topic validator: a stale, early (clock skew) or foreign-coordinator
// record is ignored, since an honest relay may forward one; anything else that fails is
// rejected, at a cost to the sender's gossip score.
func (b *Book) Validate(ctx context.Context, from peer.ID, data []byte) p2p.Verdict {
	return p2p.VerdictOf(b.Take(data, "gossip"))
}

// Score returns the latest valid score record of a provider, or nil.
func (b *Book) Score(p peer.ID) *protocol.SignedScore {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scores[p]
	if s == nil || !b.clock.Now().Before(s.ExpiresAt) {
		return nil
	}
	return s
}

// Scores returns every valid score record held.
func (b *Book) Scores() []protocol.ScoreRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []protocol.ScoreRecord{}
	for _, s := range b.scores {
		if b.clock.Now().Before(s.ExpiresAt) {
			out = append(out, s.ScoreRecord)
		}
	}
	return out
}
