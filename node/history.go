package node

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/benchmarks"
	"github.com/gpunex/gpunex/protocol"
)

// A provider's own history, for the charts of its dashboard (ledger/history.go): the score
// records its coordinators give it, its benchmark runs (kept by the benchmark runner) and
// the uptime probes it answers, counted per hour.

// probesKeep is how long the hourly probe counts are kept.
const probesKeep = 35 * 24 * time.Hour

// keepHistory makes a provider keep its own score records as they arrive.
func (n *Node) keepHistory() {
	self := n.peer.ID.String()
	n.scores.OnTake(func(s *protocol.SignedScore) {
		if s.Provider != self {
			return
		}
		p := api.ScorePoint{Coordinator: s.Coordinator, Score: s.Score, Uptime: s.Uptime, Completion: s.Completion,
			Consistency: s.Consistency, Why: s.Why}
		// Keyed by the record's own time: the same record again (after a restart) replaces itself.
		if err := n.ledger.AddHistory(ledger.HistoryScores, s.IssuedAt, p, benchmarks.HistoryKeep); err != nil {
			n.log.Warn("score not kept in the history", "err", err)
		}
	})
}

// probeAnswered counts an uptime proof sent in the current hour.
func (n *Node) probeAnswered() {
	if err := n.ledger.CountHistory(ledger.HistoryProbes, n.clock.Now().UTC().Truncate(time.Hour), probesKeep); err != nil {
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
		pts, err := a.n.ledger.History(series, v.From)
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

// uptimeWeek sets the last 168 hours of the availability in force (less the maintenance
// planned) against the probes answered in each. The schedule is today's: hours declared
// under an earlier schedule are judged by this one.
func (a *APIServer) uptimeWeek(now time.Time) (api.UptimeWeek, error) {
	sched, _, err := a.n.publisher.Availability()
	if err != nil {
		return api.UptimeWeek{}, err
	}
	first := now.Truncate(time.Hour).Add(-167 * time.Hour)
	pts, err := a.n.ledger.History(ledger.HistoryProbes, first)
	if err != nil {
		return api.UptimeWeek{}, err
	}
	probes := map[int64]int{}
	for _, p := range pts {
		c, _ := strconv.Atoi(string(p.Value))
		probes[p.At.Unix()] = c
	}
	maint := a.n.publisher.MaintenanceWindows(first)
	w := api.UptimeWeek{Timezone: sched.Timezone(), Hours: make([]api.UptimeHour, 0, 168)}
	for h := first; !h.After(now); h = h.Add(time.Hour) {
		mid := h.Add(30 * time.Minute)
		hour := api.UptimeHour{Start: h, Declared: sched.Open(mid) && !protocol.InMaintenance(maint, mid), Probes: probes[h.Unix()]}
		// The current hour is not over: it counts once it is answered.
		if hour.Declared && (h.Add(time.Hour).Before(now) || hour.Probes > 0) {
			w.Declared++
			if hour.Probes > 0 {
				w.Answered++
			}
		}
		w.Hours = append(w.Hours, hour)
	}
	return w, nil
}
