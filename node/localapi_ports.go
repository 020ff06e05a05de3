package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/dashboard"
)

// A running job's declared ports, reached by its renter through the local API: as raw
// connections (the tunnel upgrade `gpunex job forward` uses, node/api/tunnel.go), as HTTP
// proxied to the job (/v1/jobs/ID/ports/PORT/..., for API clients), and as a job page on
// an origin of its own (pPORT-JOB.localhost, what the dashboard's "Open" button opens;
// dashboard/pages.go). Websockets included. Each connection is one job tunnel
// (jobs.Renter.DialPort).

func (a *APIServer) portRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/jobs/{id}/tunnel/{port}", stream: a.jobTunnel},
		{pattern: "/v1/jobs/{id}/ports/{port}/", stream: a.jobPortProxy},
		{pattern: "POST /v1/dashboard/open", answer: a.openPage},
	}
}

// jobPort reads the job and the port a route names.
func jobPort(r *http.Request) (string, int, error) {
	id, err := jobID(r)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return "", 0, api.Invalid(fmt.Errorf("port %q: a number 1-65535", r.PathValue("port")))
	}
	return id, port, nil
}

// jobTunnel answers a tunnel upgrade: 101, then the bytes of one connection to the job's
// port, both ways.
func (a *APIServer) jobTunnel(w http.ResponseWriter, r *http.Request) error {
	id, port, err := jobPort(r)
	if err != nil {
		return err
	}
	if !api.ValidTunnelRequest(r) {
		return api.Invalid(fmt.Errorf("a tunnel request carries \"Connection: Upgrade\" and \"Upgrade: %s\"", api.TunnelUpgrade))
	}
	t, err := a.n.renter.DialPort(r.Context(), id, port)
	if err != nil {
		return err
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Close()
		return err
	}
	conn.SetDeadline(time.Time{}) // the server's, for reading a request, not for a tunnel
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.TunnelUpgrade + "\r\n\r\n")
	if err := buf.Flush(); err != nil {
		conn.Close()
		t.Close()
		return nil
	}
	if n := buf.Reader.Buffered(); n > 0 { // bytes the client sent right after its request
		head, _ := buf.Reader.Peek(n)
		if _, err := t.Write(head); err != nil {
			conn.Close()
			t.Close()
			return nil
		}
	}
	api.Splice(conn, t)
	return nil
}

// jobPageCSP is added to every answer of a job's port proxied by the API.
const jobPageCSP = "sandbox allow-scripts allow-forms allow-popups allow-downloads"

// jobPortProxy proxies an HTTP request under /v1/jobs/ID/ports/PORT/ to the job's port,
// as the request for the path after it. The API's token and the dashboard's cookie are
// not passed on: the job is the provider's machine, not this node.
func (a *APIServer) jobPortProxy(w http.ResponseWriter, r *http.Request) error {
	id, port, err := jobPort(r)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("/v1/jobs/%s/ports/%d", id, port)
	a.portProxy(id, port, func(out *http.Request) {
		out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(out.URL.Path, prefix), "/")
		out.URL.RawPath = ""
		out.Header.Del("Authorization")
		out.Header.Del("Cookie")
		out.Header.Set("X-Forwarded-Prefix", prefix)
	}, func(h http.Header) {
		// The job's pages are served from the dashboard's origin here: sandboxed, their
		// scripts run in an origin of their own and reach neither the dashboard's storage
		// nor its API.
		h.Add("Content-Security-Policy", jobPageCSP)
	}).ServeHTTP(w, r)
	return nil
}

// portProxy is a reverse proxy to a job's port, each connection a job tunnel; rewrite
// adapts the request passed on, answer the headers of the job's answer.
func (a *APIServer) portProxy(id string, port int, rewrite func(*http.Request), answer func(http.Header)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port)
			rewrite(pr.Out)
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return a.n.renter.DialPort(ctx, id, port)
			},
			DisableKeepAlives: true,
		},
		ModifyResponse: func(resp *http.Response) error {
			answer(resp.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			status := http.StatusBadGateway
			if errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrConflict) {
				status = api.HTTPStatus(err)
			}
			writeJSON(w, status, map[string]string{"error": err.Error()})
		},
	}
}

// openPage answers POST /v1/dashboard/open: the one-time URL that opens a running job's
// port in the session's browser, on the job page's own origin (dashboard/pages.go).
func (a *APIServer) openPage(r *http.Request) (any, error) {
	var req api.OpenPageRequest
	if err := decodeBody(r, 4096, &req); err != nil {
		return nil, err
	}
	if !jobIDPattern.MatchString(req.Job) {
		return nil, api.Invalid(fmt.Errorf("job %q: 16 hexadecimal digits", req.Job))
	}
	if err := a.n.renter.CheckPort(req.Job, req.Port); err != nil {
		return nil, err
	}
	url, err := a.dash.NewPageTicket(r, req.Job, req.Port)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", api.ErrForbidden, err)
	}
	return api.DashboardLink{URL: url}, nil
}

// jobIDPattern is a job's id as a job page's host names it.
var jobIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// serveJobPage answers every request whose Host names a job page (pPORT-JOB.localhost):
// its ticket taken at dashboard.PageOpenPath, then the job's own answers, proxied with the
// path unchanged, for a browser holding that page's cookie. The dashboard's headers are
// not set: the page is the job's, on an origin that holds nothing of the node's.
func (a *APIServer) serveJobPage(w http.ResponseWriter, r *http.Request, id string, port int) {
	code := http.StatusOK
	defer func() { a.n.metrics.APIRequests.WithLabelValues("job page", strconv.Itoa(code)).Inc() }()
	refuse := func(why string) {
		code = http.StatusForbidden
		w.Header().Set("Content-Security-Policy", "default-src 'none'")
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, why, code)
	}
	if r.URL.Path == dashboard.PageOpenPath {
		if !a.dash.OpenPage(w, r, id, port) {
			refuse("this link was used, has expired, or is not for this page: open the port again from the dashboard")
			return
		}
		// A refresh to the job's root: a navigation of this host, which sends the cookie just
		// set (a redirect would still count as the dashboard's navigation).
		w.Header().Set("Content-Security-Policy", "default-src 'none'")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><meta http-equiv="refresh" content="0;url=/"><title>gpunex</title>`)
		return
	}
	if !a.dash.PageAuthorized(r, id, port) {
		refuse("open this job's port from the node's dashboard (Jobs, then Open)")
		return
	}
	a.portProxy(id, port, func(out *http.Request) { a.dash.StripPageCookie(out.Header) }, func(http.Header) {}).ServeHTTP(w, r)
}
