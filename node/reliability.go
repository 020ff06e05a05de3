package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Reliability: the coordinator probes each certified provider at random moments; a signed
// answer is an uptime proof, a miss inside the provider's availability is downtime. With the
// benchmark consistency of its attestations, this makes the provider's score, which the
// coordinator signs and gossips (docs/reliability.md).

type uptimeProbe struct {
	Nonce       string `json:"nonce"`
	Coordinator string `json:"coordinator"`
}

// handleUptime answers a trusted coordinator's probe with a signed uptime proof.
func (n *Node) handleUptime(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	remote := s.Conn().RemotePeer()
	var p uptimeProbe
	if err := readJSONFrame(bufio.NewReader(s), 1024, &p); err != nil || !n.trust.trust[remote] || p.Coordinator != remote.String() {
		s.Reset()
		return
	}
	raw, err := protocol.Seal(protocol.KindUptimeProof, protocol.UptimeProof{
		Version: protocol.ScoreVersion, Provider: n.id.String(), Coordinator: p.Coordinator, Nonce: p.Nonce, SignedAt: n.clock.Now().UTC(),
	}, n.key)
	if err != nil {
		s.Reset()
		return
	}
	writeFrame(s, raw)
}

// probe asks a provider for an uptime proof.
func (n *Node) probe(ctx context.Context, p peer.ID) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.reach(ctx, p); err != nil {
		return err
	}
	s, err := n.host.NewStream(ctx, p, protocol.UptimeProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	var nonce [16]byte
	rand.Read(nonce[:])
	probe := uptimeProbe{Nonce: hex.EncodeToString(nonce[:]), Coordinator: n.id.String()}
	if err := writeJSONFrame(s, probe); err != nil {
		return err
	}
	raw, err := readFrame(bufio.NewReader(s), protocol.MaxUptimeProofSize)
	if err != nil {
		return err
	}
	_, err = protocol.CheckUptimeProof(raw, p.String(), probe.Coordinator, probe.Nonce)
	return err
}

// scorer is the coordinator's side: probe rounds, state, score records.
type scorer struct {
	n *Node
}

// certified lists the providers whose application is approved.
func (sc *scorer) certified() []peer.ID {
	apps, err := sc.n.ledger.Applications()
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
func (sc *scorer) owesUptime(p peer.ID, now time.Time) bool {
	so, _ := sc.n.book.get(p)
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
func (sc *scorer) round(ctx context.Context) {
	provs := sc.certified()
	halfLife := sc.n.cfg.Coordinator.HalfLife.Duration
	var wg sync.WaitGroup
	// Many at a time: a provider that is down holds its slot until the probe times out
	// (10 s), and a round must fit its interval with thousands of providers.
	sem := make(chan struct{}, probeConcurrency)
	for _, p := range provs {
		wg.Add(1)
		sem <- struct{}{}
		go func(p peer.ID) {
			defer func() { <-sem; wg.Done() }()
			now := sc.n.clock.Now()
			owes := sc.owesUptime(p, now)
			var err error
			if owes {
				err = sc.n.probe(ctx, p)
			}
			so, _ := sc.n.book.get(p)
			st, uerr := sc.n.ledger.UpdateReliability(p.String(), func(s *ledger.ReliabilityState) error {
				if owes {
					good := 1.0
					if err != nil {
						good = 0
						s.Events = appendEvent(s.Events, fmt.Sprintf("missed probe %s", now.UTC().Format("Mon 15:04 UTC")))
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
							s.Events = appendEvent(s.Events, fmt.Sprintf("GPU %s at %d%% of its first benchmark", g.UUID, int(ratio*100)))
						}
						s.Reliability.Consistency.Add(now, ratio, halfLife)
					}
				}
				return nil
			})
			if uerr != nil {
				sc.n.log.Warn("recording a probe failed", "provider", p, "err", uerr)
				return
			}
			sc.publish(ctx, st, now)
		}(p)
	}
	wg.Wait()
}

func appendEvent(events []string, e string) []string {
	events = append(events, e)
	if len(events) > 10 {
		events = events[len(events)-10:]
	}
	return events
}

// publish signs a provider's score and gossips it.
func (sc *scorer) publish(ctx context.Context, st ledger.ReliabilityState, now time.Time) {
	halfLife := sc.n.cfg.Coordinator.HalfLife.Duration
	r := st.Reliability
	score := r.Score(now, halfLife)
	seq, err := sc.n.ledger.NextSerial("score", now)
	if err != nil {
		return
	}
	trend := 0
	if st.LastScore >= 0 {
		trend = score - st.LastScore
	}
	sc.n.ledger.UpdateReliability(st.Provider, func(s *ledger.ReliabilityState) error { s.LastScore = score; return nil })
	raw, err := protocol.Seal(protocol.KindScore, protocol.ScoreRecord{
		Version: protocol.ScoreVersion, Coordinator: sc.n.id.String(), Provider: st.Provider, Seq: seq,
		IssuedAt: now.UTC(), ExpiresAt: now.UTC().Add(protocol.ScoreTTL), Score: score,
		Uptime: r.Uptime.Ratio(now, halfLife), Completion: r.Completion.Ratio(now, halfLife), Consistency: r.Consistency.Ratio(now, halfLife),
		Probes: r.Uptime.Weight(now, halfLife), Jobs: r.Completion.Weight(now, halfLife), Benchmarks: r.Consistency.Weight(now, halfLife),
		Trend: trend, Why: st.Events, HalfLifeSecs: int64(halfLife / time.Second),
	}, sc.n.key)
	if err != nil {
		return
	}
	// Publishing runs the topic validator here first, which keeps the record in this
	// node's own score book.
	if err := sc.n.scoreTopic.Publish(ctx, raw); err != nil {
		sc.n.log.Debug("gossiping a score failed", "err", err)
	}
}

// loop runs probe rounds at random moments around the probe interval.
func (sc *scorer) loop(ctx context.Context) {
	for {
		iv := sc.n.cfg.Coordinator.ProbeInterval.Duration
		wait := iv/2 + time.Duration(mrand.Int64N(int64(iv)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		sc.round(ctx)
	}
}

// scoreBook holds the latest score record of each provider, from trusted coordinators.
type scoreBook struct {
	mu     sync.Mutex
	scores map[peer.ID]*protocol.SignedScore
}

// takeScore checks a score record and keeps it when newer.
func (n *Node) takeScore(raw []byte, source string) error {
	s, err := protocol.CheckScore(raw, n.clock.Now(), n.trust.trust)
	if err != nil {
		n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindScore), source, protocol.Reason(err)).Inc()
		return err
	}
	p, _ := peer.Decode(s.Provider)
	n.reliability.mu.Lock()
	defer n.reliability.mu.Unlock()
	if cur := n.reliability.scores[p]; cur != nil && cur.Signer == s.Signer && cur.Seq >= s.Seq {
		return fmt.Errorf("%w: score seq %d, have %d", protocol.ErrReplay, s.Seq, cur.Seq)
	}
	n.reliability.scores[p] = s
	n.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindScore), source).Inc()
	return nil
}

// validateScore is the scores topic validator.
func (n *Node) validateScore(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	return recordVerdict(n.takeScore(msg.Data, "gossip"))
}

// recordVerdict is the gossip verdict on a coordinator's record: a stale, early (clock
// skew) or foreign-coordinator record is ignored, since an honest relay may forward one;
// anything else that fails is rejected, at a cost to the sender's gossip score.
func recordVerdict(err error) pubsub.ValidationResult {
	switch {
	case err == nil:
		return pubsub.ValidationAccept
	case errors.Is(err, protocol.ErrReplay), errors.Is(err, protocol.ErrFuture), errors.Is(err, protocol.ErrExpired), errors.Is(err, protocol.ErrUntrusted):
		return pubsub.ValidationIgnore
	default:
		return pubsub.ValidationReject
	}
}

// Score returns the latest valid score record of a provider, or nil.
func (n *Node) Score(p peer.ID) *protocol.SignedScore {
	n.reliability.mu.Lock()
	defer n.reliability.mu.Unlock()
	s := n.reliability.scores[p]
	if s == nil || !n.clock.Now().Before(s.ExpiresAt) {
		return nil
	}
	return s
}

// Scores returns every valid score record held.
func (n *Node) Scores() []protocol.ScoreRecord {
	n.reliability.mu.Lock()
	defer n.reliability.mu.Unlock()
	out := []protocol.ScoreRecord{}
	for _, s := range n.reliability.scores {
		if n.clock.Now().Before(s.ExpiresAt) {
			out = append(out, s.ScoreRecord)
		}
	}
	return out
}

// jobReport is the frame a provider sends on /gpunex/job-report.
type jobReport struct {
	Lease             []byte `json:"lease"`
	LeaseCountersig   []byte `json:"lease_countersignature"`
	Receipt           []byte `json:"receipt"`
	ReceiptCountersig []byte `json:"receipt_countersignature,omitempty"`
}

// reportJob sends a job's final receipt and its lease to the provider's coordinator,
// which charges the job's escrow hold and counts the outcome. The job records the
// coordinator's acknowledgement; reportLoop retries until there is one.
func (n *Node) reportJob(ctx context.Context, j ledger.Job) {
	ids, err := n.cfg.TrustedCoordinators()
	if err != nil || len(ids) == 0 {
		return
	}
	to := reportTarget(ids, j.Proposal)
	var answer map[string]string
	report := jobReport{Lease: j.Lease, LeaseCountersig: j.LeaseCountersig, Receipt: j.Receipt, ReceiptCountersig: j.ReceiptCountersig}
	if err := n.exchange(ctx, to, protocol.JobReportProtocol, 10*time.Second, report, 4096, &answer); err != nil {
		n.log.Debug("job report not delivered", "job", j.ID, "err", err)
		return
	}
	sentCountersig := len(j.ReceiptCountersig) > 0
	n.ledger.UpdateJob(j.ID, func(j *ledger.Job) error {
		if answer["ok"] == "true" {
			if j.ReportedAt.IsZero() {
				j.ReportedAt = n.clock.Now()
			}
			j.CountersigReported = j.CountersigReported || sentCountersig
		} else if e := answer["error"]; e != "" && !strings.HasPrefix(e, "not recorded") {
			j.ReportError = e // refused for good: retrying cannot help
		}
		return nil
	})
}

// reportTarget is the coordinator a job's report goes to: the one that signed the job's
// escrow hold (it holds the renter's money and charges it), when this provider trusts it;
// else the first trusted coordinator.
func reportTarget(trusted []peer.ID, proposal []byte) peer.ID {
	if c := holdCoordinator(proposal); c != "" && slices.Contains(trusted, c) {
		return c
	}
	return trusted[0]
}

// holdCoordinator names the coordinator that signed the escrow hold a proposal carries
// ("" without one).
func holdCoordinator(proposal []byte) peer.ID {
	env, err := protocol.Open(proposal)
	if err != nil {
		return ""
	}
	var p protocol.Proposal
	if json.Unmarshal(env.Payload, &p) != nil || len(p.Hold) == 0 {
		return ""
	}
	h, err := protocol.Open(p.Hold)
	if err != nil || h.Kind != protocol.KindEscrowHold {
		return ""
	}
	return h.Signer
}

// handleJobReport takes a provider's final receipt on a coordinator: the lease must be
// signed by that provider and countersigned by its renter, and the receipt must follow
// from it. The outcome counts for job completion (provider's fault or not), once per job.
func (n *Node) handleJobReport(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	remote := s.Conn().RemotePeer()
	if n.coord != nil && !n.coord.reportRate.allow(remote, time.Now()) {
		n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", "rate_limited").Inc()
		writeJSONFrame(s, map[string]string{"error": "not recorded: more than " + strconv.Itoa(reportsPerMinute) + " reports in a minute: slow down"})
		return
	}
	var r jobReport
	err := readJSONFrame(bufio.NewReader(s), 3*(protocol.MaxLeaseSize+protocol.MaxReceiptSize+protocol.MaxCountersignatureSize), &r)
	var l *protocol.Lease
	if err == nil {
		var signer peer.ID
		if l, signer, err = protocol.OpenLease(r.Lease); err == nil && signer != remote {
			err = fmt.Errorf("%w: lease signed by %s, reported by %s", protocol.ErrWrongSigner, signer, remote)
		}
	}
	if err == nil {
		var renter peer.ID
		if renter, err = peer.Decode(l.Renter); err == nil {
			_, err = protocol.CheckCountersignature(r.LeaseCountersig, r.Lease, protocol.KindLease, renter)
		}
	}
	if err == nil {
		err = protocol.CheckLeaseTerms(l)
	}
	var rec *protocol.Receipt
	if err == nil {
		rec, err = protocol.CheckReceipt(r.Receipt, r.Lease, l)
	}
	if err == nil && len(r.ReceiptCountersig) > 0 {
		renter, _ := peer.Decode(l.Renter)
		if _, cerr := protocol.CheckCountersignature(r.ReceiptCountersig, r.Receipt, protocol.KindReceipt, renter); cerr != nil {
			err = fmt.Errorf("the renter's countersignature of the receipt: %w", cerr)
		}
	}
	if err != nil {
		n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", protocol.Reason(err)).Inc()
		writeJSONFrame(s, map[string]string{"error": err.Error()})
		return
	}
	now := n.clock.Now()
	fault := protocol.ProviderFault(rec.Reason)
	out, err := n.money.charge(context.Background(), ledger.ReportCharge{
		Report: ledger.JobReport{Job: rec.Job, Provider: remote.String(), ReceivedAt: now,
			Lease: r.Lease, LeaseCountersig: r.LeaseCountersig, Receipt: r.Receipt, ReceiptCountersig: r.ReceiptCountersig, ProviderFault: fault},
		Receipt: protocol.RecordSHA256(r.Receipt), Amount: rec.Amount, Model: rec.Model, GPUs: rec.GPUs,
		Seconds: rec.Seconds, EndedAt: rec.EndedAt, Renter: rec.Renter})
	if err != nil {
		writeJSONFrame(s, map[string]string{"error": "not recorded: " + err.Error()})
		return
	}
	if out.Refused != "" {
		n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", "invalid").Inc()
		writeJSONFrame(s, map[string]string{"error": out.Refused})
		return
	}
	if e := out.Earning; e != nil {
		n.log.Info("job charged", "job", rec.Job, "provider", remote, "charge_usdc", e.Charge.String(), "provider_earns_usdc", e.Net.String())
	}
	if out.Added {
		n.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindReceipt), "report").Inc()
		n.ledger.UpdateReliability(remote.String(), func(st *ledger.ReliabilityState) error {
			good := 1.0
			if fault {
				good = 0
				st.Events = appendEvent(st.Events, fmt.Sprintf("job %s interrupted: %s", rec.Job, rec.Reason))
			}
			st.Reliability.Completion.Add(rec.EndedAt, good, n.cfg.Coordinator.HalfLife.Duration)
			return nil
		})
	}
	writeJSONFrame(s, map[string]string{"ok": "true"})
}
