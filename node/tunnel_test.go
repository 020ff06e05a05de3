package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// A job's ports on real containers: a job without egress serves a page with busybox httpd;
// its renter fetches it through a forward on its loopback, through the local API's proxy
// and through the API's tunnel upgrade (what `gpunex job forward` uses); a stranger's
// tunnel, a tunnel to an undeclared port and a tunnel after the job ended are refused.

// httpdJob is the job's command: a page, then httpd on port 8000.
var httpdJob = []string{"sh", "-c", "mkdir /tmp/www && echo served-from-the-job > /tmp/www/index.html && exec httpd -f -p 8000 -h /tmp/www"}

// startHTTPJob runs httpdJob on prov for renter, declaring port 8000, and returns it once
// httpd answers through a tunnel.
func startHTTPJob(t testing.TB, renter, prov *Node) api.JobView {
	t.Helper()
	ctx := context.Background()
	v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 600, ImageArchive: busyboxArchive(t),
		Ports: []int{8000}, Args: httpdJob})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// httpd listens a moment after the job started.
		c, err := renter.renter.DialPort(ctx, v.ID, 8000)
		if err == nil {
			c.Close()
			return v
		}
		var refusal *protocol.TunnelRefusal
		if !errors.As(err, &refusal) || refusal.Code != protocol.TunnelClosed || time.Now().After(deadline) {
			t.Fatalf("the job's port 8000: %v", err)
		}
	}
}

// rawTunnel opens a tunnel stream from n to prov as the protocol has it (without the
// renter's own checks) and returns the provider's refusal (nil: opened).
func rawTunnel(t *testing.T, n, prov *Node, job string, port int) error {
	t.Helper()
	ctx := context.Background()
	if err := n.peer.Host.Connect(ctx, peer.AddrInfo{ID: prov.peer.ID, Addrs: prov.peer.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	s, err := n.peer.OpenStream(ctx, prov.peer.ID, protocol.JobTunnelProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := protocol.WriteJSONFrame(s, protocol.TunnelOpen{Job: job, Port: port}); err != nil {
		t.Fatal(err)
	}
	return protocol.ReadTunnelAnswer(bufio.NewReader(s))
}

func tunnelRefusal(err error) string {
	var r *protocol.TunnelRefusal
	if errors.As(err, &r) {
		return r.Code
	}
	return fmt.Sprintf("not a refusal: %v", err)
}

// TestJobTunnelOnContainers: see above.
func TestJobTunnelOnContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	tn, renter, prov := jobNetWith(t, 1)
	v := startHTTPJob(t, renter, prov)
	ctx := context.Background()

	fctx, stop := context.WithCancel(ctx)
	defer stop()
	addr := make(chan string, 1)
	go renter.renter.Forward(fctx, v.ID, 8000, "127.0.0.1:0", func(a string) { addr <- a })
	page := func(url string, header http.Header) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	if got := page("http://"+<-addr+"/index.html", nil); got != "200 served-from-the-job\n" {
		t.Fatalf("the job's page through a forward: %q", got)
	}

	cl, token := apiWithToken(t, renter)
	bearer := http.Header{"Authorization": {"Bearer " + token}}
	if got := page(cl.Base+"/v1/jobs/"+v.ID+"/ports/8000/index.html", bearer); got != "200 served-from-the-job\n" {
		t.Fatalf("the job's page through the API's proxy: %q", got)
	}
	resp, err := http.DefaultClient.Do(func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, cl.Base+"/v1/jobs/"+v.ID+"/ports/8000/", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return req
	}())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Values("Content-Security-Policy"); !slices.Contains(csp, jobPageCSP) {
		t.Fatalf("the job's page is not sandboxed on the dashboard's origin: %q", csp)
	}
	if got := page(cl.Base+"/v1/jobs/"+v.ID+"/ports/8000/index.html", nil); !strings.HasPrefix(got, "401") {
		t.Fatalf("the API's proxy without the token: %q", got)
	}
	conn, err := cl.DialTunnel(ctx, v.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /index.html HTTP/1.0\r\nHost: job\r\n\r\n")
	raw, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.Contains(string(raw), "200 OK") || !strings.Contains(string(raw), "served-from-the-job") {
		t.Fatalf("the job's page through the API's tunnel: %q", raw)
	}
	if _, err := cl.DialTunnel(ctx, v.ID, 9000); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("the API's tunnel to an undeclared port: %v", err)
	}

	if code := tunnelRefusal(rawTunnel(t, renter, prov, v.ID, 9000)); code != protocol.TunnelPort {
		t.Fatalf("an undeclared port: %s", code)
	}
	stranger := tn.add(testConfig(config.RoleRenter), nil)
	if code := tunnelRefusal(rawTunnel(t, stranger, prov, v.ID, 8000)); code != protocol.TunnelNotRenter {
		t.Fatalf("a stranger's tunnel: %s", code)
	}

	if _, err := renter.renter.CancelJob(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the job ended on the provider", func() (bool, string) {
		j, err := prov.ledger.Jobs.GetJob(v.ID)
		return err == nil && j.State != ledger.JobRunning, ""
	})
	if code := tunnelRefusal(rawTunnel(t, renter, prov, v.ID, 8000)); code != protocol.TunnelNotRunning {
		t.Fatalf("a tunnel after the job ended: %s", code)
	}
}

// apiWithToken serves n's API and returns a client of it and its token.
func apiWithToken(t *testing.T, n *Node) (*api.Client, string) {
	t.Helper()
	const token = "tunnel-test-token"
	srv, err := n.ServeAPI("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	cl, err := api.NewClient(fixedHome{"http://" + srv.Addr(), token})
	if err != nil {
		t.Fatal(err)
	}
	return cl, token
}

// fixedHome is an API's address and token.
type fixedHome struct{ base, token string }

func (h fixedHome) APIEndpoint() (string, string, error) { return h.base, h.token, nil }
