package protocol

import (
	"math"
	"time"
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
