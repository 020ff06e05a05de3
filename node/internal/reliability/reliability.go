// Package reliability is the reliability score of providers (docs/reliability.md): the
// coordinator's probe rounds and signed score records, a provider's answer to probes, and the
// book of score records every node keeps.
package reliability

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Reliability: the coordinator probes each certified provider on its own schedule; a signed
// answer is an uptime proof, a miss inside the provider's availability is downtime. With the
// benchmark consistency of its attestations, this makes the provider's score, which the
// coordinator signs and gossips (docs/reliability.md).

// UptimeHandler answers a trusted coordinator's probe with a signed uptime proof: the handler
// of protocol.UptimeProtocol on a provider.
// answered, when not nil, is called after each proof sent.
func UptimeHandler(pr *p2p.Peer, clk clock.Clock, trust protocol.Trust, answered func()) network.StreamHandler {
	return func(s network.Stream) { handleUptime(pr, clk, trust, answered, s) }
}

func handleUptime(pr *p2p.Peer, clk clock.Clock, trust protocol.Trust, answered func(), s network.Stream) {
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
	if protocol.WriteFrame(s, raw) == nil && answered != nil {
		answered()
	}
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
	probe := protocol.UptimeProbe{Nonce: hex.EncodeToString(nonce[:]), Coordinator: sc.id.String()}
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
	subsystem.Base                          // the peer, clock, logger and metrics of the node
	Reliability    *ledger.ReliabilityStore // each provider's state
	Applications   *ledger.ApplicationStore // the certified providers (read)
	Serials        *ledger.SerialStore      // the score records' sequences
	Coordinator    config.CoordinatorConfig
	Offers         Offers
	// Topic is the scores gossip topic.
	Topic *p2p.Topic
	// Probe, Providers and Publish replace the network probe, the ledger's certified
	// providers and gossip (the scale benchmark's in-memory stand-ins); nil: the real ones.
	Probe     func(ctx context.Context, p peer.ID) error
	Providers func() ([]peer.ID, error)
	Publish   func(ctx context.Context, raw []byte) error
	// CatchUp, when set, is called after each probe a provider answered: the coordinator
	// fetches its offer if gossip did not bring it (offers.Catalogue.CatchUp).
	CatchUp func(ctx context.Context, p peer.ID) bool
}

// Scorer is the coordinator's side: probe schedule, state, score records.
type Scorer struct {
	peer         *p2p.Peer
	id           peer.ID
	key          crypto.PrivKey
	reliability  *ledger.ReliabilityStore
	applications *ledger.ApplicationStore
	serials      *ledger.SerialStore
	clock        clock.Clock
	log          *slog.Logger
	metrics      *metrics.Metrics
	cfg          config.CoordinatorConfig
	offers       Offers

	probeFn     func(ctx context.Context, p peer.ID) error
	providersFn func() ([]peer.ID, error)
	publishFn   func(ctx context.Context, raw []byte) error
	catchUp     func(ctx context.Context, p peer.ID) bool
}

// NewScorer returns the coordinator's scorer; Run starts its schedule.
func NewScorer(d ScorerDeps) *Scorer {
	sc := &Scorer{peer: d.Peer, reliability: d.Reliability, applications: d.Applications, serials: d.Serials,
		clock: d.Clock, log: d.Log, metrics: d.Metrics, cfg: d.Coordinator, offers: d.Offers,
		probeFn: d.Probe, providersFn: d.Providers, publishFn: d.Publish, catchUp: d.CatchUp}
	if d.Peer != nil {
		sc.id, sc.key = d.Peer.ID, d.Peer.Key
	}
	if sc.probeFn == nil {
		sc.probeFn = sc.probe
	}
	if sc.providersFn == nil {
		sc.providersFn = sc.certified
	}
	if sc.publishFn == nil {
		sc.publishFn = d.Topic.Publish
	}
	return sc
}

// UseKey sets the identity the scorer signs with (the scale benchmark, which has no peer).
func (sc *Scorer) UseKey(id peer.ID, key crypto.PrivKey) { sc.id, sc.key = id, key }

// certified lists the providers whose application is approved.
func (sc *Scorer) certified() ([]peer.ID, error) {
	apps, err := sc.applications.Applications()
	if err != nil {
		return nil, err
	}
	var out []peer.ID
	for _, a := range apps {
		if a.Status == protocol.StatusApproved {
			if p, err := peer.Decode(a.Provider); err == nil {
				out = append(out, p)
			}
		}
	}
	return out, nil
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

// probeOne probes a provider if it owes uptime now, records the outcome and the benchmark
// consistency of a new attestation, and publishes its score if it moved (publish).
func (sc *Scorer) probeOne(ctx context.Context, p peer.ID) {
	halfLife := sc.cfg.HalfLife.Duration
	now := sc.clock.Now()
	owes := sc.owesUptime(p, now)
	var err error
	if owes {
		err = sc.probeFn(ctx, p)
		if ctx.Err() != nil {
			return // the coordinator is stopping: a probe cut short says nothing of the provider
		}
		if sc.metrics != nil {
			outcome := "answered"
			if err != nil {
				outcome = "missed"
			}
			sc.metrics.UptimeProbes.WithLabelValues(outcome).Inc()
		}
		if err == nil && sc.catchUp != nil {
			sc.catchUp(ctx, p) // before the attestation is read below
		}
	}
	so, _ := sc.offers.Get(p)
	st, uerr := sc.reliability.UpdateReliability(p.String(), func(s *ledger.ReliabilityState) error {
		if owes {
			good := 1.0
			if err != nil {
				good = 0
				s.AddEvent(protocol.WhyMissedProbe(now))
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
					s.AddEvent(protocol.WhySlowerGPU(g.UUID, int(ratio*100)))
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
}

// ScoreStep and ScoreRefresh say when a provider's score is signed and gossiped again: when
// it moved by ScoreStep points or more since the record last published (with the events that
// explain it), or when that record is ScoreRefresh old (records expire after
// protocol.ScoreTTL). Most probes of a steady provider, or of one down for good, publish
// nothing.
const (
	ScoreStep    = 1
	ScoreRefresh = protocol.ScoreTTL / 4
)

// publish signs a provider's score and gossips it, if it is worth telling (ScoreStep).
func (sc *Scorer) publish(ctx context.Context, st ledger.ReliabilityState, now time.Time) {
	halfLife := sc.cfg.HalfLife.Duration
	r := st.Reliability
	score := r.Score(now, halfLife)
	moved := score-st.LastScore >= ScoreStep || st.LastScore-score >= ScoreStep
	// The record must be replaced before it expires, though the next probe may be up to 1.5
	// intervals away.
	refresh := min(ScoreRefresh, protocol.ScoreTTL-2*sc.cfg.ProbeInterval.Duration)
	if st.LastScore >= 0 && !moved && now.Sub(st.LastPublished) < refresh {
		return
	}
	seq, err := sc.serials.NextSerial("score", now)
	if err != nil {
		return
	}
	trend := 0
	if st.LastScore >= 0 {
		trend = score - st.LastScore
	}
	sc.reliability.UpdateReliability(st.Provider, func(s *ledger.ReliabilityState) error {
		s.LastScore, s.LastPublished = score, now
		return nil
	})
	raw, err := protocol.Seal(protocol.KindScore, protocol.ScoreRecord{
		Version: protocol.ScoreVersion, Coordinator: sc.id.String(), Provider: st.Provider, Seq: seq,
		IssuedAt: now.UTC(), ExpiresAt: now.UTC().Add(protocol.ScoreTTL), Score: score,
		Uptime: r.Uptime.Ratio(now, halfLife), Completion: r.Completion.Ratio(now, halfLife), Consistency: r.Consistency.Ratio(now, halfLife),
		Probes: r.Uptime.Weight(now, halfLife), Jobs: r.Completion.Weight(now, halfLife), Benchmarks: r.Consistency.Weight(now, halfLife),
		Trend: trend, Why: st.Events, HalfLifeSecs: int64(halfLife / time.Second),
	}, sc.key)
	if err != nil {
		return
	}
	// Publishing runs the topic validator here first, which keeps the record in this
	// node's own score book.
	if err := sc.publishFn(ctx, raw); err != nil {
		sc.log.Debug("gossiping a score failed", "err", err)
	}
}

// Book holds the latest score record of each provider from each trusted coordinator that
// scores it: coordinators are told apart, so that one's records never replace another's.
type Book struct {
	clock   clock.Clock
	metrics *metrics.Metrics
	trust   protocol.Trust

	mu     sync.Mutex
	scores map[scoreKey]*protocol.SignedScore
	onTake func(*protocol.SignedScore)
	// keepOnly, when set, is the one provider whose records the book keeps (KeepOnly).
	keepOnly peer.ID
}

// scoreKey is a provider and the coordinator that scored it.
type scoreKey struct{ provider, coordinator peer.ID }

// NewBook returns an empty score book that takes records from the trusted coordinators.
func NewBook(clk clock.Clock, m *metrics.Metrics, trust protocol.Trust) *Book {
	return &Book{clock: clk, metrics: m, trust: trust, scores: map[scoreKey]*protocol.SignedScore{}}
}

// Take checks a score record and keeps it when newer than its coordinator's last one.
func (b *Book) Take(raw []byte, source string) error {
	s, err := protocol.CheckScore(raw, b.clock.Now(), b.trust)
	if err != nil {
		b.metrics.RecordsRejected.WithLabelValues(string(protocol.KindScore), source, protocol.Reason(err)).Inc()
		return err
	}
	p, _ := peer.Decode(s.Provider)
	k := scoreKey{p, s.Signer}
	b.mu.Lock()
	if b.keepOnly != "" && p != b.keepOnly {
		b.mu.Unlock()
		return nil // valid, and forwarded; not this provider's to keep
	}
	if cur := b.scores[k]; cur != nil && cur.Seq >= s.Seq {
		b.mu.Unlock()
		return fmt.Errorf("%w: score seq %d, have %d", protocol.ErrReplay, s.Seq, cur.Seq)
	}
	b.scores[k] = s
	onTake := b.onTake
	b.mu.Unlock()
	b.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindScore), source).Inc()
	if onTake != nil {
		onTake(s)
	}
	return nil
}

// KeepOnly has the book keep the records of one provider only (a provider's book: its
// own), so that what a provider holds does not grow with the network. Others' records are
// still checked, and forwarded by gossip.
func (b *Book) KeepOnly(p peer.ID) {
	b.mu.Lock()
	b.keepOnly = p
	b.mu.Unlock()
}

// OnTake calls f with each score record the book takes (a provider keeps its own).
func (b *Book) OnTake(f func(*protocol.SignedScore)) {
	b.mu.Lock()
	b.onTake = f
	b.mu.Unlock()
}

// Validate is the scores topic validator: a stale, early (clock skew) or foreign-coordinator
// record is ignored, since an honest relay may forward one; anything else that fails is
// rejected, at a cost to the sender's gossip score.
func (b *Book) Validate(ctx context.Context, from peer.ID, data []byte) p2p.Verdict {
	return p2p.VerdictOf(b.Take(data, "gossip"))
}

// Score returns the latest valid score record of a provider by a coordinator (for an
// offer, the one that certified it), or nil. With by empty, the most recent record of any
// trusted coordinator.
func (b *Book) Score(p, by peer.ID) *protocol.SignedScore {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if by != "" {
		if s := b.scores[scoreKey{p, by}]; s != nil && now.Before(s.ExpiresAt) {
			return s
		}
		return nil
	}
	var best *protocol.SignedScore
	for k, s := range b.scores {
		if k.provider == p && now.Before(s.ExpiresAt) && (best == nil || s.IssuedAt.After(best.IssuedAt)) {
			best = s
		}
	}
	return best
}

// Records returns the valid score records held of providers (every provider's when empty),
// as signed: a score sync's answer.
func (b *Book) Records(providers []string) [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out [][]byte
	for _, s := range b.scores {
		if b.clock.Now().Before(s.ExpiresAt) && (len(providers) == 0 || slices.Contains(providers, s.Provider)) {
			out = append(out, s.Raw)
		}
	}
	return out
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
	slices.SortFunc(out, func(a, b protocol.ScoreRecord) int {
		return cmp.Or(strings.Compare(a.Provider, b.Provider), strings.Compare(a.Coordinator, b.Coordinator))
	})
	return out
}
