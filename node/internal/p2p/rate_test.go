package p2p

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// TestPeerRate: a peer gets its limit of requests a minute (a provider's
// jobs.proposals_per_minute, say), then is refused; another peer is not affected, and the
// window slides.
func TestPeerRate(t *testing.T) {
	r := NewPeerRate(3)
	a, b := peer.ID("a"), peer.ID("b")
	now := time.Now()
	for i := 0; i < 3; i++ {
		if !r.Allow(a, now) {
			t.Fatalf("proposal %d refused", i+1)
		}
	}
	if r.Allow(a, now.Add(time.Second)) {
		t.Fatal("fourth proposal in a minute allowed")
	}
	if !r.Allow(b, now) {
		t.Fatal("another peer limited")
	}
	if !r.Allow(a, now.Add(61*time.Second)) {
		t.Fatal("still limited a minute later")
	}
}

// TestPeerBudget: a peer spends its burst, is refused, and gets its budget back at the
// rate given; another peer's budget is its own.
func TestPeerBudget(t *testing.T) {
	b := NewPeerBudget(60, 3)
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	a, c := peer.ID("a"), peer.ID("c")
	for i := range 3 {
		if !b.Spend(a, now) {
			t.Fatalf("spend %d of a burst of 3 refused", i+1)
		}
	}
	if b.Spend(a, now) {
		t.Fatal("a fourth spend within the same instant")
	}
	if !b.Spend(c, now) {
		t.Fatal("another peer refused")
	}
	if !b.Spend(a, now.Add(time.Second)) || b.Spend(a, now.Add(time.Second)) {
		t.Fatal("60 a minute: one more after a second, not two")
	}
}

// TestNetworkOf: identities on one IPv4 address or one IPv6 /64 share a network budget;
// only the host's own address is exempt.
func TestNetworkOf(t *testing.T) {
	for addr, want := range map[string]string{
		"/ip4/203.0.113.7/tcp/4001":       "203.0.113.7",
		"/ip6/2001:db8::1/tcp/4001":       "2001:db8::/64",
		"/ip6/2001:db8::ffff:1/udp/4001":  "2001:db8::/64",
		"/ip4/127.0.0.1/tcp/4001":         "loopback",
		"/ip6/::1/tcp/4001":               "loopback",
		"/ip4/127.0.0.2/tcp/4001":         "127.0.0.2",
		"/ip4/198.51.100.1/udp/1/quic-v1": "198.51.100.1",
		"/ip6/2001:db8:0:1::1/tcp/4001":   "2001:db8:0:1::/64",
	} {
		if got := NetworkOf(ma.StringCast(addr)); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
}
