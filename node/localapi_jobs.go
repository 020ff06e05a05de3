package node

import (
	"net/http"
	"strconv"

	"github.com/gpunex/gpunex/node/api"
)

// Job routes of the local API (docs/api.md).

func (a *APIServer) jobRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "POST /v1/jobs", answer: a.proposeJob},
		{pattern: "GET /v1/jobs", answer: a.listJobs},
		{pattern: "GET /v1/jobs/{id}", answer: a.jobStatus},
		{pattern: "POST /v1/jobs/{id}/cancel", answer: a.cancelJob},
		{pattern: "GET /v1/jobs/{id}/logs", stream: a.jobLogs},
		{pattern: "GET /v1/jobs/{id}/output", stream: a.jobOutput},
		{pattern: "GET /v1/uploads", answer: func(*http.Request) (any, error) { return a.n.renter.Uploads(), nil }}, // inputs being sent
	}
}

func (a *APIServer) proposeJob(r *http.Request) (any, error) {
	var req api.JobRequest
	if err := decodeBody(r, 1<<20, &req); err != nil {
		return nil, err
	}
	return a.n.renter.ProposeJob(r.Context(), req)
}

func (a *APIServer) listJobs(r *http.Request) (any, error) { return a.n.renter.Jobs() }

func (a *APIServer) jobStatus(r *http.Request) (any, error) {
	id, err := jobID(r)
	if err != nil {
		return nil, err
	}
	return a.n.renter.JobStatus(r.Context(), id)
}

func (a *APIServer) cancelJob(r *http.Request) (any, error) {
	id, err := jobID(r)
	if err != nil {
		return nil, err
	}
	return a.n.renter.CancelJob(r.Context(), id)
}

// jobLogs streams a job's log (?follow=true: as it is written).
func (a *APIServer) jobLogs(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	w.Header().Set("Content-Type", "application/octet-stream")
	// A job this node runs: its log from the job's folder, for the provider's operator.
	if j, err := a.n.ledger.Jobs.GetJob(id); err == nil && j.Side == "provider" && a.n.jobs != nil {
		return a.n.jobs.Logs(r.Context(), id, follow, flushWriter{w})
	}
	_, err = a.n.renter.JobLogs(r.Context(), id, follow, flushWriter{w})
	return err
}

// jobOutput streams a finished job's output as a tar archive.
func (a *APIServer) jobOutput(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-tar")
	return a.n.renter.FetchOutput(r.Context(), id, w)
}
