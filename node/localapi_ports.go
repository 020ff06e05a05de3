package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
)

// A running job's declared ports, reached by its renter through the local API: as raw
// connections (the tunnel upgrade `gpunex job forward` uses, node/api/tunnel.go), and as
// HTTP proxied to the job (/v1/jobs/ID/ports/PORT/..., what the dashboard's "Open" link
// points at; websockets included). Both behind the API's own authorization; each
// connection is one job tunnel (jobs.Renter.DialPort).

func (a *APIServer) portRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/jobs/{id}/tunnel/{port}", stream: a.jobTunnel},
		{pattern: "/v1/jobs/{id}/ports/{port}/", stream: a.jobPortProxy},
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
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port)
			pr.Out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(pr.In.URL.Path, prefix), "/")
			pr.Out.URL.RawPath = ""
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return a.n.renter.DialPort(ctx, id, port)
			},
			DisableKeepAlives: true,
		},
		// The job's pages are served from the dashboard's origin: sandboxed, their scripts run
		// in an origin of their own and reach neither the dashboard's storage nor its API.
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Add("Content-Security-Policy", jobPageCSP)
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
	proxy.ServeHTTP(w, r)
	return nil
}
