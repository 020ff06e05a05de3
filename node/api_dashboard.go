package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
)

// Routes of the local API made for the dashboard (docs/api.md, docs/dashboard.md).

// eventInterval is how often GET /v1/events sends the node's status.
const eventInterval = 2 * time.Second

func (a *APIServer) routeDashboard(mux *http.ServeMux) {
	// A one-time login link: only a holder of the API token may have one (a session
	// cannot mint more).
	a.route(mux, "POST /v1/dashboard/link", func(r *http.Request) (any, error) {
		// authorized() let the request through with the token (a Bearer header must have
		// matched) or with a session; only the first may make a link.
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			return nil, fmt.Errorf("%w: login links are made with the API token (gpunex dashboard)", api.ErrForbidden)
		}
		return api.DashboardLink{URL: "http://" + a.Addr() + a.dash.NewLink()}, nil
	})
	// Server-sent events: the node's status now and every eventInterval, so that pages
	// follow the node without reloading.
	a.stream(mux, "GET /v1/events", func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		tick := time.NewTicker(eventInterval)
		defer tick.Stop()
		for {
			b, err := json.Marshal(a.n.Status(a.started))
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "event: status\ndata: %s\n\n", b); err != nil {
				return nil
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			select {
			case <-r.Context().Done():
				return nil
			case <-tick.C:
			}
		}
	})
	a.route(mux, "GET /v1/provider/history", a.history)
	a.route(mux, "GET /v1/provider/gpus", func(r *http.Request) (any, error) {
		if a.n.gpus == nil {
			return nil, fmt.Errorf("%w: this node is a %s, not a provider", api.ErrWrongRole, a.n.cfg.Role)
		}
		return a.n.gpus.views(), nil
	})
}

// dashboardStore is the file the dashboard keeps its sessions in, in the node's home (""
// for a node without one: sessions in memory only).
func (n *Node) dashboardStore() string {
	if n.home == "" {
		return ""
	}
	return filepath.Join(n.home, "dashboard-sessions.json")
}
