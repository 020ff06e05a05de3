package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
)

// TestRelaySlotsForCertifiedOnly: a coordinator's relay gives a slot to a provider it
// certified and refuses a stranger with a fresh key.
func TestRelaySlotsForCertifiedOnly(t *testing.T) {
	newHost := func(opts ...libp2p.Option) host.Host {
		h, err := libp2p.New(append([]libp2p.Option{libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	certified, stranger := newHost(), newHost()
	r := Relay{Reservations: 8, CircuitsPerPeer: 2, CircuitDuration: time.Minute, CircuitData: 1 << 20,
		MayReserve: func(p peer.ID) bool { return p == certified.ID() }}
	acl := newRelayACL(r)
	relay := newHost(natOptions(Options{Reachability: "public", Relay: r}, acl)...)
	acl.use(relay.Network())
	ai := peer.AddrInfo{ID: relay.ID(), Addrs: relay.Addrs()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The relay service starts once the host takes itself as public (forced): moments after.
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = certified.Connect(ctx, ai); err == nil {
			if _, err = client.Reserve(ctx, certified, ai); err == nil {
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("the certified provider got no slot: %v", err)
	}
	if err := stranger.Connect(ctx, ai); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Reserve(ctx, stranger, ai); err == nil {
		t.Fatal("a stranger got a relay slot")
	}
}
