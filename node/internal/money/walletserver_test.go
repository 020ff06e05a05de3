package money

import (
	"bufio"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/protocol"
)

// The wallet stream's server: its answers, refusals and rate limits, as a peer sees them.

// wallClock fixes the wall time the wallet budgets refill by.
func (c *coordinator) wallClock() *atomic.Int64 {
	var now atomic.Int64
	now.Store(start.UnixNano())
	c.walletServer.now = func() time.Time { return time.Unix(0, now.Load()) }
	return &now
}

func (c *coordinator) rateLimited() float64 {
	return testutil.ToFloat64(c.metrics.RecordsRejected.WithLabelValues("wallet-request", "stream", "rate_limited"))
}

// TestWalletRateLimit: a peer gets 120 wallet requests a minute; the next is refused
// with the reason (and counted), while another peer is served; a minute later the peer is
// served again.
func TestWalletRateLimit(t *testing.T) {
	c := newCoordinator(t)
	now := c.wallClock()
	n := c.serve(t)
	a, b := newParty(), newParty()
	ha, hb := n.join(t, a, "10.0.1.1"), n.join(t, b, "10.0.2.1")
	for i := range 120 {
		if resp := n.wallet(t, ha, protocol.WalletRequest{Op: "info"}); resp.Error != "" {
			t.Fatalf("request %d refused: %s", i+1, resp.Error)
		}
	}
	resp := n.wallet(t, ha, protocol.WalletRequest{Op: "info"})
	if resp.Error != "more than 120 wallet requests in a minute: slow down" || resp.Info != nil || !resp.Now.Equal(c.clock.Now()) {
		t.Fatalf("the 121st request: %+v", resp)
	}
	if c.rateLimited() != 1 {
		t.Fatalf("%v refusals counted", c.rateLimited())
	}
	if resp := n.wallet(t, hb, protocol.WalletRequest{Op: "info"}); resp.Error != "" || resp.Info == nil {
		t.Fatalf("another peer: %+v", resp)
	}
	now.Add(int64(time.Minute))
	if resp := n.wallet(t, ha, protocol.WalletRequest{Op: "info"}); resp.Error != "" {
		t.Fatalf("a minute later: %s", resp.Error)
	}
}

// TestWalletClaimLimit: deposit claims (each costs RPC calls) have their own budget: 20 at
// once per peer, 10 a minute after; a peer past it is still served other requests. Peers
// of one network share four times that: new peer IDs buy nothing.
func TestWalletClaimLimit(t *testing.T) {
	c := newCoordinator(t)
	c.wallClock()
	n := c.serve(t)
	claim := protocol.WalletRequest{Op: "claim", Signature: "not-a-signature"}
	slowDown := "more than 10 deposit claims a minute: slow down"
	first := newParty()
	hf := n.join(t, first, "10.0.3.1")
	for i := range 20 {
		if resp := n.wallet(t, hf, claim); !strings.Contains(resp.Error, `deposit signature "not-a-signature"`) {
			t.Fatalf("claim %d: %q", i+1, resp.Error)
		}
	}
	if resp := n.wallet(t, hf, claim); resp.Error != slowDown {
		t.Fatalf("the 21st claim: %q", resp.Error)
	}
	if resp := n.wallet(t, hf, protocol.WalletRequest{Op: "balance"}); resp.Error != "" || resp.Account == nil {
		t.Fatalf("a balance after the claims: %+v", resp)
	}
	// Three more peers of the network spend its 80; a fifth is refused its first claim,
	// while a peer elsewhere is served.
	for i := range 3 {
		h := n.join(t, newParty(), "10.0.3.1")
		for range 20 {
			if resp := n.wallet(t, h, claim); resp.Error == slowDown {
				t.Fatalf("peer %d refused within its budget", i+2)
			}
		}
	}
	if resp := n.wallet(t, n.join(t, newParty(), "10.0.3.1"), claim); resp.Error != slowDown {
		t.Fatalf("a new peer of a network past its budget: %q", resp.Error)
	}
	if resp := n.wallet(t, n.join(t, newParty(), "10.0.4.1"), claim); resp.Error == slowDown {
		t.Fatal("a peer of another network refused")
	}
	if c.rateLimited() != 2 {
		t.Fatalf("%v refusals counted, want 2", c.rateLimited())
	}
}

// TestWalletRefusals: a request the server cannot read, an unknown op, and payout settings
// sent by another peer than their signer are refused with the reason.
func TestWalletRefusals(t *testing.T) {
	c := newCoordinator(t)
	n := c.serve(t)
	p := newParty()
	h := n.join(t, p, "10.0.5.1")
	if resp := n.wallet(t, h, protocol.WalletRequest{Op: "withdraw"}); resp.Error != `unknown wallet request "withdraw"` {
		t.Fatalf("unknown op: %q", resp.Error)
	}
	s, err := h.NewStream(context.Background(), n.coord.ID(), libp2pprotocol.ID(protocol.WalletProtocol))
	if err != nil {
		t.Fatal(err)
	}
	protocol.WriteFrame(s, []byte("{{{{{"))
	s.CloseWrite()
	var resp protocol.WalletResponse
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxWalletResponse, &resp); err != nil || !strings.HasPrefix(resp.Error, "bad request: ") {
		t.Fatalf("garbage: %+v %v", resp, err)
	}
	other := newParty()
	raw := seal(t, protocol.KindPayoutSettings, protocol.PayoutSettings{Version: 1, Provider: other.id.String(), Seq: 1, IssuedAt: c.clock.Now(),
		Method: protocol.PayoutUSDC, Schedule: protocol.PayoutWeekly, SolanaAddress: c.treasury.PublicKey().String()}, other)
	if resp := n.wallet(t, h, protocol.WalletRequest{Op: "settings", Settings: raw}); !strings.Contains(resp.Error, "payout settings signed by "+other.id.String()+", sent by "+p.id.String()) {
		t.Fatalf("another's settings: %q", resp.Error)
	}
	if _, err := c.ledger.Payouts.GetPayoutSettings(other.id.String()); err == nil {
		t.Fatal("settings sent by another peer were kept")
	}
}

// TestWalletInfo: info tells where deposits go (the treasury, the mint, the cluster), the
// memo the asker's deposits must carry, the commission and the minimum payout.
func TestWalletInfo(t *testing.T) {
	c := newCoordinator(t)
	n := c.serve(t)
	p := newParty()
	resp := n.wallet(t, n.join(t, p, "10.0.6.1"), protocol.WalletRequest{Op: "info"})
	i := resp.Info
	if i == nil || i.Coordinator != c.id.String() || i.Treasury != c.treasury.PublicKey().String() || i.Mint != c.chain.mint.String() ||
		i.Cluster != c.chain.genesis || i.CommissionBPS != 1000 || i.MinPayout != 10_000 || i.DepositMemo != "gpunex deposit "+p.id.String() {
		t.Fatalf("info: %+v", i)
	}
}
