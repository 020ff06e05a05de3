package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/protocol"
)

// relayLab is a coordinator's relay on 127.0.0.1 and a provider holding a slot on it, with
// hosts dialling the provider through it from addresses of their own (127.0.0.x: each its
// own network; 127.0.0.1 is the host's own, exempt).
type relayLab struct {
	t        *testing.T
	relay    host.Host
	provider host.Host
	acl      *relayACL
	circuit  ma.Multiaddr // the provider's address through the relay
}

func newRelayLab(t *testing.T, circuitsPerPeer int) *relayLab {
	l := &relayLab{t: t}
	l.provider = l.host("127.0.0.1")
	r := Relay{Reservations: 8, CircuitsPerPeer: circuitsPerPeer, CircuitDuration: time.Minute, CircuitData: 1 << 20,
		MayReserve: func(p peer.ID) bool { return p == l.provider.ID() }}
	l.acl = newRelayACL(r)
	l.relay = l.host("127.0.0.1", natOptions(Options{Reachability: "public", Relay: r}, l.acl)...)
	l.acl.use(l.relay.Network())
	ai := peer.AddrInfo{ID: l.relay.ID(), Addrs: l.relay.Addrs()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The relay service starts once the host takes itself as public (forced): moments after.
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = l.provider.Connect(ctx, ai); err == nil {
			if _, err = client.Reserve(ctx, l.provider, ai); err == nil {
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("the provider got no slot: %v", err)
	}
	l.circuit = ma.StringCast("/ip4/127.0.0.1/tcp/" + port(t, l.relay) + "/p2p/" + l.relay.ID().String() + "/p2p-circuit")
	return l
}

// host is a libp2p host listening (and so dialling) from ip.
func (l *relayLab) host(ip string, opts ...libp2p.Option) host.Host {
	h, err := libp2p.New(append([]libp2p.Option{libp2p.ListenAddrStrings("/ip4/" + ip + "/tcp/0")}, opts...)...)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { h.Close() })
	return h
}

func port(t *testing.T, h host.Host) string {
	for _, a := range h.Addrs() {
		if p, err := a.ValueForProtocol(ma.P_TCP); err == nil {
			return p
		}
	}
	t.Fatal("no TCP address")
	return ""
}

// dial connects h to the provider through the relay.
func (l *relayLab) dial(h host.Host) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.Connect(ctx, peer.AddrInfo{ID: l.provider.ID(), Addrs: []ma.Multiaddr{l.circuit}})
}

// TestRelayCircuitsNotHoardedByStrangers: a stranger with many fresh keys on one address
// opens as many circuits as it can to a provider behind NAT (the security review,
// finding 6); it gets two, a renter elsewhere still reaches the provider through the relay,
// and a circuit the stranger closes is counted no more.
func TestRelayCircuitsNotHoardedByStrangers(t *testing.T) {
	l := newRelayLab(t, 16)
	var held []host.Host
	for range 16 {
		h := l.host("127.0.0.2")
		if l.dial(h) == nil {
			held = append(held, h)
		}
	}
	if len(held) > relayCircuitsPerNetwork {
		t.Errorf("a stranger on one address holds %d circuits to one provider", len(held))
	}
	renter := l.host("127.0.0.3")
	if err := l.dial(renter); err != nil {
		t.Fatalf("the renter cannot reach the provider through the relay: %v", err)
	}
	if c := renter.Network().ConnsToPeer(l.provider.ID()); len(c) != 1 || !c[0].Stat().Limited {
		t.Fatalf("the renter's connection is not relayed: %v", c)
	}
	if len(held) == 0 {
		t.Fatal("the stranger got no circuit at all")
	}
	// The stranger lets one go: its network may open another.
	held[0].Close()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = l.dial(l.host("127.0.0.2")); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("a circuit closed is still counted: %v", err)
	}
}

// TestRelayBoundsRotatingIdentities: identities rotating on one address, each opening a
// circuit to the provider and closing it, get relayOpensPerMinute circuits a minute: through
// the relay, where the provider cannot see their address, they get no more than directly.
func TestRelayBoundsRotatingIdentities(t *testing.T) {
	l := newRelayLab(t, 16)
	k := circuitKey{"127.0.0.4", l.provider.ID()}
	opened := 0
	for range 2 * relayOpensPerMinute {
		h := l.host("127.0.0.4")
		if l.dial(h) == nil {
			opened++
		}
		h.Close()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			l.acl.mu.Lock()
			n := len(l.acl.live(l.acl.circuits[k], time.Now()))
			l.acl.mu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a closed circuit is still counted after 10 s")
			}
		}
	}
	if opened != relayOpensPerMinute {
		t.Fatalf("%d circuits opened in a moment by identities on one address, want %d", opened, relayOpensPerMinute)
	}
}

// TestIdleRelayedConnectionsClosed: a provider behind NAT closes the relayed connections
// that never carry any of its streams, relayUnused after they open (a stranger holding a
// circuit for nothing), and keeps a renter's while its job stream is open and for relayIdle
// after.
func TestIdleRelayedConnectionsClosed(t *testing.T) {
	l := newRelayLab(t, 16)
	prov, err := New(Options{Host: l.provider, Key: l.provider.Peerstore().PrivKey(l.provider.ID()), OfferValidator: anyValue{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	started, release := make(chan struct{}), make(chan struct{})
	prov.Handle(protocol.JobProtocol, func(s network.Stream) {
		close(started)
		<-release
		s.Close()
	})
	stranger, renter := l.host("127.0.0.2"), l.host("127.0.0.3")
	for _, h := range []host.Host{stranger, renter} {
		if err := l.dial(h); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := renter.NewStream(network.WithAllowLimitedConn(ctx, "job"), prov.ID, protocol.JobProtocol)
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte{0}) // the protocol is agreed on with the first bytes
	<-started
	connected := func(id peer.ID) bool { return len(prov.Host.Network().ConnsToPeer(id)) > 0 }

	prov.closeIdleRelayed(time.Now().Add(relayUnused + time.Second))
	if connected(stranger.ID()) {
		t.Error("a relayed connection that carried nothing is kept")
	}
	if !connected(renter.ID()) {
		t.Fatal("a relayed connection carrying a job stream is closed")
	}
	close(release)
	if _, err := s.Read(make([]byte, 1)); err == nil {
		t.Fatal("the job stream did not end")
	}
	ended := time.Now()
	prov.closeIdleRelayed(ended.Add(relayIdle / 2))
	if !connected(renter.ID()) {
		t.Fatal("a relayed connection is closed moments after its job stream ended")
	}
	prov.closeIdleRelayed(ended.Add(relayIdle + time.Second))
	if connected(renter.ID()) {
		t.Error("a relayed connection idle since its job stream ended is kept")
	}
}
