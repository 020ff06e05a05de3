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

// A node that has peers but publishes to nobody (its offer topic has no gossip peer) dials
// the bootstrap peers it is not connected to: after 30 s, then after 1 minute, 2 ... while
// it stays so, and again after 30 s once it was heard in between. Connected bootstrap peers
// are left alone; each dial is counted (gpunex_bootstrap_redials_total). Without it, a
// provider whose connection to its coordinator closed while it kept other peers published
// its offer to nobody (docs/performance.md).
func TestUnheardNodeDialsItsCoordinator(t *testing.T) {
	node, coord, other := newLoopbackPeer(t), newLoopbackPeer(t), newLoopbackPeer(t)
	const topic = "/gpunex/offers/model/L4-24GB/1"
	accept := func(context.Context, peer.ID, []byte) Verdict { return Accept }
	if _, err := coord.Join(topic, accept); err != nil {
		t.Fatal(err)
	}
	offers, err := node.JoinToPublish(topic)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// other is a bootstrap peer too, connected: never dialled again.
	boot := []peer.AddrInfo{{ID: coord.ID, Addrs: coord.Host.Addrs()}, {ID: other.ID, Addrs: other.Host.Addrs()}}
	if err := node.Host.Connect(ctx, boot[1]); err != nil {
		t.Fatal(err)
	}
	var reach bootstrapReach
	t0 := time.Now()
	// While cut off, the node's gater refuses the coordinator both ways: a DHT query under
	// way on either side (a routing table refresh) would dial at once, and the node would be
	// heard again without the redial this test is about. The gate opens for the redial.
	gate := func(shut bool) {
		node.bans.mu.Lock()
		defer node.bans.mu.Unlock()
		if shut {
			node.bans.until[coord.ID] = time.Now().Add(time.Hour)
		} else {
			delete(node.bans.until, coord.ID)
		}
	}
	at := func(after time.Duration, wantDials int64) {
		t.Helper()
		if wantDials > node.BootstrapRedials() {
			gate(false)
		}
		node.reachBootstrap(ctx, boot, t0.Add(after), offers.Peers() == 0, &reach, slog.New(slog.DiscardHandler))
		if got := node.BootstrapRedials(); got != wantDials {
			t.Fatalf("after %s: %d dials, want %d", after, got, wantDials)
		}
	}
	heard := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); (offers.Peers() > 0) != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the offer topic's gossip peers: %d, want heard %v", offers.Peers(), want)
			}
		}
	}
	cutOff := func() {
		t.Helper()
		gate(true)
		coord.Host.Network().ClosePeer(node.ID) // the coordinator's end closes it
		heard(false)
		for deadline := time.Now().Add(5 * time.Second); node.Host.Network().Connectedness(coord.ID) == network.Connected; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the node still counts the coordinator connected after it closed the connection")
			}
		}
	}

	at(0, 0)
	at(29*time.Second, 0)
	at(30*time.Second, 1)
	if node.Host.Network().Connectedness(coord.ID) != network.Connected {
		t.Fatal("not connected to the coordinator after the dial")
	}
	heard(true)
	at(31*time.Second, 1) // heard: the wait starts over

	cutOff()
	at(40*time.Second, 1)
	at(69*time.Second, 1)
	at(70*time.Second, 2)
	heard(true) // the coordinator's end has the connection: its closing reaches the node
	cutOff()
	at(129*time.Second, 2) // a minute after the last dial, not 30 s
	at(130*time.Second, 3)
	heard(true)
	cutOff()
	at(249*time.Second, 3) // then 2 minutes
	at(250*time.Second, 4)
	if node.Host.Network().Connectedness(other.ID) != network.Connected {
		t.Fatal("the connected bootstrap peer was disturbed")
	}
}
