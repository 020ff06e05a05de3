package protocol

import (
	"fmt"
	"math"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Reliability score arithmetic (docs/reliability.md): three components, each an
// exponentially decayed ratio of good outcomes, started from a prior so that one event does
// not swing a new provider's score, combined with fixed weights into 0-100.
//
// Each update costs O(1): the running sums are decayed to the new event's time and the event
// added, so a coordinator never replays history to recompute a score.

// DefaultHalfLife is the decay half-life of every component.
const DefaultHalfLife = 7 * 24 * time.Hour

// Score weights and priors.
const (
	WeightUptime      = 0.5
	WeightCompletion  = 0.3
	WeightConsistency = 0.2
	// Prior is the ratio a component starts from, worth PriorWeight outcomes.
	Prior       = 0.9
	PriorWeight = 12.0
)

// DecayedRatio is a ratio of good to all outcomes in which each outcome's weight halves
// every half-life. Good and Total are the weights as of At.
type DecayedRatio struct {
	Good  float64   `json:"good"`
	Total float64   `json:"total"`
	At    time.Time `json:"at"`
}

// decay returns 2^(-(to-from)/halfLife).
func decay(from, to time.Time, halfLife time.Duration) float64 {
	return math.Exp2(-float64(to.Sub(from)) / float64(halfLife))
}

// Add records one outcome at time at, of value good in [0, 1] (1 is a success, 0 a
// failure; a benchmark at 80% of its first result is 0.8). Outcomes may arrive late: an
// outcome older than the sums is decayed to their time instead.
func (d *DecayedRatio) Add(at time.Time, good float64, halfLife time.Duration) {
	good = math.Max(0, math.Min(1, good))
	switch {
	case d.At.IsZero():
		d.At = at
	case at.After(d.At):
		f := decay(d.At, at, halfLife)
		d.Good, d.Total, d.At = d.Good*f, d.Total*f, at
	default:
		f := decay(at, d.At, halfLife)
		d.Good += good * f
		d.Total += f
		return
	}
	d.Good += good
	d.Total++
}

// Ratio is the decayed ratio at time now, blended with the prior: (good + prior x w) /
// (total + w) with the sums decayed to now.
func (d DecayedRatio) Ratio(now time.Time, halfLife time.Duration) float64 {
	g, t := d.Good, d.Total
	if !d.At.IsZero() && now.After(d.At) {
		f := decay(d.At, now, halfLife)
		g, t = g*f, t*f
	}
	return (g + Prior*PriorWeight) / (t + PriorWeight)
}

// Weight is the decayed number of outcomes behind the ratio at time now.
func (d DecayedRatio) Weight(now time.Time, halfLife time.Duration) float64 {
	if d.At.IsZero() {
		return 0
	}
	if now.After(d.At) {
		return d.Total * decay(d.At, now, halfLife)
	}
	return d.Total
}

// Reliability is a provider's three components.
type Reliability struct {
	Uptime      DecayedRatio `json:"uptime"`
	Completion  DecayedRatio `json:"completion"`
	Consistency DecayedRatio `json:"benchmark_consistency"`
}

// Score combines the components at time now into 0-100, rounded down:
// 100 x (0.5 uptime + 0.3 completion + 0.2 benchmark consistency).
func (r Reliability) Score(now time.Time, halfLife time.Duration) int {
	s := WeightUptime*r.Uptime.Ratio(now, halfLife) + WeightCompletion*r.Completion.Ratio(now, halfLife) +
		WeightConsistency*r.Consistency.Ratio(now, halfLife)
	return int(math.Floor(s*100 + 1e-9))
}

// UptimeProbe is the coordinator's frame on the uptime stream; the provider answers with a
// signed uptime proof.
type UptimeProbe struct {
	Nonce       string `json:"nonce"`
	Coordinator string `json:"coordinator"`
}

// MaxUptimeProbeSize caps the probe frame.
const MaxUptimeProbeSize = 1024

// Uptime probes and score records.
const (
	// UptimeProtocol carries a coordinator's probe and the provider's signed answer.
	UptimeProtocol = "/gpunex/uptime/1.0.0"
	// ScoresTopic is the gossipsub topic of score records.
	ScoresTopic = "/gpunex/scores/1"
	// ScoreSyncProtocol hands a joining node the valid score records a peer holds, so that
	// it ranks providers by their scores at once rather than after the next publication
	// (up to a coordinator's publish interval). As the offer sync: the client writes a
	// ScoreSyncRequest as one JSON frame (or nothing: every record) and closes its write
	// side, the server writes each record asked for length-prefixed (at most MaxSyncScores)
	// and closes; each is checked as if it came by gossip.
	ScoreSyncProtocol = "/gpunex/score-sync/1.0.0"
	// MaxSyncScores caps one score sync answer (at most 160 MiB of records).
	MaxSyncScores = 40_000
	// ScoreVersion is the payload version of uptime proofs and score records.
	ScoreVersion = 1
	// MaxUptimeProofSize and MaxScoreSize cap their envelopes.
	MaxUptimeProofSize = 1 << 10
	MaxScoreSize       = 4 << 10
	// ScoreTTL is how long a score record is valid.
	ScoreTTL = 2 * time.Hour
)

// UptimeProof is a provider's signed answer to a coordinator's probe nonce.
type UptimeProof struct {
	Version     int       `json:"version"`
	Provider    string    `json:"provider"`
	Coordinator string    `json:"coordinator"`
	Nonce       string    `json:"nonce"`
	SignedAt    time.Time `json:"signed_at"`
}

// CheckUptimeProof opens a provider's answer to the nonce this coordinator sent.
func CheckUptimeProof(raw []byte, provider, coordinator string, nonce string) (*UptimeProof, error) {
	env, err := openKind(raw, KindUptimeProof)
	if err != nil {
		return nil, err
	}
	var u UptimeProof
	if err := decodePayload(env, ScoreVersion, &u, func() int { return u.Version }); err != nil {
		return nil, err
	}
	if u.Provider != env.signerText || u.Provider != provider {
		return nil, fmt.Errorf("%w: uptime proof signed by %s for %s, probe sent to %s", ErrWrongSigner, env.Signer, u.Provider, provider)
	}
	if u.Coordinator != coordinator || u.Nonce != nonce {
		return nil, fmt.Errorf("%w: uptime proof answers another probe", ErrReplay)
	}
	return &u, nil
}

// ScoreRecord is a coordinator's signed reliability score for a provider.
type ScoreRecord struct {
	Version      int       `json:"version"`
	Coordinator  string    `json:"coordinator"`
	Provider     string    `json:"provider"`
	Seq          uint64    `json:"seq"`
	IssuedAt     time.Time `json:"issued_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	Score        int       `json:"score"`
	Uptime       float64   `json:"uptime"`
	Completion   float64   `json:"completion"`
	Consistency  float64   `json:"benchmark_consistency"`
	Probes       float64   `json:"probes"`        // decayed count of probes behind uptime
	Jobs         float64   `json:"jobs"`          // decayed count of jobs behind completion
	Benchmarks   float64   `json:"benchmarks"`    // decayed count behind consistency
	Trend        int       `json:"trend"`         // score change since the previous record
	Why          []string  `json:"why,omitempty"` // recent events that moved it
	HalfLifeSecs int64     `json:"half_life_s"`
}

// The events a score record's Why names, in the words coordinators write them (English;
// the dashboard translates these forms).

// WhyMissedProbe is an uptime probe the provider did not answer inside its availability.
func WhyMissedProbe(at time.Time) string {
	return "missed probe " + at.UTC().Format("Mon 15:04 UTC")
}

// WhySlowerGPU is a GPU benchmarked under 95% of its first run.
func WhySlowerGPU(uuid string, percent int) string {
	return fmt.Sprintf("GPU %s at %d%% of its first benchmark", uuid, percent)
}

// WhyAbandoned is a job whose provider sent no receipt by its hold's expiry.
func WhyAbandoned(job string, seconds int64) string {
	return fmt.Sprintf("job %s abandoned: no receipt by its hold's expiry; its renter's countersigned usage shows %d s run", job, seconds)
}

// WhyInterrupted is a job whose receipt says the provider's side interrupted it.
func WhyInterrupted(job, reason string) string {
	return fmt.Sprintf("job %s interrupted: %s", job, reason)
}

// SignedScore is a score record that passed the checks.
type SignedScore struct {
	ScoreRecord
	Signer peer.ID
	Raw    []byte
}

// CheckScore opens a score record: signed by a trusted coordinator, unexpired, sane.
func CheckScore(raw []byte, now time.Time, trust Trust) (*SignedScore, error) {
	env, err := openKind(raw, KindScore)
	if err != nil {
		return nil, err
	}
	var s ScoreRecord
	if err := decodePayload(env, ScoreVersion, &s, func() int { return s.Version }); err != nil {
		return nil, err
	}
	if s.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: score names coordinator %s but is signed by %s", ErrWrongSigner, s.Coordinator, env.Signer)
	}
	if _, err := peer.Decode(s.Provider); err != nil || s.Seq == 0 || s.Score < 0 || s.Score > 100 || len(s.Why) > 20 {
		return nil, invalid(KindScore, "provider, seq or score out of range")
	}
	// Dates before trust: a record dated far in the future is its author's work, trusted
	// or not (an honest relay would not have taken it).
	if err := checkIssued(KindScore, s.IssuedAt, s.ExpiresAt, now); err != nil {
		return nil, err
	}
	if err := trust.check(KindScore, env.Signer); err != nil {
		return nil, err
	}
	return &SignedScore{ScoreRecord: s, Signer: env.Signer, Raw: raw}, nil
}

// ScoreSyncRequest narrows a score sync to the records of some providers (empty: all). A
// provider, which does not follow the scores topic, asks for its own.
type ScoreSyncRequest struct {
	Providers []string `json:"providers,omitempty"`
}

// MaxScoreSyncRequest caps a score sync request's frame; MaxScoreSyncProviders its list.
const (
	MaxScoreSyncRequest   = 4096
	MaxScoreSyncProviders = 64
)

// Check refuses a request naming more than MaxScoreSyncProviders providers.
func (r ScoreSyncRequest) Check() error {
	if len(r.Providers) > MaxScoreSyncProviders {
		return fmt.Errorf("%w: a score sync request names %d providers, at most %d", ErrInvalid, len(r.Providers), MaxScoreSyncProviders)
	}
	return nil
}
