package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// The local API: JSON over HTTP on loopback, every route but /metrics and /healthz behind
// the bearer token in api.token. docs/api.md lists the routes.

// Status is the answer of GET /v1/status.
type Status struct {
	PeerID      string    `json:"peer_id"`
	Role        string    `json:"role"`
	Version     string    `json:"version"`
	Addrs       []string  `json:"addrs"`
	Peers       int       `json:"peers"`
	OffersKnown int       `json:"offers_known"`
	StartedAt   time.Time `json:"started_at"`
}

// OfferRecordView is the answer of GET /v1/offers/record.
type OfferRecordView struct {
	Provider string          `json:"provider"`
	Offer    *protocol.Offer `json:"offer"`
	Raw      []byte          `json:"raw"` // the signed envelope as received (base64 in JSON)
}

// SetPriceRequest is the body of POST /v1/provider/price.
type SetPriceRequest struct {
	Model string `json:"model"`
	USDC  string `json:"usdc"`
}

// APIServer serves the local API of a node.
type APIServer struct {
	n       *Node
	token   string
	started time.Time
	srv     *http.Server
	ln      net.Listener
}

// ServeAPI starts the local API on listen (a loopback host:port) and returns once it
// accepts connections.
func (n *Node) ServeAPI(listen, token string) (*APIServer, error) {
	if err := checkLoopback(listen); err != nil {
		return nil, fmt.Errorf("api.listen: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("API listen: %w", err)
	}
	a := &APIServer{n: n, token: token, started: time.Now(), ln: ln}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	a.route(mux, "GET /v1/status", a.status)
	a.route(mux, "GET /v1/offers", a.search)
	a.route(mux, "GET /v1/offers/record", a.offerRecord)
	a.route(mux, "GET /v1/provider/offer", a.ownOffer)
	a.route(mux, "POST /v1/provider/price", a.setPrice)
	a.routeOnboarding(mux)
	a.routeJobs(mux)
	a.routeMoney(mux)
	a.routeBench(mux)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go a.srv.Serve(ln)
	return a, nil
}

// Addr returns the address the API listens on.
func (a *APIServer) Addr() string { return a.ln.Addr().String() }

// Close stops the API.
func (a *APIServer) Close(ctx context.Context) error { return a.srv.Shutdown(ctx) }

// httpError carries a status code to the client.
type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func badRequest(err error) error { return &httpError{http.StatusBadRequest, err} }

func (a *APIServer) route(mux *http.ServeMux, pattern string, h func(*http.Request) (any, error)) {
	route := pattern[strings.IndexByte(pattern, ' ')+1:]
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusOK
		defer func() { a.n.metrics.APIRequests.WithLabelValues(route, strconv.Itoa(code)).Inc() }()
		if !a.authorized(w, r) {
			code = http.StatusUnauthorized
			return
		}
		v, err := h(r)
		if err != nil {
			code = errorCode(err)
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, code, v)
	})
}

// authorized checks the bearer token, answering 401 when it is wrong.
func (a *APIServer) authorized(w http.ResponseWriter, r *http.Request) bool {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !tokenEqual(auth, a.token) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong API token (see api.token in the node's home)"})
		return false
	}
	return true
}

// errorCode maps an error to its HTTP status.
func errorCode(err error) int {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.Is(err, ErrNotFound), errors.Is(err, ledger.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrWrongRole):
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// ErrWrongRole is returned when a request needs another role than the node's.
var ErrWrongRole = errors.New("not available in this node's role")

func (a *APIServer) status(r *http.Request) (any, error) {
	return a.n.Status(a.started), nil
}

// Status describes the node.
func (n *Node) Status(started time.Time) Status {
	return Status{
		PeerID:      n.id.String(),
		Role:        n.cfg.Role,
		Version:     Version,
		Addrs:       n.Addrs(),
		Peers:       len(n.host.Network().Peers()),
		OffersKnown: len(n.book.live(n.clock.Now())),
		StartedAt:   started,
	}
}

func (a *APIServer) search(r *http.Request) (any, error) {
	q := r.URL.Query()
	f := SearchFilter{Model: q.Get("model"), Region: q.Get("region"), Sort: q.Get("sort")}
	switch f.Sort {
	case "", "merit", "placement", "price", "score", "perf":
	default:
		return nil, badRequest(fmt.Errorf("sort %q: merit, placement, price, score or perf", f.Sort))
	}
	if s := q.Get("max_price"); s != "" {
		p, err := protocol.ParseUSDC(s)
		if err != nil {
			return nil, badRequest(fmt.Errorf("max_price: %w", err))
		}
		f.MaxPrice = p
	}
	if s := q.Get("min_gpus"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return nil, badRequest(fmt.Errorf("min_gpus %q: expected a non-negative integer", s))
		}
		f.MinGPUs = v
	}
	rows, err := a.n.Search(r.Context(), f)
	if rows == nil {
		rows = []OfferRow{}
	}
	return rows, err
}

func (a *APIServer) offerRecord(r *http.Request) (any, error) {
	id := r.URL.Query().Get("id")
	if _, _, err := protocol.ParseOfferID(id); err != nil {
		return nil, badRequest(err)
	}
	so, err := a.n.OfferRecord(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}

func (a *APIServer) ownOffer(r *http.Request) (any, error) {
	if a.n.prov == nil {
		return nil, fmt.Errorf("%w: this node is a %s, not a provider", ErrWrongRole, a.n.cfg.Role)
	}
	so := a.n.prov.Current()
	if so == nil {
		return nil, fmt.Errorf("%w: no offer published yet", ErrNotFound)
	}
	return OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}

func (a *APIServer) setPrice(r *http.Request) (any, error) {
	if a.n.prov == nil {
		return nil, fmt.Errorf("%w: this node is a %s, not a provider", ErrWrongRole, a.n.cfg.Role)
	}
	var req SetPriceRequest
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 4096)).Decode(&req); err != nil {
		return nil, badRequest(fmt.Errorf("request body: %w", err))
	}
	price, err := protocol.ParseUSDC(req.USDC)
	if err != nil {
		return nil, badRequest(err)
	}
	so, err := a.n.prov.SetPrice(r.Context(), req.Model, price)
	if errors.Is(err, ErrUnknownModel) || errors.Is(err, ErrBadPrice) {
		return nil, badRequest(err)
	}
	if err != nil {
		return nil, err
	}
	return OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}

// WriteAPIAddr records where the API listens, for the CLI.
func (h Home) WriteAPIAddr(addr string) error {
	return writeFileAtomic(h.Path(APIAddrFile), []byte("http://"+addr+"\n"), 0o600)
}

// RemoveAPIAddr removes api.addr when the daemon stops.
func (h Home) RemoveAPIAddr() { os.Remove(h.Path(APIAddrFile)) }

func jsonIndent(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}
