package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// fixedHome is an API's address and token.
type fixedHome struct{ base, token string }

func (h fixedHome) APIEndpoint() (string, string, error) { return h.base, h.token, nil }

// TestJobForward: gpunex job forward carries each connection on the renter's loopback
// through the node's tunnel upgrade, with the node's token, both ways and to the end of
// each side; once the node says the job no longer runs, the forward ends and says why.
func TestJobForward(t *testing.T) {
	var state atomic.Value
	state.Store("running")
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":"missing or wrong API token"}`, http.StatusUnauthorized)
			return
		}
		switch {
		case r.URL.Path == "/v1/jobs/0123456789abcdef":
			json.NewEncoder(w).Encode(api.JobView{JobStatus: protocol.JobStatus{ID: "0123456789abcdef", State: state.Load().(string)}})
		case r.URL.Path == "/v1/jobs/0123456789abcdef/tunnel/8000" && api.ValidTunnelRequest(r) && state.Load() == "running":
			conn, buf, _ := http.NewResponseController(w).Hijack()
			buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: gpunex-tunnel\r\n\r\n")
			buf.Flush()
			// The job: it answers what it read, in capitals, once the renter's side ended.
			b, _ := io.ReadAll(buf.Reader)
			conn.Write([]byte(strings.ToUpper(string(b))))
			conn.Close()
		default:
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, `{"error":"job is %s"}`, state.Load())
		}
	}))
	defer node.Close()
	cl, err := api.NewClient(fixedHome{node.URL, "tok"})
	if err != nil {
		t.Fatal(err)
	}

	said := &forwardLog{}
	done := make(chan error, 1)
	go func() { done <- forwardPort(context.Background(), cl, "0123456789abcdef", 8000, "127.0.0.1:0", said) }()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the forward never said where it listens")
		}
		if _, rest, ok := strings.Cut(said.String(), "http://"); ok {
			addr, _, _ = strings.Cut(rest, " ")
		}
	}
	for _, msg := range []string{"hello", "again"} { // one tunnel each
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(msg))
		c.(*net.TCPConn).CloseWrite()
		got, _ := io.ReadAll(bufio.NewReader(c))
		c.Close()
		if string(got) != strings.ToUpper(msg) {
			t.Fatalf("through the forward: %q, want %q", got, strings.ToUpper(msg))
		}
	}

	state.Store("ended")
	if c, err := net.Dial("tcp", addr); err == nil {
		io.ReadAll(c)
		c.Close()
	}
	if err := <-done; !errors.Is(err, errForwardEnded) || !strings.Contains(said.String(), "no longer forwarded") {
		t.Fatalf("a forward to an ended job: %v; it said %q", err, said.String())
	}
	if err := forwardPort(context.Background(), cl, "0123456789abcdef", 8000, "", said); err == nil || !strings.Contains(err.Error(), "is ended") {
		t.Fatalf("forwarding an ended job's port: %v", err)
	}
	if _, err := listenLocal("0.0.0.0:0", 8000); err == nil {
		t.Fatal("a forward listened on every address, not the loopback")
	}
}

// forwardLog is what a forward says, written from its goroutines.
type forwardLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *forwardLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *forwardLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
