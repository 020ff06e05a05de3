package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/node/internal/recordtest"
)

// TestNodesTalkOverTCP: two nodes that both listen on TCP and QUIC, as by default, end up
// on a TCP connection (jobs' bulk data costs a third of the CPU there); a node that offers
// only QUIC is still reached over QUIC.
func TestNodesTalkOverTCP(t *testing.T) {
	start := func(listen ...string) *Peer {
		key, _ := recordtest.NewKey()
		p, err := New(Options{Key: key, Listen: listen})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	both := []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
	a, b, quicOnly := start(both...), start(both...), start("/ip4/127.0.0.1/udp/0/quic-v1")
	transport := func(to *Peer) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Host.Connect(ctx, peer.AddrInfo{ID: to.ID, Addrs: to.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
		conns := a.Host.Network().ConnsToPeer(to.ID)
		if len(conns) != 1 {
			t.Fatalf("%d connections to the peer, want 1", len(conns))
		}
		if isTCP(conns[0].RemoteMultiaddr()) {
			return "tcp"
		}
		if isQUIC(conns[0].RemoteMultiaddr()) {
			return "quic"
		}
		return conns[0].RemoteMultiaddr().String()
	}
	if got := transport(b); got != "tcp" {
		t.Fatalf("two default nodes connected over %s, want tcp", got)
	}
	if got := transport(quicOnly); got != "quic" {
		t.Fatalf("a QUIC-only node reached over %s", got)
	}
	ranked := tcpFirst([]ma.Multiaddr{ma.StringCast("/ip4/1.2.3.4/udp/4001/quic-v1"), ma.StringCast("/ip4/1.2.3.4/tcp/4001")})
	if !isTCP(ranked[0].Addr) || ranked[0].Delay != 0 || ranked[1].Delay == 0 {
		t.Fatalf("public addresses ranked %v: TCP at once, QUIC later", ranked)
	}
}
