package node

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/dashboard"
	"github.com/gpunex/gpunex/node/internal/money"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The local API: JSON over HTTP on loopback, every route but /metrics and /healthz behind
// the bearer token in api.token, or a dashboard session (node/dashboard) standing for it.
// docs/api.md lists the routes; docs/dashboard.md the pages on the same listener.
//
// This file is the server: the listener, the route table, authentication and the role
// guards. Each group of routes lives in a localapi_GROUP.go file, as a table of patterns
// and the named method answering each; localapi_request.go holds what every handler reads
// requests and writes answers with.

// APIServer serves the local API of a node.
type APIServer struct {
	n       *Node
	token   string
	started time.Time
	srv     *http.Server
	ln      net.Listener
	mux     *http.ServeMux
	metrics http.Handler
	dash    *dashboard.Server
	// consoles are the dashboard's shells in rented jobs (localapi_console.go), by id.
	consolesMu sync.Mutex
	consoles   map[string]*console
	// stop ends every request's context when the API closes: followed logs and the
	// dashboard's event streams would otherwise hold the shutdown.
	stop context.CancelFunc
}

// apiRoute is one route of the local API: its pattern ("METHOD /path") and the method
// answering it, either with a value sent as JSON (answer) or by writing its own body
// (stream: logs, archives, progress lines, events).
type apiRoute struct {
	pattern string
	answer  func(*http.Request) (any, error)
	stream  func(http.ResponseWriter, *http.Request) error
}

// routes lists every route of the local API, by group.
func (a *APIServer) routes() [][]apiRoute {
	return [][]apiRoute{
		a.nodeRoutes(),
		a.offerRoutes(),
		a.onboardingRoutes(),
		a.modelRoutes(),
		a.jobRoutes(),
		a.execRoutes(),
		a.consoleRoutes(),
		a.portRoutes(),
		a.providerRoutes(),
		a.payoutRoutes(),
		a.moneyRoutes(),
		a.dashboardRoutes(),
	}
}

// ServeAPI starts the local API on listen (a loopback host:port) and returns once it
// accepts connections.
func (n *Node) ServeAPI(listen, token string) (*APIServer, error) {
	if err := config.CheckLoopback(listen); err != nil {
		return nil, fmt.Errorf("api.listen: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("API listen: %w", err)
	}
	a := &APIServer{n: n, token: token, started: time.Now(), ln: ln, mux: http.NewServeMux(), dash: dashboard.New(ln.Addr().String(), n.dashboardStore()),
		consoles: map[string]*console{},
		metrics:  promhttp.HandlerFor(n.metrics.Registry, promhttp.HandlerOpts{})}
	a.dash.Register(a.mux)
	a.mux.HandleFunc("GET /metrics", a.serveMetrics)
	a.mux.HandleFunc("GET /healthz", serveHealth)
	for _, group := range a.routes() {
		for _, rt := range group {
			a.handle(rt)
		}
	}
	base, stop := context.WithCancel(context.Background())
	a.stop = stop
	a.srv = &http.Server{BaseContext: func(net.Listener) context.Context { return base }, Handler: http.HandlerFunc(a.serveHTTP), ReadHeaderTimeout: 5 * time.Second}
	go a.srv.Serve(ln)
	return a, nil
}

// serveHTTP is the listener's handler: a job page's host to its job, then the security headers on every answer, no caching of
// the API, download tickets followed, then the routes.
func (a *APIServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if job, port, ok := dashboard.PageHost(r.Host); ok && a.n.renter != nil {
		a.serveJobPage(w, r, job, port) // a job's own page, on its own origin
		return
	}
	dashboard.SecurityHeaders(w.Header())
	if strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/download/") {
		w.Header().Set("Cache-Control", "no-store") // nothing of the API in a browser's cache
	}
	if strings.HasPrefix(r.URL.Path, "/download/") {
		a.serveDownload(w, r)
		return
	}
	a.mux.ServeHTTP(w, r)
}

// serveMetrics answers GET /metrics, which needs no token, only to a request naming this
// machine by a loopback address (as the dashboard does): a web page whose host name was made
// to resolve to 127.0.0.1 (DNS rebinding) would otherwise read the node's counters.
func (a *APIServer) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if !dashboard.LoopbackHost(r.Host) {
		http.Error(w, "the metrics answer only on a loopback address", http.StatusForbidden)
		return
	}
	a.metrics.ServeHTTP(w, r)
}

// serveHealth answers GET /healthz: the node is up.
func serveHealth(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }

// Addr returns the address the API listens on.
func (a *APIServer) Addr() string { return a.ln.Addr().String() }

// Close stops the API.
func (a *APIServer) Close(ctx context.Context) error {
	a.stop()
	return a.srv.Shutdown(ctx)
}

// handle registers a route behind authorization, counting its requests by route and
// status. An answer's error is sent as JSON with its status; a stream's error only when
// nothing was written yet (after, the body is cut short).
func (a *APIServer) handle(rt apiRoute) {
	route := rt.pattern[strings.IndexByte(rt.pattern, ' ')+1:]
	a.mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusOK
		defer func() { a.n.metrics.APIRequests.WithLabelValues(route, strconv.Itoa(code)).Inc() }()
		if !a.authorized(w, r) {
			code = http.StatusUnauthorized
			return
		}
		if rt.stream != nil {
			cw := &countingWriter{ResponseWriter: w}
			if err := rt.stream(cw, r); err != nil && cw.n == 0 {
				code = writeError(w, err)
			}
			return
		}
		v, err := rt.answer(r)
		if err != nil {
			code = writeError(w, err)
			return
		}
		writeJSON(w, code, v)
	})
}

// authorized checks the bearer token, or else a dashboard session (its cookie and its key),
// answering 401 when neither is there and 403 when a session's request is refused.
func (a *APIServer) authorized(w http.ResponseWriter, r *http.Request) bool {
	if ticketed, _ := r.Context().Value(ticketKey{}).(bool); ticketed {
		return true // serveDownload spent a ticket of a live session for this very path
	}
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if subtle.ConstantTimeCompare([]byte(auth), []byte(a.token)) == 1 {
			return true
		}
	} else if ok, why := a.dash.Authorize(r); ok {
		return true
	} else if why != "" {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": why})
		return false
	}
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong API token (see api.token in the node's home)"})
	return false
}

// Role guards: a route of another role's answers 409 with what the node is.

// providerOnly refuses a route on a node that is not a provider.
func (a *APIServer) providerOnly() error {
	if a.n.publisher == nil {
		return fmt.Errorf("%w: this node is a %s, not a provider", api.ErrWrongRole, a.n.cfg.Role)
	}
	return nil
}

func (a *APIServer) needApplicant() error {
	if a.n.applicant == nil {
		return fmt.Errorf("%w: this node is a %s; only providers apply", api.ErrWrongRole, a.n.cfg.Role)
	}
	return nil
}

func (a *APIServer) needCoordinator() error {
	if a.n.coord == nil {
		return fmt.Errorf("%w: this node is a %s, not a coordinator", api.ErrWrongRole, a.n.cfg.Role)
	}
	return nil
}

// settlement returns the coordinator's settlement, or ErrWrongRole saying that what was
// asked is a coordinator's.
func (a *APIServer) settlement(what string) (*money.Settlement, error) {
	if a.n.settlement == nil {
		return nil, fmt.Errorf("%w: %s", api.ErrWrongRole, what)
	}
	return a.n.settlement, nil
}
