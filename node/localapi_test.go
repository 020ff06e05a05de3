package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"

	"github.com/gpunex/gpunex/node/config"
)

// TestAPI drives the local API as the CLI does: token required, errors mapped to status
// codes a client can act on, price changes applied.
func TestAPI(t *testing.T) {
	tn := newTestNet(t)
	prov := tn.add(providerConfig(0), nil)
	dir := t.TempDir()
	h, _, err := config.Init(dir, config.InitOptions{Role: config.RoleProvider})
	if err != nil {
		t.Fatal(err)
	}
	token, _ := h.Token()
	srv, err := prov.ServeAPI("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	if _, err := prov.ServeAPI("0.0.0.0:0", token); err == nil {
		t.Fatal("API accepted a non-loopback address")
	}
	h.WriteAPIAddr(srv.Addr())
	cl, err := api.NewClient(h)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Without the token: 401.
	resp, err := http.Get(cl.Base + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	// Metrics are open, on loopback.
	resp, err = http.Get(cl.Base + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	resp.Body.Close()

	st, err := cl.Status(ctx)
	if err != nil || st.PeerID != prov.ID().String() || st.Role != config.RoleProvider {
		t.Fatalf("status: %+v %v", st, err)
	}
	model := declaredModel(prov)
	v, err := cl.SetPrice(ctx, model, "3.25")
	if err != nil || v.Offer.GPUs[0].PricePerGPUHour != 3_250_000 {
		t.Fatalf("set price: %+v %v", v.Offer, err)
	}
	for _, bad := range []struct{ model, usdc, want string }{
		{model, "0", "above 0"},
		{model, "20000", "at most"},
		{model, "1.2345678", "6 decimals"},
		{"B200-192GB", "1.00", "not declared"},
	} {
		if _, err := cl.SetPrice(ctx, bad.model, bad.usdc); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("set price %s %s: %v; want %q", bad.model, bad.usdc, err, bad.want)
		}
	}
	code := func(path string) int {
		req, _ := http.NewRequest(http.MethodGet, cl.Base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := code("/v1/offers?max_price=abc"); c != http.StatusBadRequest {
		t.Errorf("bad max_price: %d", c)
	}
	if c := code("/v1/offers?unbenchmarked=maybe"); c != http.StatusBadRequest {
		t.Errorf("bad unbenchmarked: %d", c)
	}
	if c := code("/v1/offers?unbenchmarked=true"); c != http.StatusOK {
		t.Errorf("a search for unbenchmarked offers too: %d", c)
	}
	if c := code("/v1/offers/record?id=nonsense"); c != http.StatusBadRequest {
		t.Errorf("bad offer id: %d", c)
	}
	if c := code("/v1/offers/record?id=" + url.QueryEscape(prov.ID().String()+"/B200-192GB")); c != http.StatusNotFound {
		t.Errorf("unknown model: %d", c)
	}
	// A renter has no offer to price: 409.
	renter := tn.add(testConfig(config.RoleRenter), nil)
	rapi, err := renter.ServeAPI("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer rapi.Close(context.Background())
	rcl, _ := api.NewClient(endpoint{"http://" + rapi.Addr(), token})
	if _, err := rcl.SetPrice(ctx, model, "1.00"); err == nil || !strings.Contains(err.Error(), "not a provider") {
		t.Fatalf("renter set-price: %v", err)
	}
	eventually(t, 10*time.Second, "renter finds the repriced offer", func() (bool, string) {
		rows, err := rcl.Search(ctx, url.Values{"model": {model}})
		return err == nil && len(rows) == 1 && rows[0].PriceUSDC == "3.25" && rows[0].Simulated, fmt.Sprintf("%+v %v", rows, err)
	})
}

// endpoint is a node's API as a client finds it.
type endpoint struct{ base, token string }

func (e endpoint) APIEndpoint() (string, string, error) { return e.base, e.token, nil }

// TestClockOffset: a node whose clock runs three minutes ahead of its coordinator's learns
// so through its API (what `gpunex doctor` reports); one on time is within a second; the
// coordinator itself has nothing to compare with.
func TestClockOffset(t *testing.T) {
	tn := newTestNet(t)
	set := time.Now()
	ahead := tn.add(testConfig(config.RoleRenter), clock.NewFake(set.Add(3*time.Minute)))
	onTime := tn.add(testConfig(config.RoleRenter), nil)
	ctx := context.Background()
	v, err := apiClient(t, ahead).Clock(ctx)
	// The fake clock stands still while real time passes: the offset shrinks by as much.
	want := (3*time.Minute - time.Since(set)).Milliseconds()
	if err != nil || v.Coordinator != tn.boot.ID().String() || v.OffsetMillis < want-1000 || v.OffsetMillis > want+1000 {
		t.Fatalf("a clock 3 minutes ahead: %+v %v", v, err)
	}
	if v, err := apiClient(t, onTime).Clock(ctx); err != nil || v.OffsetMillis < -1000 || v.OffsetMillis > 1000 || v.RoundTripMillis < 0 {
		t.Fatalf("a clock on time: %+v %v", v, err)
	}
	if _, err := apiClient(t, tn.boot).Clock(ctx); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("the coordinator's own clock: %v", err)
	}
}

// TestMetricsNeedLoopbackHost: /metrics needs no token, so it answers only a request that
// names the node by a loopback address, as the dashboard does: a web page whose host name
// was made to resolve to 127.0.0.1 (DNS rebinding) cannot read the node's counters.
func TestMetricsNeedLoopbackHost(t *testing.T) {
	tn := newTestNet(t)
	cl := apiClient(t, tn.boot)
	u, err := url.Parse(cl.Base)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	for _, c := range []struct {
		host string
		want int
	}{
		{u.Host, http.StatusOK}, // 127.0.0.1:PORT, as Prometheus scrapes it
		{"localhost:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"evil.example", http.StatusForbidden},
		{"evil.example:" + port, http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodGet, cl.Base+"/metrics", nil)
		req.Host = c.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if served := strings.Contains(string(body), "gpunex_"); resp.StatusCode != c.want || served != (c.want == http.StatusOK) {
			t.Errorf("/metrics with Host %q: %d, counters shown %v; want %d", c.host, resp.StatusCode, served, c.want)
		}
	}
}
