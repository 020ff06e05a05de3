package p2p

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// conn is a connection from a peer at an address (the rest of network.Conn is not used).
type conn struct {
	network.Conn
	from peer.ID
	at   ma.Multiaddr
}

func (c conn) RemotePeer() peer.ID           { return c.from }
func (c conn) RemoteMultiaddr() ma.Multiaddr { return c.at }

func newID(t *testing.T) peer.ID {
	t.Helper()
	sk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRelayedNetwork (the security review's TestSecRevRelayedNetwork, turned round): a peer
// reached through a relay is not in the relay's network, and two peers through one relay are
// not in one network either: the relay's address says nothing of where they are.
func TestRelayedNetwork(t *testing.T) {
	relay, a, b := newID(t), newID(t), newID(t)
	direct := ma.StringCast("/ip4/203.0.113.5/tcp/4001")
	relayed := direct.Encapsulate(ma.StringCast("/p2p/" + relay.String() + "/p2p-circuit"))
	if NetworkOf(relayed) == NetworkOf(direct) {
		t.Fatalf("a relayed address is counted in the relay's network %s", NetworkOf(direct))
	}
	na := NetworkOfConn(conn{from: a, at: relayed})
	if na == NetworkOfConn(conn{from: relay, at: direct}) || na == NetworkOfConn(conn{from: b, at: relayed}) {
		t.Fatalf("two peers through one relay, or a peer and its relay, share the network %s", na)
	}
}

// TestRelayedStrangerSpendsItsOwnBudget: a stranger reached through the coordinator's relay
// spends its own network budget, not that of every renter reached through the same relay;
// the coordinator itself, trusted, spends none, even with strangers on its address.
func TestRelayedStrangerSpendsItsOwnBudget(t *testing.T) {
	relay, stranger, renter := newID(t), newID(t), newID(t)
	direct := ma.StringCast("/ip4/203.0.113.5/tcp/4001")
	relayed := direct.Encapsulate(ma.StringCast("/p2p/" + relay.String() + "/p2p-circuit"))
	nets := NewNetworkBudget(120, 120, relay)
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for nets.Take(conn{from: stranger, at: relayed}, now, 1) {
	}
	if !nets.Take(conn{from: renter, at: relayed}, now, 1) {
		t.Fatal("a renter reached through the relay is refused: a stranger through it spent the budget")
	}
	for nets.Take(conn{from: newID(t), at: direct}, now, 1) { // a stranger on the coordinator's host
	}
	for i := range 200 {
		if !nets.Take(conn{from: relay, at: direct}, now, 1) {
			t.Fatalf("the trusted coordinator refused after %d requests", i)
		}
	}
	src := NewSources(30, 30, 4, relay)
	for src.Take(conn{from: stranger, at: relayed}, now, 1) {
	}
	if !src.Take(conn{from: renter, at: relayed}, now, 1) {
		t.Fatal("Sources: a renter reached through the relay is refused after a stranger through it")
	}
}
