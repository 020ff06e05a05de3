package p2p

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestJobTagLastsWithTheStream: a peer with a job stream open is kept by the connection
// manager (tagged) on both sides, and loses the mark when the stream ends, so that a
// stranger opening job streams cannot stay protected and push gossip peers out.
func TestJobTagLastsWithTheStream(t *testing.T) {
	newPeer := func() *Peer {
		sk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
		p, err := New(Options{Key: sk, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, OfferValidator: anyValue{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	provider, renter := newPeer(), newPeer()
	release := make(chan struct{})
	provider.Handle(protocol.JobProtocol, func(s network.Stream) {
		<-release
		s.Close()
	})
	tagged := func(p *Peer, id peer.ID) bool {
		ti := p.Host.ConnManager().GetTagInfo(id)
		return ti != nil && ti.Tags[jobTag] > 0
	}
	ctx := context.Background()
	renter.Host.Peerstore().AddAddrs(provider.ID, provider.Host.Addrs(), time.Minute)
	s, err := renter.OpenStream(ctx, provider.ID, protocol.JobProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if !tagged(renter, provider.ID) {
		t.Fatal("the renter does not keep its job peer while the stream is open")
	}
	for deadline := time.Now().Add(5 * time.Second); !tagged(provider, renter.ID); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the provider does not keep its job peer while the stream is open")
		}
	}
	s.Close()
	close(release)
	if tagged(renter, provider.ID) {
		t.Fatal("the renter keeps the mark after closing its job stream")
	}
	for deadline := time.Now().Add(5 * time.Second); tagged(provider, renter.ID); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the provider keeps the mark after the job stream ended")
		}
	}
}
