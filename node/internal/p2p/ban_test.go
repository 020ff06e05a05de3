package p2p

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

type anyValue struct{}

func (anyValue) Validate(string, []byte) error        { return nil }
func (anyValue) Select(string, [][]byte) (int, error) { return 0, nil }

// newLoopbackPeer starts a peer on loopback TCP, closed when the test ends.
func newLoopbackPeer(t *testing.T) *Peer {
	t.Helper()
	sk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	p, err := New(Options{Key: sk, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, OfferValidator: anyValue{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestBan: a peer refused more than MisbehaviourPerMinute times in a minute is disconnected
// and cannot connect again; another peer can.
func TestBan(t *testing.T) {
	sk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	p, err := New(Options{Key: sk, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, OfferValidator: anyValue{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pest, _ := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	defer pest.Close()
	other, _ := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	defer other.Close()
	ctx := context.Background()
	victim := peer.AddrInfo{ID: p.ID, Addrs: p.Host.Addrs()}
	if err := pest.Connect(ctx, victim); err != nil {
		t.Fatal(err)
	}
	for i := range MisbehaviourPerMinute {
		if p.Misbehaved(pest.ID()) {
			t.Fatalf("banned after %d refusals", i+1)
		}
	}
	if !p.Misbehaved(pest.ID()) || !p.Banned(pest.ID()) {
		t.Fatal("not banned past the limit")
	}
	if p.Host.Network().Connectedness(pest.ID()) == network.Connected {
		t.Fatal("the banned peer is still connected")
	}
	pest.Peerstore().RemovePeer(p.ID)
	pest.Network().ClosePeer(p.ID)
	if err := pest.Connect(ctx, victim); err == nil && p.Host.Network().Connectedness(pest.ID()) == network.Connected {
		t.Fatal("the banned peer connected again")
	}
	if err := other.Connect(ctx, victim); err != nil {
		t.Fatalf("another peer refused: %v", err)
	}
}
