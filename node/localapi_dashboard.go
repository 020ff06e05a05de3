package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
)

// Routes of the local API made for the dashboard (docs/api.md, docs/dashboard.md).

// downloadable is the API paths a download ticket may stand for.
var downloadable = regexp.MustCompile(`^/v1/jobs/[0-9a-f]{16}/output$`)

// serveDownload follows a download ticket: the API path it stands for is served as if the
// session had asked for it with its key, as an attachment.
func (a *APIServer) serveDownload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "a download is a GET", http.StatusMethodNotAllowed)
		return
	}
	path, ok := a.dash.TakeTicket(r, strings.TrimPrefix(r.URL.Path, "/download/"))
	if !ok {
		http.Error(w, "this download link was used, has expired, or belongs to another session: ask for the download again", http.StatusForbidden)
		return
	}
	r2 := r.Clone(context.WithValue(r.Context(), ticketKey{}, true))
	r2.URL.Path, r2.URL.RawPath, r2.RequestURI = path, "", path
	parts := strings.Split(path, "/")
	a.mux.ServeHTTP(&attachment{ResponseWriter: w, name: parts[3] + "-output.tar"}, r2)
}

// attachment names the answer a file to save only when it is one (200): an error (a job
// with no output, gone, not this node's) stays a page the browser shows, not an error body
// saved under the tar's name.
type attachment struct {
	http.ResponseWriter
	name        string
	wroteHeader bool
}

func (w *attachment) WriteHeader(code int) {
	if !w.wroteHeader && code == http.StatusOK {
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", w.name))
	}
	w.wroteHeader = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *attachment) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes a streamed tar on as it is written.
func (w *attachment) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// ticketKey marks a request a download ticket authorized.
type ticketKey struct{}

// eventInterval is how often GET /v1/events sends the node's status.
const eventInterval = 2 * time.Second

func (a *APIServer) dashboardRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "POST /v1/dashboard/link", answer: a.dashboardLink},
		{pattern: "POST /v1/dashboard/download", answer: a.downloadTicket},
		{pattern: "GET /v1/events", stream: a.events},
	}
}

// dashboardLink answers POST /v1/dashboard/link: a one-time login link. Only a holder of
// the API token may have one (a session cannot mint more).
func (a *APIServer) dashboardLink(r *http.Request) (any, error) {
	// authorized() let the request through with the token (a Bearer header must have
	// matched) or with a session; only the first may make a link.
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		return nil, fmt.Errorf("%w: login links are made with the API token (gpunex dashboard)", api.ErrForbidden)
	}
	return api.DashboardLink{URL: "http://" + a.Addr() + a.dash.NewLink()}, nil
}

// downloadTicket answers POST /v1/dashboard/download: a one-time download ticket for a
// session (dashboard.NewTicket). The browser then follows /download/TICKET and saves the
// answer to disk as it arrives.
func (a *APIServer) downloadTicket(r *http.Request) (any, error) {
	var req api.DownloadRequest
	if err := decodeBody(r, 4096, &req); err != nil {
		return nil, err
	}
	if !downloadable.MatchString(req.Path) {
		return nil, api.Invalid(fmt.Errorf("path %q: only a job's output (/v1/jobs/ID/output) is downloaded this way", req.Path))
	}
	url, err := a.dash.NewTicket(r, req.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", api.ErrForbidden, err)
	}
	return api.DashboardLink{URL: url}, nil
}

// events answers GET /v1/events with server-sent events: the node's status now and every
// eventInterval, so that pages follow the node without reloading.
func (a *APIServer) events(w http.ResponseWriter, r *http.Request) error {
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
}

// dashboardStore is the file the dashboard keeps its sessions in, in the node's home (""
// for a node without one: sessions in memory only).
func (n *Node) dashboardStore() string {
	if n.home == "" {
		return ""
	}
	return filepath.Join(n.home, "dashboard-sessions.json")
}
