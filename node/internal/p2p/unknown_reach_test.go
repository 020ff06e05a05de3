package p2p

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/node/internal/recordtest"
)

// TestUnknownReachabilityTakesRelaySlots: a provider whose reachability AutoNAT never
// settles (here every address is on loopback, which AutoNAT servers do not dial back, as
// behind a NAT whose both sides use private ranges) takes a relay slot on its coordinator
// after RelayIfUnknownAfter, and announces its relay address, so that renters can reach
// it; it still says its reachability is unknown.
func TestUnknownReachabilityTakesRelaySlots(t *testing.T) {
	l := &relayLab{t: t}
	r := Relay{Reservations: 8, CircuitsPerPeer: 4, CircuitDuration: time.Minute, CircuitData: 1 << 20}
	acl := newRelayACL(r)
	// The coordinator announces a public address besides its loopback one, as a real
	// coordinator does (AutoRelay builds relay addresses from a relay's public addresses
	// only); the provider reaches it on loopback.
	public := ma.StringCast("/ip4/9.9.9.9/tcp/4001")
	coordinator := l.host("127.0.0.1", append(natOptions(Options{Reachability: "public", Relay: r}, acl),
		libp2p.AddrsFactory(func(as []ma.Multiaddr) []ma.Multiaddr { return append(as, public) }))...)
	acl.use(coordinator.Network())
	key, _ := recordtest.NewKey()
	prov, err := New(Options{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Reachability: "auto", TakeRelaySlots: true,
		RelayIfUnknownAfter: time.Second, Bootstrap: []peer.AddrInfo{{ID: coordinator.ID(), Addrs: coordinator.Addrs()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		reach := prov.Reachability()
		if len(reach.Relays) > 0 {
			if want := public.String() + "/p2p/" + coordinator.ID().String() + "/p2p-circuit"; reach.Relays[0] != want {
				t.Fatalf("the provider's relay address %s, want %s", reach.Relays[0], want)
			}
			if reach.State != "unknown" {
				t.Fatalf("the provider says it is %s; nothing told it", reach.State)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no relay slot taken while reachability stayed %s (addresses %v)", reach.State, reach.Direct)
		}
	}
}
