package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/internal/benchmarks"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Job routes of the local API (docs/api.md).

func (a *APIServer) routeJobs(mux *http.ServeMux) {
	a.route(mux, "POST /v1/jobs", a.proposeJob)
	a.route(mux, "GET /v1/jobs", func(r *http.Request) (any, error) { return a.n.renter.Jobs() })
	a.route(mux, "GET /v1/jobs/{id}", func(r *http.Request) (any, error) {
		id, err := jobID(r)
		if err != nil {
			return nil, err
		}
		return a.n.renter.JobStatus(r.Context(), id)
	})
	a.route(mux, "POST /v1/jobs/{id}/cancel", func(r *http.Request) (any, error) {
		id, err := jobID(r)
		if err != nil {
			return nil, err
		}
		return a.n.renter.CancelJob(r.Context(), id)
	})
	a.stream(mux, "GET /v1/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) error {
		id, err := jobID(r)
		if err != nil {
			return err
		}
		follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
		w.Header().Set("Content-Type", "application/octet-stream")
		// A job this node runs: its log from the job's folder, for the provider's operator.
		if j, err := a.n.ledger.GetJob(id); err == nil && j.Side == "provider" && a.n.jobs != nil {
			return a.n.jobs.Logs(r.Context(), id, follow, flushWriter{w})
		}
		_, err = a.n.renter.JobLogs(r.Context(), id, follow, flushWriter{w})
		return err
	})
	a.stream(mux, "GET /v1/jobs/{id}/output", func(w http.ResponseWriter, r *http.Request) error {
		id, err := jobID(r)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/x-tar")
		return a.n.renter.FetchOutput(r.Context(), id, w)
	})
}

func jobID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !protocol.ValidJobID(id) {
		return "", api.Invalid(errors.New("job ID: 16 lower-case hex digits"))
	}
	return id, nil
}

func (a *APIServer) proposeJob(r *http.Request) (any, error) {
	var req api.JobRequest
	if err := decodeBody(r, 1<<20, &req); err != nil {
		return nil, err
	}
	return a.n.renter.ProposeJob(r.Context(), req)
}

// flushWriter flushes after every write, so that a followed log reaches the client as it
// is written.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

// stream registers a route that writes its own body (logs, archives). An error before
// anything was written is answered as JSON; after, the body is cut short.
func (a *APIServer) stream(mux *http.ServeMux, pattern string, h func(http.ResponseWriter, *http.Request) error) {
	route := pattern[strings.IndexByte(pattern, ' ')+1:]
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusOK
		defer func() { a.n.metrics.APIRequests.WithLabelValues(route, strconv.Itoa(code)).Inc() }()
		if !a.authorized(w, r) {
			code = http.StatusUnauthorized
			return
		}
		cw := &countingWriter{ResponseWriter: w}
		if err := h(cw, r); err != nil && cw.n == 0 {
			code = errorCode(err)
			writeJSON(w, code, map[string]string{"error": err.Error()})
		}
	})
}

type countingWriter struct {
	http.ResponseWriter
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	return c.ResponseWriter.Write(p)
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Benchmark and score routes of the local API.
func (a *APIServer) routeBench(mux *http.ServeMux) {
	a.route(mux, "GET /v1/provider/maintenance", func(r *http.Request) (any, error) {
		list, err := a.n.ledger.MaintenanceList()
		ms := []api.Maintenance{}
		for _, m := range list {
			ms = append(ms, api.Maintenance(m))
		}
		var announced []protocol.MaintenanceWindow
		if a.n.publisher != nil {
			announced = a.n.publisher.MaintenanceWindows(a.n.clock.Now())
		}
		return api.MaintenanceView{Planned: ms, Announced: announced}, err
	})
	a.route(mux, "POST /v1/provider/maintenance", func(r *http.Request) (any, error) {
		var m api.Maintenance
		if err := decodeBody(r, 4096, &m); err != nil {
			return nil, err
		}
		if a.n.publisher == nil {
			return m, fmt.Errorf("%w: only providers declare maintenance", api.ErrWrongRole)
		}
		added, err := a.n.publisher.AddMaintenance(ledger.Maintenance(m))
		return api.Maintenance(added), err
	})
	a.route(mux, "DELETE /v1/provider/maintenance/{id}", func(r *http.Request) (any, error) {
		id := r.PathValue("id")
		if a.n.publisher == nil {
			return nil, fmt.Errorf("%w: no maintenance %s", api.ErrNotFound, id)
		}
		return map[string]string{"removed": id}, a.n.publisher.RemoveMaintenance(id)
	})
	a.route(mux, "GET /v1/provider/availability", func(r *http.Request) (any, error) {
		return a.availability()
	})
	a.route(mux, "PUT /v1/provider/availability", func(r *http.Request) (any, error) {
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
	})
	a.route(mux, "DELETE /v1/provider/availability", func(r *http.Request) (any, error) {
		if a.n.publisher == nil {
			return nil, fmt.Errorf("%w: only providers have an availability", api.ErrWrongRole)
		}
		if _, err := a.n.publisher.SetAvailability(r.Context(), nil); err != nil {
			return nil, err
		}
		return a.availability()
	})
	a.route(mux, "GET /v1/scores", func(r *http.Request) (any, error) {
		all := a.n.scores.Scores()
		want := r.URL.Query().Get("provider")
		if want == "" {
			return all, nil
		}
		out := []protocol.ScoreRecord{}
		for _, s := range all {
			if s.Provider == want {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w: no score record for %s (scores come from the coordinator's probes)", api.ErrNotFound, want)
		}
		return out, nil
	})
	a.route(mux, "GET /v1/bench", func(r *http.Request) (any, error) {
		if a.n.bench == nil {
			return nil, fmt.Errorf("%w: this node is a %s; providers run benchmarks", api.ErrWrongRole, a.n.cfg.Role)
		}
		last := a.n.bench.Latest()
		if last == nil {
			return nil, fmt.Errorf("%w: no benchmark run yet (gpunex bench run)", api.ErrNotFound)
		}
		return benchmarks.View(last), nil
	})
	a.stream(mux, "POST /v1/bench/run", func(w http.ResponseWriter, r *http.Request) error {
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
	})
}

// encodeProgress writes one progress line of POST /v1/bench/run.
func encodeProgress(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
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
