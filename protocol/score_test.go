package protocol

import (
	"math"
	"testing"
	"time"
)

// TestDecayedRatio: a new provider starts at the prior; a night-long outage pulls uptime
// down; it recovers over weeks as the outage decays; late outcomes count with their age.
func TestDecayedRatio(t *testing.T) {
	h := DefaultHalfLife
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var d DecayedRatio
	if got := d.Ratio(t0, h); got != Prior {
		t.Fatalf("no history: %v", got)
	}
	// One failure on a new provider moves it, but not to zero.
	one := d
	one.Add(t0, 0, h)
	if got := one.Ratio(t0, h); math.Abs(got-Prior*PriorWeight/(PriorWeight+1)) > 1e-12 {
		t.Fatalf("one failure: %v", got)
	}
	// A week of 5-minute probes, all answered, then a 10-hour night outage.
	at := t0
	for i := 0; i < 7*288; i++ {
		d.Add(at, 1, h)
		at = at.Add(5 * time.Minute)
	}
	before := d.Ratio(at, h)
	for i := 0; i < 120; i++ {
		d.Add(at, 0, h)
		at = at.Add(5 * time.Minute)
	}
	after := d.Ratio(at, h)
	if !(before > 0.99 && after < 0.95 && after > 0.85) {
		t.Fatalf("outage: before %.4f after %.4f", before, after)
	}
	// Recovery: four weeks of good probes bring it back above 0.99.
	for i := 0; i < 28*288; i++ {
		d.Add(at, 1, h)
		at = at.Add(5 * time.Minute)
	}
	if got := d.Ratio(at, h); got < 0.99 {
		t.Fatalf("after four good weeks: %.4f", got)
	}
	// An outcome reported late weighs what its age says.
	var a, b DecayedRatio
	a.Add(t0.Add(h), 1, h)
	a.Add(t0, 0, h) // one half-life older
	b.Add(t0.Add(h), 1, h)
	b.Add(t0.Add(h), 0, h)
	if !(a.Ratio(t0.Add(h), h) > b.Ratio(t0.Add(h), h)) || math.Abs(a.Total-1.5) > 1e-12 {
		t.Fatalf("late outcome: %+v vs %+v", a, b)
	}
	// Weight decays: one half-life later, half the outcomes remain.
	if w := a.Weight(t0.Add(2*h), h); math.Abs(w-0.75) > 1e-12 {
		t.Fatalf("weight after a half-life: %v", w)
	}
}

func TestScore(t *testing.T) {
	h := DefaultHalfLife
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var r Reliability
	if got := r.Score(now, h); got != 90 {
		t.Fatalf("new provider: %d", got)
	}
	for i := 0; i < 1000; i++ {
		r.Uptime.Add(now, 1, h)
		r.Completion.Add(now, 1, h)
		r.Consistency.Add(now, 1, h)
	}
	if got := r.Score(now, h); got != 99 {
		t.Fatalf("perfect record: %d", got)
	}
	r.Consistency = DecayedRatio{}
	for i := 0; i < 1000; i++ {
		r.Consistency.Add(now, 0.6, h) // throttled to 60% of its first benchmark
	}
	if got := r.Score(now, h); got != 91 { // 0.5 x 0.9989 + 0.3 x 0.9989 + 0.2 x 0.6024
		t.Fatalf("throttled GPU: %d", got)
	}
}

// BenchmarkScoreUpdates: 10,000 providers with 30 days of 5-minute probes (86.4 million
// outcomes), each applied in O(1); reports the time for the whole month.
func BenchmarkScoreUpdates(b *testing.B) {
	const providers, probes = 10_000, 30 * 288
	h := DefaultHalfLife
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	rs := make([]Reliability, providers)
	b.ReportAllocs()
	for n := 0; n < b.N; n++ {
		start := time.Now()
		for p := range rs {
			rs[p] = Reliability{}
			at := t0
			for i := 0; i < probes; i++ {
				rs[p].Uptime.Add(at, float64((p+i)%97&1^1), h)
				at = at.Add(5 * time.Minute)
			}
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/month-of-probes")
	}
	b.ReportMetric(float64(providers*probes), "outcomes")
}
