package p2p

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/protocol"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
)

// NAT traversal, with libp2p's own tools:
//   - AutoNAT: peers dial a node back to tell it whether it is reachable (v1, which AutoRelay
//     follows, served by coordinators; v2, per address, served by every node);
//   - circuit relay v2: coordinators serve relays within limits (Relay); a node found
//     private takes reservations on its bootstrap coordinators and advertises the relay
//     addresses (…/p2p-circuit/p2p/<id>), which go into its offer;
//   - DCUtR: over a relayed connection the two ends hole-punch a direct one where their NATs
//     allow it, and streams then use it;
//   - UPnP / NAT-PMP port mappings on home routers that offer them.

// Relay limits a coordinator's circuit relay.
type Relay struct {
	Reservations    int
	CircuitsPerPeer int
	CircuitDuration time.Duration
	CircuitData     int64 // bytes each way
	// MayReserve says whether a peer may hold a relay slot (a coordinator: the providers it
	// certified); nil lets any peer. Anyone may connect to a peer holding one.
	MayReserve func(peer.ID) bool
}

// BulkProtocols are the stream protocols that carry a job's data: a stream of one to a peer
// reached through a relay moments ago waits for the hole punch first (preferDirect), and
// the connection is kept while it is open (keepForJobs). A job tunnel is one: it may carry
// a model server's traffic for hours, and a relayed connection is cut after an hour or
// 512 MiB.
var BulkProtocols = map[string]bool{protocol.JobProtocol: true, protocol.JobControlProtocol: true,
	protocol.JobInputProtocol: true, protocol.JobTunnelProtocol: true}

// reservationRetry is how soon a node asks a relay again after a refusal (libp2p's default
// is an hour): a provider is refused until its coordinator certifies it.
const reservationRetry = 20 * time.Second

// autonatPerMinute is how many AutoNAT dial-backs a coordinator makes a minute in all (3 per
// peer).
const autonatPerMinute = 600

// natOptions are the libp2p options of a node's NAT traversal; a public node's relay admits
// by acl (which is given the host once it is built: relayACL.use).
func natOptions(o Options, acl *relayACL) []libp2p.Option {
	opts := []libp2p.Option{libp2p.EnableHolePunching(), libp2p.EnableAutoNATv2(), libp2p.NATPortMap()}
	switch o.Reachability {
	case "public":
		r := relayv2.DefaultResources()
		r.BufferSize = 64 << 10 // the default (2 KiB) holds a relayed transfer to a trickle
		if o.Relay.Reservations > 0 {
			r.MaxReservations = o.Relay.Reservations
		}
		if o.Relay.CircuitsPerPeer > 0 {
			r.MaxCircuits = o.Relay.CircuitsPerPeer
		}
		// Slots go to certified providers only: a farm or a carrier-grade NAT may put many
		// behind one address.
		r.MaxReservationsPerIP, r.MaxReservationsPerASN = r.MaxReservations, r.MaxReservations
		if o.Relay.CircuitDuration > 0 && o.Relay.CircuitData > 0 {
			r.Limit = &relayv2.RelayLimit{Duration: o.Relay.CircuitDuration, Data: o.Relay.CircuitData}
		}
		relayOpts := []relayv2.Option{relayv2.WithResources(r), relayv2.WithACL(acl)}
		opts = append(opts, libp2p.ForceReachabilityPublic(), libp2p.EnableNATService(),
			// Every node behind NAT asks its coordinators; libp2p's default (30 dial-backs a
			// minute in all) would leave most of them "unknown".
			libp2p.AutoNATServiceRateLimit(autonatPerMinute, 3, time.Minute),
			libp2p.EnableRelayService(relayOpts...))
	case "private":
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	}
	if o.Reachability != "public" && o.TakeRelaySlots && len(o.Bootstrap) > 0 {
		opts = append(opts, libp2p.EnableAutoRelayWithStaticRelays(o.Bootstrap, autorelay.WithBootDelay(0),
			autorelay.WithNumRelays(len(o.Bootstrap)), autorelay.WithBackoff(reservationRetry), autorelay.WithMinInterval(reservationRetry)))
	}
	return opts
}

// reachability follows what AutoNAT says of the node.
type reachability struct {
	mu    sync.Mutex
	state network.Reachability
	since time.Time
}

// watch follows the host's reachability events until ctx ends.
func (r *reachability) watch(ctx context.Context, p *Peer) {
	onEvent(ctx, p, func(e event.EvtLocalReachabilityChanged) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if e.Reachability == network.ReachabilityUnknown && r.state == network.ReachabilityUnknown {
			return // relayIfUnknown's nudge: nothing was learnt
		}
		r.state, r.since = e.Reachability, time.Now()
	})
}

// UnknownReachabilityWait is how long a node that takes relay slots waits for AutoNAT's
// verdict before it takes them anyway. AutoNAT servers do not dial back private addresses,
// so a node behind a NAT whose both sides use private ranges (a company network,
// carrier-grade NAT) never hears it is private; without slots no renter reaches it.
const UnknownReachabilityWait = 30 * time.Second

// relayIfUnknown waits, then, if AutoNAT has said nothing yet, tells the host's AutoRelay
// that reachability is unknown, which has it take reservations on the static relays (the
// node's coordinators). The relay addresses are announced besides the direct ones while no
// direct address is confirmed reachable (AutoNAT v2); a later verdict of AutoNAT wins.
func (r *reachability) relayIfUnknown(ctx context.Context, p *Peer, wait time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(wait):
	}
	r.mu.Lock()
	unknown := r.state == network.ReachabilityUnknown
	r.mu.Unlock()
	if !unknown {
		return
	}
	em, err := p.Host.EventBus().Emitter(new(event.EvtLocalReachabilityChanged))
	if err != nil {
		return
	}
	defer em.Close()
	em.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityUnknown})
}

// onEvent calls f with each event of type E the host emits, until ctx ends.
func onEvent[E any](ctx context.Context, p *Peer, f func(E)) {
	sub, err := p.Host.EventBus().Subscribe(new(E))
	if err != nil {
		return
	}
	go func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-sub.Out():
				if !ok {
					return
				}
				f(e.(E))
			}
		}
	}()
}

// Reachability is what a node knows of how others reach it.
type Reachability struct {
	// State is "public" (peers dial it directly), "private" (behind NAT or a firewall:
	// peers reach it through its relays, then hole-punch where they can), or "unknown" (no
	// peer has checked it yet).
	State string
	// Since is when AutoNAT last changed its mind (zero when it never said).
	Since time.Time
	// Relays are the node's relay addresses, Direct the others it announces.
	Relays, Direct []string
}

// Reachability returns what the node knows of its reachability.
func (p *Peer) Reachability() Reachability {
	p.reach.mu.Lock()
	st, since := p.reach.state, p.reach.since
	p.reach.mu.Unlock()
	out := Reachability{State: "unknown", Since: since}
	switch st {
	case network.ReachabilityPublic:
		out.State = "public"
	case network.ReachabilityPrivate:
		out.State = "private"
	}
	for _, a := range p.Host.Addrs() {
		if IsRelayed(a) {
			out.Relays = append(out.Relays, a.String())
		} else {
			out.Direct = append(out.Direct, a.String())
		}
	}
	return out
}

// IsRelayed says whether an address goes through a relay.
func IsRelayed(a ma.Multiaddr) bool {
	return strings.Contains(a.String(), "/p2p-circuit")
}

// Path says how the node is connected to a peer now: "direct" when it has a direct
// connection, "relayed" when only through a relay, "" when not connected.
func (p *Peer) Path(id peer.ID) string {
	path := ""
	for _, c := range p.Host.Network().ConnsToPeer(id) {
		if !IsRelayed(c.RemoteMultiaddr()) {
			return "direct"
		}
		path = "relayed"
	}
	return path
}

// holePunchWait is how long a stream of bulk data (a job's image and output) to a peer
// reached through a relay moments ago waits for the hole punch (which starts with the
// relayed connection) to give a direct one; at most half the caller's time is spent so.
const holePunchWait = 5 * time.Second

// preferDirect waits, within holePunchWait of a relayed connection's opening, for a direct
// connection to the peer: streams opened then carry the job's data directly rather than
// through the coordinator's relay.
func (p *Peer) preferDirect(ctx context.Context, id peer.ID) {
	limit := time.Now().Add(holePunchWait)
	if dl, ok := ctx.Deadline(); ok {
		limit = minTime(limit, time.Now().Add(time.Until(dl)/2))
	}
	for time.Now().Before(limit) {
		young := false
		for _, c := range p.Host.Network().ConnsToPeer(id) {
			if !IsRelayed(c.RemoteMultiaddr()) {
				return
			}
			young = young || time.Since(c.Stat().Opened) < holePunchWait
		}
		if !young {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// OnAddrsChanged calls f each time the node's addresses change (a relay reservation taken or
// lost, an address observed, a port mapped), until ctx ends.
func (p *Peer) OnAddrsChanged(ctx context.Context, f func()) {
	onEvent(ctx, p, func(event.EvtLocalAddressesUpdated) { f() })
}
