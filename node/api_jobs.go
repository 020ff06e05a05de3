package node

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Job routes of the local API (docs/api.md).

func (a *APIServer) routeJobs(mux *http.ServeMux) {
	a.route(mux, "POST /v1/jobs", a.proposeJob)
	a.route(mux, "GET /v1/jobs", func(r *http.Request) (any, error) { return a.n.Jobs() })
	a.route(mux, "GET /v1/jobs/{id}", func(r *http.Request) (any, error) {
		id, err := jobID(r)
		if err != nil {
			return nil, err
		}
		return a.n.JobStatus(r.Context(), id)
	})
	a.route(mux, "POST /v1/jobs/{id}/cancel", func(r *http.Request) (any, error) {
		id, err := jobID(r)
		if err != nil {
			return nil, err
		}
		return a.n.CancelJob(r.Context(), id)
	})
	a.stream(mux, "GET /v1/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) error {
		id, err := jobID(r)
		if err != nil {
			return err
		}
		follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
		w.Header().Set("Content-Type", "application/octet-stream")
		_, err = a.n.JobLogs(r.Context(), id, follow, flushWriter{w})
		return err
	})
	a.stream(mux, "GET /v1/jobs/{id}/output", func(w http.ResponseWriter, r *http.Request) error {
		id, err := jobID(r)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/x-tar")
		return a.n.FetchOutput(r.Context(), id, w)
	})
}

func jobID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !protocol.ValidJobID(id) {
		return "", badRequest(errors.New("job ID: 16 lower-case hex digits"))
	}
	return id, nil
}

func (a *APIServer) proposeJob(r *http.Request) (any, error) {
	var req JobRequest
	if err := decodeBody(r, 1<<20, &req); err != nil {
		return nil, err
	}
	v, err := a.n.ProposeJob(r.Context(), req)
	if errors.Is(err, ErrJobRefused) {
		return nil, &httpError{http.StatusConflict, err}
	}
	return v, err
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
		ms, err := a.n.ledger.MaintenanceList()
		if ms == nil {
			ms = []ledger.Maintenance{}
		}
		return MaintenanceView{Planned: ms, Announced: a.n.maintenanceWindows(a.n.clock.Now())}, err
	})
	a.route(mux, "POST /v1/provider/maintenance", func(r *http.Request) (any, error) {
		var m ledger.Maintenance
		if err := decodeBody(r, 4096, &m); err != nil {
			return nil, err
		}
		return a.n.AddMaintenance(m)
	})
	a.route(mux, "DELETE /v1/provider/maintenance/{id}", func(r *http.Request) (any, error) {
		return map[string]string{"removed": r.PathValue("id")}, a.n.RemoveMaintenance(r.PathValue("id"))
	})
	a.route(mux, "GET /v1/scores", func(r *http.Request) (any, error) {
		all := a.n.Scores()
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
			return nil, fmt.Errorf("%w: no score record for %s (scores come from the coordinator's probes)", ErrNotFound, want)
		}
		return out, nil
	})
	a.route(mux, "GET /v1/bench", func(r *http.Request) (any, error) {
		if a.n.bench == nil {
			return nil, fmt.Errorf("%w: this node is a %s; providers run benchmarks", ErrWrongRole, a.n.cfg.Role)
		}
		last := a.n.bench.Latest()
		if last == nil {
			return nil, fmt.Errorf("%w: no benchmark run yet (gpunex bench run)", ErrNotFound)
		}
		return attestationView(last), nil
	})
	a.stream(mux, "POST /v1/bench/run", func(w http.ResponseWriter, r *http.Request) error {
		if a.n.bench == nil {
			return fmt.Errorf("%w: this node is a %s; providers run benchmarks", ErrWrongRole, a.n.cfg.Role)
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
		return encodeProgress(fw, map[string]any{"result": attestationView(att)})
	})
}
