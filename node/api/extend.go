package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
)

// ExtendRequest asks for a running rented job's lease to last longer (POST
// /v1/jobs/{id}/extend; docs/protocols/jobs.md, "Extending a lease").
type ExtendRequest struct {
	// Hours added to the lease: more than nothing, at most the job's --max-hours.
	Hours float64 `json:"hours"`
}

// Seconds are the whole seconds the request adds (rounded up), or an error when Hours is
// not a positive number of hours, at most 720 (the longest lease).
func (r ExtendRequest) Seconds() (int64, error) {
	if r.Hours <= 0 || math.IsNaN(r.Hours) || r.Hours > 24*30 {
		return 0, Invalid(errors.New("hours: a positive number of hours, at most 720"))
	}
	return int64(math.Ceil(r.Hours * 3600)), nil
}

// ExtendJob asks the node to extend a running rented job's lease by hours and returns the
// job with its new end.
func (c *Client) ExtendJob(ctx context.Context, id string, hours float64) (JobView, error) {
	var v JobView
	return v, c.Do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/extend", ExtendRequest{Hours: hours}, &v)
}
