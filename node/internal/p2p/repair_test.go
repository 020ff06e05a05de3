package p2p

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A node reconnects to its coordinator when the coordinator stays connected but out of its
// gossip for 20 s, and then not again for 10 minutes (a repair closes every stream with
// it); each repair is counted (gpunex_gossip_repairs_total).
func TestBootstrapPeerRepaired(t *testing.T) {
	node, coord := newLoopbackPeer(t), newLoopbackPeer(t)
	const topic = "/gpunex/scores/1"
	accept := func(context.Context, peer.ID, []byte) Verdict { return Accept }
	if _, err := node.Join(topic, accept); err != nil {
		t.Fatal(err)
	}
	boot := []peer.AddrInfo{{ID: coord.ID, Addrs: coord.Host.Addrs()}}
	ctx := context.Background()
	if err := node.Host.Connect(ctx, boot[0]); err != nil {
		t.Fatal(err)
	}
	cutOff, repaired := map[peer.ID]time.Time{}, map[peer.ID]time.Time{}
	t0 := time.Now()
	repairsAt := func(after time.Duration, want int64) {
		t.Helper()
		node.repairGossip(ctx, boot, t0.Add(after), cutOff, repaired, slog.New(slog.DiscardHandler))
		if got := node.GossipRepairs(); got != want {
			t.Fatalf("after %s: %d repairs, want %d", after, got, want)
		}
		if node.Host.Network().Connectedness(coord.ID) != network.Connected {
			t.Fatalf("after %s: not connected to the coordinator", after)
		}
	}
	// The coordinator follows none of the node's topics: connected, but out of its gossip.
	repairsAt(0, 0)
	repairsAt(19*time.Second, 0)
	repairsAt(20*time.Second, 1)
	repairsAt(40*time.Second, 1)
	repairsAt(10*time.Minute, 1)
	repairsAt(10*time.Minute+20*time.Second, 2)

	// Once the coordinator follows the topic, they gossip: no more repairs.
	if _, err := coord.Join(topic, accept); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(node.topics[0].t.ListPeers(), coord.ID); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the coordinator's subscription never reached the node")
		}
	}
	repairsAt(21*time.Minute, 2)
	repairsAt(32*time.Minute, 2)
}
