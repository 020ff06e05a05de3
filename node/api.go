package node

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/dashboard"
	"github.com/gpunex/gpunex/node/internal/offers"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// The local API: JSON over HTTP on loopback, every route but /metrics and /healthz behind
// the bearer token in api.token, or a dashboard session (node/dashboard) standing for it.
// docs/api.md lists the routes; docs/dashboard.md the pages on the same listener.

// APIServer serves the local API of a node.
type APIServer struct {
	n       *Node
	token   string
	started time.Time
	srv     *http.Server
	ln      net.Listener
	dash    *dashboard.Server
	// stop ends every request's context when the API closes: followed logs and the
	// dashboard's event streams would otherwise hold the shutdown.
	stop context.CancelFunc
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
	a := &APIServer{n: n, token: token, started: time.Now(), ln: ln, dash: dashboard.New(ln.Addr().String(), n.dashboardStore())}
	mux := http.NewServeMux()
	a.dash.Register(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	a.route(mux, "GET /v1/status", a.status)
	a.route(mux, "GET /v1/peers/{id}", func(r *http.Request) (any, error) {
		id, err := peer.Decode(r.PathValue("id"))
		if err != nil {
			return nil, api.Invalid(fmt.Errorf("%q: not a peer ID", r.PathValue("id")))
		}
		v := api.PeerView{ID: id.String(), Path: a.n.peer.Path(id), Conns: []string{}}
		for _, c := range a.n.peer.Host.Network().ConnsToPeer(id) {
			v.Conns = append(v.Conns, c.RemoteMultiaddr().String())
		}
		return v, nil
	})
	a.route(mux, "GET /v1/clock", func(r *http.Request) (any, error) {
		ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		return a.n.wallet.ClockOffset(ctx)
	})
	a.route(mux, "GET /v1/gossip/{peer}", func(r *http.Request) (any, error) {
		p, err := peer.Decode(r.PathValue("peer"))
		if err != nil {
			return nil, api.Invalid(fmt.Errorf("peer %q: %w", r.PathValue("peer"), err))
		}
		score, known := n.peer.GossipScore(p)
		return api.GossipView{Peer: p.String(), Score: score, Known: known}, nil
	})
	a.route(mux, "GET /v1/offers", a.search)
	a.route(mux, "GET /v1/offers/record", a.offerRecord)
	a.route(mux, "GET /v1/provider/offer", a.ownOffer)
	a.route(mux, "POST /v1/provider/price", a.setPrice)
	a.routeOnboarding(mux)
	a.routeModels(mux)
	a.routeJobs(mux)
	a.routeMoney(mux)
	a.routePayout(mux)
	a.routeBench(mux)
	a.routeDashboard(mux)
	base, stop := context.WithCancel(context.Background())
	a.stop = stop
	a.srv = &http.Server{BaseContext: func(net.Listener) context.Context { return base }, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dashboard.SecurityHeaders(w.Header())
		if strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/download/") {
			w.Header().Set("Cache-Control", "no-store") // nothing of the API in a browser's cache
		}
		if strings.HasPrefix(r.URL.Path, "/download/") {
			a.serveDownload(w, r, mux)
			return
		}
		mux.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 5 * time.Second}
	go a.srv.Serve(ln)
	return a, nil
}

// Addr returns the address the API listens on.
func (a *APIServer) Addr() string { return a.ln.Addr().String() }

// Close stops the API.
func (a *APIServer) Close(ctx context.Context) error {
	a.stop()
	return a.srv.Shutdown(ctx)
}

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

// errorCode maps an error to its HTTP status: the kinds of node/api, and the ledger's
// "not found".
func errorCode(err error) int {
	code := api.HTTPStatus(err)
	if code == http.StatusInternalServerError && errors.Is(err, ledger.ErrNotFound) {
		return http.StatusNotFound
	}
	return code
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (a *APIServer) status(r *http.Request) (any, error) {
	return a.n.Status(a.started), nil
}

// Status describes the node.
func (n *Node) Status(started time.Time) api.Status {
	r := n.peer.Reachability()
	return api.Status{
		PeerID:       n.peer.ID.String(),
		Role:         n.cfg.Role,
		Version:      api.Version,
		Addrs:        n.Addrs(),
		Peers:        n.peer.Connected(),
		OffersKnown:  len(n.book.Live(n.clock.Now())),
		StartedAt:    started,
		Sandbox:      n.sandboxStatus,
		Reachability: r.State,
		Relayed:      len(r.Relays) > 0,
	}
}

func (a *APIServer) search(r *http.Request) (any, error) {
	q := r.URL.Query()
	f := api.SearchFilter{Model: q.Get("model"), Region: q.Get("region"), Sort: q.Get("sort"), Tier: q.Get("tier"), Coordinator: q.Get("coordinator")}
	switch f.Tier {
	case "", protocol.TierCommunity, protocol.TierEnterprise:
	default:
		return nil, api.Invalid(fmt.Errorf("tier %q: %s or %s", f.Tier, protocol.TierCommunity, protocol.TierEnterprise))
	}
	if f.Coordinator != "" {
		id, err := peer.Decode(f.Coordinator)
		if err != nil {
			return nil, api.Invalid(fmt.Errorf("coordinator %q: not a peer ID", f.Coordinator))
		}
		f.Coordinator = id.String()
	}
	switch q.Get("egress") {
	case "", "false", "0":
	case "true", "1":
		f.Egress = true
	default:
		return nil, api.Invalid(fmt.Errorf("egress %q: true or false", q.Get("egress")))
	}
	switch f.Sort {
	case "", "merit", "placement", "price", "score", "perf":
	default:
		return nil, api.Invalid(fmt.Errorf("sort %q: merit, placement, price, score or perf", f.Sort))
	}
	if s := q.Get("max_price"); s != "" {
		p, err := protocol.ParseUSDC(s)
		if err != nil {
			return nil, api.Invalid(fmt.Errorf("max_price: %w", err))
		}
		f.MaxPrice = p
	}
	if s := q.Get("min_gpus"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return nil, api.Invalid(fmt.Errorf("min_gpus %q: expected a non-negative integer", s))
		}
		f.MinGPUs = v
	}
	rows, err := a.n.catalogue.Search(r.Context(), f)
	if rows == nil {
		rows = []api.OfferRow{}
	}
	return rows, err
}

func (a *APIServer) offerRecord(r *http.Request) (any, error) {
	id := r.URL.Query().Get("id")
	if _, _, err := protocol.ParseOfferID(id); err != nil {
		return nil, api.Invalid(err)
	}
	so, err := a.n.catalogue.OfferRecord(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return api.OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}

func (a *APIServer) ownOffer(r *http.Request) (any, error) {
	if a.n.publisher == nil {
		return nil, fmt.Errorf("%w: this node is a %s, not a provider", api.ErrWrongRole, a.n.cfg.Role)
	}
	so := a.n.publisher.Current()
	if so == nil {
		return nil, fmt.Errorf("%w: no offer published yet", api.ErrNotFound)
	}
	return api.OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}

func (a *APIServer) setPrice(r *http.Request) (any, error) {
	if a.n.publisher == nil {
		return nil, fmt.Errorf("%w: this node is a %s, not a provider", api.ErrWrongRole, a.n.cfg.Role)
	}
	var req api.SetPriceRequest
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 4096)).Decode(&req); err != nil {
		return nil, api.Invalid(fmt.Errorf("request body: %w", err))
	}
	price, err := protocol.ParseUSDC(req.USDC)
	if err != nil {
		return nil, api.Invalid(err)
	}
	so, err := a.n.publisher.SetPrice(r.Context(), req.Model, price)
	if errors.Is(err, offers.ErrUnknownModel) || errors.Is(err, offers.ErrBadPrice) {
		return nil, api.Invalid(err)
	}
	if err != nil {
		return nil, err
	}
	return api.OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}
