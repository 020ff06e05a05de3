package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// tunnelMarket is a market whose provider serves job tunnels (at most maxTunnels per job)
// and whose running jobs serve an HTTP page on port 8000 (a test server standing for the
// job's), with the renter's job declaring port 8000.
type tunnelMarket struct {
	*market
	job api.JobView
}

func newTunnelMarket(t *testing.T, maxTunnels int) *tunnelMarket {
	t.Helper()
	m := newMarket(t, 1, func(d *Deps) {
		d.Jobs.MaxTunnels, d.Jobs.TunnelGBPerJob, d.Jobs.TunnelsPerMinute = maxTunnels, 1, 1000
	})
	m.pv.peer.Handle(protocol.JobTunnelProtocol, m.pv.HandleTunnel)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "served by the job: %s", r.URL.Path)
	}))
	t.Cleanup(page.Close)
	m.pv.rt.listen(8000, page.Listener.Addr().String())
	req := m.request(imageArchive(t, "x"))
	req.Ports = []int{8000}
	return &tunnelMarket{market: m, job: m.run(t, req)}
}

// openTunnel opens a tunnel stream from rn as the protocol has it, bypassing the renter's
// own checks, and returns the provider's refusal (nil: opened, and closed again).
func openTunnel(t *testing.T, rn *renter, provider peer.ID, job string, port int) error {
	t.Helper()
	s, err := rn.peer.OpenStream(context.Background(), provider, protocol.JobTunnelProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := protocol.WriteJSONFrame(s, protocol.TunnelOpen{Job: job, Port: port}); err != nil {
		t.Fatal(err)
	}
	return protocol.ReadTunnelAnswer(bufio.NewReader(s))
}

func refusalCode(err error) string {
	var r *protocol.TunnelRefusal
	if errors.As(err, &r) {
		return r.Code
	}
	return fmt.Sprintf("not a refusal: %v", err)
}

// get fetches path over conn, a connection to the job's HTTP server.
func get(t *testing.T, conn net.Conn, path string) string {
	t.Helper()
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: job\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestJobTunnel: the renter of a running job reaches the port it declared, one connection
// per tunnel, directly and through a forward on its loopback; a stranger, an undeclared
// port and a port the job does not listen on are refused, each refusal counted.
func TestJobTunnel(t *testing.T) {
	m := newTunnelMarket(t, 4)
	ctx := context.Background()

	conn, err := m.rn.DialPort(ctx, m.job.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, conn, "/hello"); got != "served by the job: /hello" {
		t.Fatalf("through a tunnel: %q", got)
	}

	fctx, stop := context.WithCancel(ctx)
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- m.rn.Forward(fctx, m.job.ID, 8000, "127.0.0.1:0", func(a string) { addr <- a }) }()
	local := <-addr
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 3 { // one connection, hence one tunnel, each
		resp, err := client.Get(fmt.Sprintf("http://%s/forwarded/%d", local, i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("served by the job: /forwarded/%d", i); string(b) != want {
			t.Fatalf("through the forward: %q, want %q", b, want)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("a forward whose caller left: %v", err)
	}

	if _, err := m.rn.DialPort(ctx, m.job.ID, 9000); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("the renter's node tunnelled to a port the job did not declare: %v", err)
	}
	if code := refusalCode(openTunnel(t, m.rn, m.pv.peer.ID, m.job.ID, 9000)); code != protocol.TunnelPort {
		t.Fatalf("an undeclared port: %s", code)
	}
	stranger := m.renter(t)
	if code := refusalCode(openTunnel(t, stranger, m.pv.peer.ID, m.job.ID, 8000)); code != protocol.TunnelNotRenter {
		t.Fatalf("a stranger's tunnel: %s", code)
	}
	m.pv.rt.listen(8000, "") // the job stopped listening
	if code := refusalCode(openTunnel(t, m.rn, m.pv.peer.ID, m.job.ID, 8000)); code != protocol.TunnelClosed {
		t.Fatalf("a port nothing listens on: %s", code)
	}
	sessions := m.pv.metrics.JobSessions
	for outcome, want := range map[string]float64{"opened": 4, "port": 1, "not_renter": 1, "closed": 1} {
		if n := testutil.ToFloat64(sessions.WithLabelValues("tunnel", outcome)); n != want {
			t.Errorf("tunnels %s: %v counted, want %v", outcome, n, want)
		}
	}
}

// TestJobTunnelLimits: a job holds at most max_tunnels open at once (a closed one frees its
// place), a job that spent its transfer budget opens none, and the job's end cuts its
// tunnels and refuses new ones; a forward then ends, saying why.
func TestJobTunnelLimits(t *testing.T) {
	m := newTunnelMarket(t, 2)
	ctx := context.Background()
	var open []net.Conn
	for range 2 {
		c, err := m.rn.DialPort(ctx, m.job.ID, 8000)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	if _, err := m.rn.DialPort(ctx, m.job.ID, 8000); refusalCode(err) != protocol.TunnelLimit {
		t.Fatalf("a third tunnel of two allowed: %v", err)
	}
	open[0].Close()
	eventually(t, "a closed tunnel freed its place", func() bool {
		c, err := m.rn.DialPort(ctx, m.job.ID, 8000)
		if err == nil {
			open[0] = c
		}
		return err == nil
	})

	m.pv.sessions.spend(m.job.ID, 1e9, 0) // the job's tunnels carried its 1 GB
	if code := refusalCode(openTunnel(t, m.rn, m.pv.peer.ID, m.job.ID, 8000)); code != protocol.TunnelLimit {
		t.Fatalf("a tunnel past the job's transfer budget: %s", code)
	}
	if _, err := open[1].Write([]byte("GET / HTTP/1.1\r\nHost: job\r\n\r\n")); err == nil {
		open[1].SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(open[1]); err == nil {
			t.Fatal("an open tunnel carried bytes past the job's transfer budget")
		}
	}

	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- m.rn.Forward(ctx, m.job.ID, 8000, "127.0.0.1:0", func(a string) { addr <- a }) }()
	local := <-addr
	m.pv.rt.end(m.job.ID, sandbox.Exit{Code: 0})
	m.pv.ended(t, m.job.ID)
	open[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := open[0].Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a tunnel outlived its job: %v", err)
	}
	if code := refusalCode(openTunnel(t, m.rn, m.pv.peer.ID, m.job.ID, 8000)); code != protocol.TunnelNotRunning {
		t.Fatalf("a tunnel after the job ended: %s", code)
	}
	// The renter's ledger still says running: the provider's refusal ends the forward.
	if c, err := net.Dial("tcp", local); err == nil {
		c.Close()
	}
	if err := <-done; !errors.Is(err, ErrForwardEnded) {
		t.Fatalf("a forward to an ended job: %v", err)
	}
}

// TestPortsRefusedWhereNoTunnels: a provider that serves no tunnels (max_tunnels 0) refuses
// a job declaring ports, saying so, and takes the same job without them.
func TestPortsRefusedWhereNoTunnels(t *testing.T) {
	m := newMarket(t, 1) // max_tunnels 0
	req := m.request(imageArchive(t, "x"))
	req.Ports = []int{8000}
	if _, err := m.rn.ProposeJob(context.Background(), req); err == nil || !strings.Contains(err.Error(), "serves no job ports") {
		t.Fatalf("a job with ports at a provider without tunnels: %v", err)
	}
	req.Ports = nil
	m.run(t, req)
}
