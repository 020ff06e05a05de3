package p2p

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
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
