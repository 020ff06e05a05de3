package p2p

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/protocol"
)

// A coordinator's relay admits circuits by the source's network, not only by its peer ID.
// libp2p's relay bounds circuits per peer (p2p.relay.circuits_per_peer, for source and
// destination alike), whoever opens them: with fresh keys, one stranger could take every
// circuit to a provider behind NAT and keep renters from reaching it (the security review
// of 2026-12-05, finding 6). The provider cannot tell where a relayed peer is (the
// connection shows the relay's address: NetworkOf); the relay can, so it bounds what each
// network opens to each destination, as a direct peer's network budget would.
const (
	// relayCircuitsPerNetwork is how many circuits one network (an IPv4 address, an IPv6
	// /64) holds at once to one destination: a renter needs one, until its hole punch
	// succeeds.
	relayCircuitsPerNetwork = 2
	// relayOpensPerMinute is how many circuits one network opens a minute to one
	// destination (as many at once): identities rotating through the relay get what they
	// would get directly, about four peers' worth of the provider's budgets.
	relayOpensPerMinute = 4
)

// relayACL admits reservations by Relay.MayReserve, and circuits by the source's network
// (relayCircuitsPerNetwork, relayOpensPerMinute). The host's own address is exempt, as from
// network budgets.
type relayACL struct {
	may func(peer.ID) bool // nil: anyone may reserve
	// circuitLife is the longest a circuit lasts (its limit and handshakes): a circuit
	// counted longer than that has ended whatever the streams say.
	circuitLife time.Duration
	opens       *Budget[circuitKey]

	mu       sync.Mutex
	net      network.Network // nil until the host is built (use)
	circuits map[circuitKey][]circuit
}

// circuitKey is a source network and a destination.
type circuitKey struct {
	net  string
	dest peer.ID
}

// circuit is one the relay was allowed to open. The relay says nothing when a circuit ends:
// it closes the source's hop stream then. Which of the source's open hop streams is this
// circuit's is not told either, so a circuit is taken to live while any of those open when
// it was allowed lives: never counted ended too soon, at worst a moment late.
type circuit struct {
	hops  []network.Stream
	until time.Time
}

// newRelayACL admits by the relay's settings (natOptions applies the same limits).
func newRelayACL(r Relay) *relayACL {
	life := relayv2.DefaultLimit().Duration
	if r.CircuitDuration > 0 && r.CircuitData > 0 {
		life = r.CircuitDuration
	}
	return &relayACL{may: r.MayReserve, circuitLife: life + relayv2.ConnectTimeout + relayv2.HandshakeTimeout,
		opens: NewBudget[circuitKey](relayOpensPerMinute, relayOpensPerMinute), circuits: map[circuitKey][]circuit{}}
}

// use gives the ACL the host's network, where it sees the relay's streams.
func (a *relayACL) use(n network.Network) {
	a.mu.Lock()
	a.net = n
	a.mu.Unlock()
}

func (a *relayACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool { return a.may == nil || a.may(p) }

func (a *relayACL) AllowConnect(src peer.ID, srcAddr ma.Multiaddr, dest peer.ID) bool {
	k := circuitKey{NetworkOf(srcAddr), dest}
	if k.net == "loopback" {
		return true
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.net == nil {
		return false // the relay is not served before the host is built
	}
	live := a.live(a.circuits[k], now)
	if len(live) >= relayCircuitsPerNetwork || !a.opens.Spend(k, now) {
		a.keep(k, live)
		return false
	}
	a.keep(k, append(live, circuit{hops: a.hopStreams(src), until: now.Add(a.circuitLife)}))
	if len(a.circuits) > 10_000 {
		// Forget the networks whose circuits have all ended.
		for q, cs := range a.circuits {
			a.keep(q, a.live(cs, now))
		}
	}
	return true
}

func (a *relayACL) keep(k circuitKey, cs []circuit) {
	if len(cs) == 0 {
		delete(a.circuits, k)
	} else {
		a.circuits[k] = cs
	}
}

// live returns the circuits of cs that may still be open at now.
func (a *relayACL) live(cs []circuit, now time.Time) []circuit {
	var out []circuit
	for _, c := range cs {
		if now.Before(c.until) && slices.ContainsFunc(c.hops, open) {
			out = append(out, c)
		}
	}
	return out
}

// hopStreams are the hop streams src has open to the relay: a circuit request in progress
// among them.
func (a *relayACL) hopStreams(src peer.ID) []network.Stream {
	var out []network.Stream
	for _, c := range a.net.ConnsToPeer(src) {
		for _, s := range c.GetStreams() {
			if s.Protocol() == proto.ProtoIDv2Hop && s.Stat().Direction == network.DirInbound {
				out = append(out, s)
			}
		}
	}
	return out
}

// open says whether a stream is still open: its connection holds it until it is closed or
// reset (and its handler has returned).
func open(s network.Stream) bool {
	return !s.Conn().IsClosed() && slices.Contains(s.Conn().GetStreams(), s)
}

// A relayed connection a peer opened to this node (a provider behind NAT) holds one of the
// few circuits to it: one that never carries any of the node's streams (a stranger hoarding
// circuits) is closed relayUnused after it opened, and one that carried some, once it has
// carried none for relayIdle (a renter since hole-punched to a direct connection; a renter
// that only asks for its job's checkpoints, once a minute, keeps its own). A renter that
// comes back opens another.
const (
	relayUnused = 30 * time.Second
	relayIdle   = 2 * protocol.CheckpointInterval
)

// usedRelayed notes that a stream of the node's protocols is handled on relayed connection c.
func (p *Peer) usedRelayed(c network.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.relayedUse == nil {
		p.relayedUse = map[network.Conn]time.Time{}
	}
	p.relayedUse[c] = time.Now()
}

// closeIdleRelayed closes the relayed connections peers opened to this node that carry
// none of its streams now and either never did, relayUnused after they opened, or did
// last relayIdle before now.
func (p *Peer) closeIdleRelayed(now time.Time) {
	var idle []network.Conn
	p.mu.Lock()
	present := map[network.Conn]bool{}
	for _, c := range p.Host.Network().Conns() {
		st := c.Stat()
		if !st.Limited || st.Direction != network.DirInbound {
			continue
		}
		present[c] = true
		last, grace := st.Opened, relayUnused
		if t, ok := p.relayedUse[c]; ok {
			last, grace = t, relayIdle
		}
		if now.Sub(last) >= grace && !slices.ContainsFunc(c.GetStreams(), ours) {
			idle = append(idle, c)
		}
	}
	for c := range p.relayedUse {
		if !present[c] {
			delete(p.relayedUse, c)
		}
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// ours says whether a stream is of the node's own protocols (not libp2p's: identify, hole
// punching).
func ours(s network.Stream) bool { return strings.HasPrefix(string(s.Protocol()), "/gpunex/") }

// closeIdleRelayedLoop runs closeIdleRelayed until ctx ends.
func (p *Peer) closeIdleRelayedLoop(ctx context.Context) {
	t := time.NewTicker(relayUnused / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.closeIdleRelayed(now)
		}
	}
}
