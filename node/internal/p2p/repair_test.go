package p2p

import (
	"context"
	"crypto/rand"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A node connects again to its coordinator when the coordinator stays out of its gossip, or
// disconnected, for 20 s; then only after twice as long each time, so that a coordinator
// that cannot gossip with it is not disconnected every 20 s; and back to 20 s once they
// have gossiped for 10 minutes.
func TestBootstrapPeerRepaired(t *testing.T) {
	newPeer := func() *Peer {
		sk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
		p, err := New(Options{Key: sk, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, OfferValidator: anyValue{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	node, coord := newPeer(), newPeer()
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
	state := map[peer.ID]*bootRepair{}
	t0 := time.Now()
	connected := func() bool { return node.Host.Network().Connectedness(coord.ID) == network.Connected }
	repairsAt := func(after time.Duration, want int64, wantConnected bool) {
		t.Helper()
		node.repairGossip(ctx, boot, t0.Add(after), state, slog.New(slog.DiscardHandler))
		if got := node.GossipRepairs(); got != want {
			t.Fatalf("after %s: %d repairs, want %d", after, got, want)
		}
		if connected() != wantConnected {
			t.Fatalf("after %s: connected to the coordinator %v, want %v", after, connected(), wantConnected)
		}
	}
	// The coordinator follows none of the node's topics: connected, but out of its gossip.
	// A repair disconnects it, and connects again 5 s later (both sides' gossipsub must see
	// the old connection end first).
	repairsAt(0, 0, true)
	repairsAt(19*time.Second, 0, true)
	repairsAt(20*time.Second, 1, false)
	repairsAt(24*time.Second, 1, false)
	repairsAt(25*time.Second, 1, true)
	repairsAt(59*time.Second, 1, true) // the next wait is 40 s
	repairsAt(60*time.Second, 2, false)
	repairsAt(65*time.Second, 2, true)

	// The coordinator closes the connection: the node connects again after the wait (80 s).
	coord.Host.Network().ClosePeer(node.ID)
	for deadline := time.Now().Add(5 * time.Second); node.Host.Network().Connectedness(coord.ID) == network.Connected; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node still sees the connection the coordinator closed")
		}
	}
	repairsAt(66*time.Second, 2, false)
	repairsAt(139*time.Second, 2, false)
	repairsAt(140*time.Second, 3, true) // 80 s after the last repair; disconnected: connected again at once

	// Once the coordinator follows the topic, they gossip: no more repairs, and after 10
	// minutes of gossip the wait is back to 20 s.
	if _, err := coord.Join(topic, accept); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(node.topics[0].t.ListPeers(), coord.ID); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the coordinator's subscription never reached the node")
		}
	}
	repairsAt(150*time.Second, 3, true)
	repairsAt(150*time.Second+gossipRepairAtMost, 3, true)
	if st := state[coord.ID]; st.wait != gossipRepairAfter {
		t.Fatalf("after 10 minutes of gossip, the next repair waits %s, want %s", st.wait, gossipRepairAfter)
	}
}
