package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Job tunnels through the local API: GET /v1/jobs/ID/tunnel/PORT with "Upgrade:
// gpunex-tunnel" is answered 101 Switching Protocols, after which the connection carries
// the bytes of one TCP connection to the job's port (the node opens a job tunnel for it,
// docs/protocols/jobs.md, "Job tunnels"). `gpunex job forward` makes one such request per
// connection it accepts on the renter's loopback.

// TunnelUpgrade is the Upgrade header's value of a tunnel request.
const TunnelUpgrade = "gpunex-tunnel"

// DialTunnel opens a connection to port of the running job id through the node's API.
func (c *Client) DialTunnel(ctx context.Context, id string, port int) (net.Conn, error) {
	u, err := url.Parse(c.Base)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: %v (is `gpunex node run` still running?)", ErrNotRunning, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	path := "/v1/jobs/" + url.PathEscape(id) + "/tunnel/" + strconv.Itoa(port)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", path, u.Host, c.token, TunnelUpgrade)
	in := bufio.NewReader(conn)
	resp, err := http.ReadResponse(in, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			return nil, fmt.Errorf("API GET %s: %s", path, resp.Status)
		}
		switch resp.StatusCode {
		case http.StatusBadRequest:
			return nil, kindError{ErrInvalid, errors.New(e.Error)}
		case http.StatusConflict:
			return nil, kindError{ErrConflict, errors.New(e.Error)}
		case http.StatusNotFound:
			return nil, kindError{ErrNotFound, errors.New(e.Error)}
		}
		return nil, errors.New(e.Error)
	}
	return &bufferedConn{Conn: conn, in: in}, nil
}

// bufferedConn reads through the reader that took the API's answer.
type bufferedConn struct {
	net.Conn
	in *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.in.Read(b) }

func (c *bufferedConn) CloseWrite() error { return closeWrite(c.Conn) }

// Splice carries bytes between a and b both ways until both directions ended, passing on
// the end of one side's writing to the other (half-close); it closes both.
func Splice(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			a.Close()
			b.Close()
			return
		}
		closeWrite(dst)
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// closeWrite closes c for writing where it can be, and whole where it cannot.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// ValidTunnelRequest says whether r asks for a tunnel upgrade.
func ValidTunnelRequest(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), TunnelUpgrade)
}
