package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/benchmarks"
	"github.com/gpunex/gpunex/protocol"
)

// A provider's own history, for the charts of its dashboard (ledger/history.go): the score
// records its coordinators give it, its benchmark runs (kept by the benchmark runner) and
// the uptime probes it answers, counted by quarter of an hour (so that hours can be told
// in any time zone, those a quarter or half an hour off UTC included).

// probesKeep is how long the probe counts are kept; probeBucket what they are counted by.
const (
	probesKeep  = 35 * 24 * time.Hour
	probeBucket = 15 * time.Minute
)

// keepHistory makes a provider keep its own score records as they arrive.
func (n *Node) keepHistory() {
	self := n.peer.ID.String()
	// The latest sequence kept from each coordinator: after a restart, the records received
	// again are not kept twice.
	var mu sync.Mutex
	kept := map[string]uint64{}
	if pts, err := n.ledger.History.History(ledger.HistoryScores, n.clock.Now().Add(-protocol.ScoreTTL)); err == nil {
		for _, pt := range pts {
			var p api.ScorePoint
			if json.Unmarshal(pt.Value, &p) == nil {
				kept[p.Coordinator] = max(kept[p.Coordinator], p.Seq)
			}
		}
	}
	n.scores.OnTake(func(s *protocol.SignedScore) {
		if s.Provider != self {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if s.Seq <= kept[s.Coordinator] {
			return
		}
		kept[s.Coordinator] = s.Seq
		p := api.ScorePoint{Coordinator: s.Coordinator, Seq: s.Seq, Score: s.Score, Uptime: s.Uptime, Completion: s.Completion,
			Consistency: s.Consistency, Why: s.Why}
		// Kept at the time it arrived, not the time it claims: a record dated long ago or far
		// ahead would otherwise drop the points after it or outlive the series' retention.
		if err := n.ledger.History.AddHistory(ledger.HistoryScores, n.clock.Now().UTC(), p, benchmarks.HistoryKeep); err != nil {
			n.log.Warn("score not kept in the history", "err", err)
		}
	})
}

// probeAnswered counts an uptime proof sent in the current quarter of an hour.
func (n *Node) probeAnswered() {
	if err := n.ledger.History.CountHistory(ledger.HistoryProbes, n.clock.Now().UTC().Truncate(probeBucket), probesKeep); err != nil {
		n.log.Warn("probe not counted in the history", "err", err)
	}
}

// history answers GET /v1/provider/history?days=N (30 by default, at most 180).
func (a *APIServer) history(r *http.Request) (any, error) {
	if a.n.publisher == nil {
		return nil, fmt.Errorf("%w: this node is a %s; providers keep a history", api.ErrWrongRole, a.n.cfg.Role)
	}
	days := 30
	if v := r.URL.Query().Get("days"); v != "" {
		d, err := strconv.Atoi(v)
		if err != nil || d < 1 || d > 180 {
			return nil, api.Invalid(fmt.Errorf("days %q: expected 1 to 180", v))
		}
		days = d
	}
	now := a.n.clock.Now().UTC()
	v := api.HistoryView{From: now.Add(-time.Duration(days) * 24 * time.Hour)}
	for series, into := range map[string]*[]api.HistoryItem{ledger.HistoryScores: &v.Scores, ledger.HistoryBench: &v.Bench} {
		pts, err := a.n.ledger.History.History(series, v.From)
		if err != nil {
			return nil, err
		}
		*into = make([]api.HistoryItem, len(pts))
		for i, p := range pts {
			(*into)[i] = api.HistoryItem{At: p.At, Value: p.Value}
		}
	}
	week, err := a.uptimeWeek(now)
	if err != nil {
		return nil, err
	}
	v.Week = week
	return v, nil
}

// uptimeWeek sets the last 168 hours of the provider's time zone (the availability's)
// against the availability in force (less the maintenance planned) and the probes answered
// in each. The schedule is today's: hours declared under an earlier schedule are judged by
// this one.
func (a *APIServer) uptimeWeek(now time.Time) (api.UptimeWeek, error) {
	sched, _, err := a.n.publisher.Availability()
	if err != nil {
		return api.UptimeWeek{}, err
	}
	loc, err := time.LoadLocation(sched.Timezone())
	if err != nil {
		loc = time.UTC
	}
	// The start of the current hour there, then 167 hours back: a zone's hours are whole
	// hours of absolute time apart, whatever its offset from UTC.
	// (Taken from the instant itself, not rebuilt from the wall clock, which names two
	// instants in the hour repeated when clocks go back.)
	local := now.In(loc)
	first := now.Truncate(time.Minute).Add(-time.Duration(local.Minute()) * time.Minute).Add(-167 * time.Hour)
	pts, err := a.n.ledger.History.History(ledger.HistoryProbes, first)
	if err != nil {
		return api.UptimeWeek{}, err
	}
	probes := map[int64]int{} // by the hour's index from first
	for _, p := range pts {
		c, _ := strconv.Atoi(string(p.Value))
		probes[int64(p.At.Sub(first)/time.Hour)] += c
	}
	// Hours before the first probe this node ever answered (kept 35 days) are not counted:
	// the node was not installed yet, or not yet certified, and nobody probed it.
	since, probed, err := a.n.ledger.History.HistoryStart(ledger.HistoryProbes)
	if err != nil {
		return api.UptimeWeek{}, err
	}
	maint := a.n.publisher.MaintenanceWindows(first)
	w := api.UptimeWeek{Timezone: sched.Timezone(), Hours: make([]api.UptimeHour, 0, 168)}
	if probed {
		w.Since = &since
	}
	for i := int64(0); i < 168; i++ {
		h := first.Add(time.Duration(i) * time.Hour)
		mid := h.Add(30 * time.Minute)
		hour := api.UptimeHour{Start: h.UTC(), Declared: sched.Open(mid) && !protocol.InMaintenance(maint, mid), Probes: probes[i]}
		counted := probed && h.Add(time.Hour).After(since)
		// The current hour is not over: it counts once it is answered.
		if counted && hour.Declared && (h.Add(time.Hour).Before(now) || hour.Probes > 0) {
			w.Declared++
			if hour.Probes > 0 {
				w.Answered++
			}
		}
		w.Hours = append(w.Hours, hour)
	}
	return w, nil
}
