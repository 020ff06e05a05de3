package api

import "context"

// DashboardLink is the answer of POST /v1/dashboard/link: a one-time login link to the
// node's web dashboard, good for five minutes.
type DashboardLink struct {
	URL string `json:"url"`
}

// GPUView is one GPU of a provider as GET /v1/provider/gpus shows it: what the driver
// reads now, and whether a job holds it or its benchmarks delisted it.
type GPUView struct {
	Index        int      `json:"index"`
	UUID         string   `json:"uuid"`
	Model        string   `json:"model"`
	Simulated    bool     `json:"simulated,omitempty"`
	TemperatureC int      `json:"temperature_c"`
	PowerWatts   float64  `json:"power_watts,omitempty"`
	Utilization  int      `json:"utilization_pct"`
	Throttle     []string `json:"throttle,omitempty"`
	// State is free, leased (a job runs on it), delisted (below its benchmark thresholds)
	// or lost (the driver cannot read it).
	State       string `json:"state"`
	DelistedWhy string `json:"delisted_why,omitempty"`
	Error       string `json:"error,omitempty"`
}

// DashboardLink asks the node for a one-time login link to its dashboard.
func (c *Client) DashboardLink(ctx context.Context) (DashboardLink, error) {
	var v DashboardLink
	return v, c.Do(ctx, "POST", "/v1/dashboard/link", nil, &v)
}

// DownloadRequest is the body of POST /v1/dashboard/download: the API path to download
// (a job's output).
type DownloadRequest struct {
	Path string `json:"path"`
}

// OpenPageRequest is the body of POST /v1/dashboard/open: the running job and the port
// whose page the session's browser opens (answered with a DashboardLink).
type OpenPageRequest struct {
	Job  string `json:"job"`
	Port int    `json:"port"`
}
