package api

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Types of a job's input (POST /v1/jobs with inputs, GET /v1/uploads).

// InputProgress is where a job's input stands: hashed on this machine, then sent to the
// provider (only the chunks it does not hold already), then assembled there.
type InputProgress struct {
	// Progress is the name the request gave (JobRequest.Progress); Job and Provider are
	// set once the job is leased.
	Progress string `json:"progress,omitempty"`
	Job      string `json:"job,omitempty"`
	Provider string `json:"provider,omitempty"`
	// Phase is "hashing", "uploading", "done" or "failed" (Error says why).
	Phase string `json:"phase"`
	Error string `json:"error,omitempty"`
	// Bytes is what the input's files hold; Hashed how much of it was hashed. Held is what
	// the provider held already (not sent again), Sent what was sent, and Rate that
	// sending's pace in bytes a second, ETASeconds the time left at it.
	Bytes      int64     `json:"bytes"`
	Hashed     int64     `json:"hashed_bytes"`
	Held       int64     `json:"held_bytes"`
	Sent       int64     `json:"sent_bytes"`
	Rate       int64     `json:"rate_bytes_per_second"`
	ETASeconds int64     `json:"eta_seconds"`
	StartedAt  time.Time `json:"started_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Uploads lists the inputs this node is hashing or sending, and those that ended in the
// last minute.
func (c *Client) Uploads(ctx context.Context) ([]InputProgress, error) {
	var v []InputProgress
	return v, c.Do(ctx, http.MethodGet, "/v1/uploads", nil, &v)
}

// BytesText writes a byte count for people: "512.0 MiB", "1.5 GiB".
func BytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
