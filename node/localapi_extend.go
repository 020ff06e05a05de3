package node

import (
	"net/http"

	"github.com/gpunex/gpunex/node/api"
)

// extendJob extends a running rented job's lease (POST /v1/jobs/{id}/extend {hours}): the
// hold raised at the job's coordinator, the longer lease from its provider
// (docs/protocols/jobs.md, "Extending a lease").
func (a *APIServer) extendJob(r *http.Request) (any, error) {
	id, err := jobID(r)
	if err != nil {
		return nil, err
	}
	var req api.ExtendRequest
	if err := decodeBody(r, 1<<10, &req); err != nil {
		return nil, err
	}
	secs, err := req.Seconds()
	if err != nil {
		return nil, err
	}
	return a.n.renter.ExtendJob(r.Context(), id, secs)
}
