package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// TestJobTagLastsWithTheStream: a peer with a job stream open is kept by the connection
// manager (tagged) on both sides, and loses the mark when the stream ends, so that a
// stranger opening job streams cannot stay protected and push gossip peers out.
func TestJobTagLastsWithTheStream(t *testing.T) {
	provider, renter := newLoopbackPeer(t), newLoopbackPeer(t)
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
