package node

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/benchmarks"
	"github.com/gpunex/gpunex/protocol"
)

// A provider's routes of the local API (docs/api.md): its planned maintenance, its
// availability, its benchmarks, its GPUs and its history (history.go). Its offer and prices
// are in localapi_offers.go, its payout settings in localapi_payout.go.

func (a *APIServer) providerRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/provider/maintenance", answer: a.maintenance},
		{pattern: "POST /v1/provider/maintenance", answer: a.addMaintenance},
		{pattern: "DELETE /v1/provider/maintenance/{id}", answer: a.removeMaintenance},
		{pattern: "GET /v1/provider/availability", answer: a.getAvailability},
		{pattern: "PUT /v1/provider/availability", answer: a.setAvailability},
		{pattern: "DELETE /v1/provider/availability", answer: a.resetAvailability},
		{pattern: "GET /v1/bench", answer: a.latestBench},
		{pattern: "POST /v1/bench/run", stream: a.runBench},
		{pattern: "GET /v1/provider/gpus", answer: a.gpuViews},
		{pattern: "GET /v1/provider/history", answer: a.history},
	}
}

func (a *APIServer) maintenance(r *http.Request) (any, error) {
	list, err := a.n.ledger.Provider.MaintenanceList()
	ms := []api.Maintenance{}
	for _, m := range list {
		ms = append(ms, api.Maintenance(m))
	}
	var announced []protocol.MaintenanceWindow
	if a.n.publisher != nil {
		announced = a.n.publisher.MaintenanceWindows(a.n.clock.Now())
	}
	return api.MaintenanceView{Planned: ms, Announced: announced}, err
}

func (a *APIServer) addMaintenance(r *http.Request) (any, error) {
	var m api.Maintenance
	if err := decodeBody(r, 4096, &m); err != nil {
		return nil, err
	}
	if a.n.publisher == nil {
		return m, fmt.Errorf("%w: only providers declare maintenance", api.ErrWrongRole)
	}
	added, err := a.n.publisher.AddMaintenance(ledger.Maintenance(m))
	return api.Maintenance(added), err
}

func (a *APIServer) removeMaintenance(r *http.Request) (any, error) {
	id := r.PathValue("id")
	if a.n.publisher == nil {
		return nil, fmt.Errorf("%w: no maintenance %s", api.ErrNotFound, id)
	}
	return map[string]string{"removed": id}, a.n.publisher.RemoveMaintenance(id)
}

func (a *APIServer) getAvailability(r *http.Request) (any, error) {
	return a.availability()
}

// setAvailability sets the weekly availability at run time (in place of config.toml's),
// following a calendar when Follow says how often to read it again.
func (a *APIServer) setAvailability(r *http.Request) (any, error) {
	var req api.Availability
	if err := decodeBody(r, 16<<10, &req); err != nil {
		return nil, err
	}
	if a.n.publisher == nil {
		return nil, fmt.Errorf("%w: only providers have an availability", api.ErrWrongRole)
	}
	set := &ledger.Availability{Timezone: req.Timezone, Windows: req.Windows, Source: req.Source}
	if req.Follow != "" {
		d, err := time.ParseDuration(req.Follow)
		if err != nil {
			return nil, api.Invalid(fmt.Errorf("follow: %w", err))
		}
		set.Follow = d
	}
	if _, err := a.n.publisher.SetAvailability(r.Context(), set); err != nil {
		return nil, err
	}
	return a.availability()
}

// resetAvailability goes back to config.toml's availability.
func (a *APIServer) resetAvailability(r *http.Request) (any, error) {
	if a.n.publisher == nil {
		return nil, fmt.Errorf("%w: only providers have an availability", api.ErrWrongRole)
	}
	if _, err := a.n.publisher.SetAvailability(r.Context(), nil); err != nil {
		return nil, err
	}
	return a.availability()
}

// availability describes the provider's availability in force.
func (a *APIServer) availability() (api.AvailabilityView, error) {
	if a.n.publisher == nil {
		return api.AvailabilityView{}, fmt.Errorf("%w: only providers have an availability", api.ErrWrongRole)
	}
	sched, set, err := a.n.publisher.Availability()
	if err != nil {
		return api.AvailabilityView{}, err
	}
	now := a.n.clock.Now()
	v := api.AvailabilityView{
		Availability: api.Availability{Timezone: sched.Timezone(), Windows: sched.Windows()},
		Text:         sched.String(), FromConfig: set == nil, OpenNow: sched.Open(now),
	}
	if v.Windows == nil {
		v.Windows = []string{}
	}
	if next, ok := sched.NextChange(now); ok {
		v.NextChange = &next
	}
	if set != nil {
		v.Source, v.SetAt, v.Checked, v.Error = set.Source, set.SetAt, set.Checked, set.Error
		if set.Follow > 0 {
			v.Follow = set.Follow.String()
		}
	}
	return v, nil
}

// latestBench answers GET /v1/bench: the provider's latest benchmark run.
func (a *APIServer) latestBench(r *http.Request) (any, error) {
	if a.n.bench == nil {
		return nil, fmt.Errorf("%w: this node is a %s; providers run benchmarks", api.ErrWrongRole, a.n.cfg.Role)
	}
	last := a.n.bench.Latest()
	if last == nil {
		return nil, fmt.Errorf("%w: no benchmark run yet (gpunex bench run)", api.ErrNotFound)
	}
	return benchmarks.View(last), nil
}

// runBench answers POST /v1/bench/run: it runs the benchmarks now, streaming one JSON line
// per step, then the result (or the error).
func (a *APIServer) runBench(w http.ResponseWriter, r *http.Request) error {
	if a.n.bench == nil {
		return fmt.Errorf("%w: this node is a %s; providers run benchmarks", api.ErrWrongRole, a.n.cfg.Role)
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	fw := flushWriter{w}
	started := false
	att, err := a.n.bench.Run(r.Context(), func(step, steps int, what string) {
		started = true
		encodeProgress(fw, map[string]any{"step": step, "steps": steps, "what": what})
	})
	if err != nil {
		if !started {
			return err
		}
		return encodeProgress(fw, map[string]any{"error": err.Error()})
	}
	return encodeProgress(fw, map[string]any{"result": benchmarks.View(att)})
}

// gpuViews answers GET /v1/provider/gpus: each GPU as the dashboard shows it.
func (a *APIServer) gpuViews(r *http.Request) (any, error) {
	if a.n.gpus == nil {
		return nil, fmt.Errorf("%w: this node is a %s, not a provider", api.ErrWrongRole, a.n.cfg.Role)
	}
	return a.n.gpus.views(), nil
}
