package p2p

import (
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// PeerRate limits how many requests each peer makes in a sliding window (a minute unless
// NewPeerRateOver says otherwise).
type PeerRate struct {
	mu     sync.Mutex
	limit  int
	window time.Duration
	seen   map[peer.ID][]time.Time
}

// NewPeerRate allows limit requests per peer in any minute.
func NewPeerRate(limit int) *PeerRate { return NewPeerRateOver(limit, time.Minute) }

// NewPeerRateOver allows limit requests per peer in any window.
func NewPeerRateOver(limit int, window time.Duration) *PeerRate {
	return &PeerRate{limit: limit, window: window, seen: map[peer.ID][]time.Time{}}
}

// Allow records a request from p at now and reports whether it is within the limit.
func (r *PeerRate) Allow(p peer.ID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	recent := r.seen[p][:0]
	for _, t := range r.seen[p] {
		if now.Sub(t) < r.window {
			recent = append(recent, t)
		}
	}
	if len(recent) >= r.limit {
		r.seen[p] = recent
		return false
	}
	r.seen[p] = append(recent, now)
	if len(r.seen) > 10_000 {
		// Forget idle peers so that many one-off peers cannot grow the map without bound.
		for q, ts := range r.seen {
			if len(ts) == 0 || now.Sub(ts[len(ts)-1]) >= r.window {
				delete(r.seen, q)
			}
		}
	}
	return true
}

// Budget is a token bucket per key (a peer, a network): each key may spend up to burst at
// once, and its budget refills at perMinute. It costs O(1) a call.
type Budget[K comparable] struct {
	mu        sync.Mutex
	perMinute float64
	burst     float64
	keys      map[K]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// PeerBudget is a Budget per peer.
type PeerBudget = Budget[peer.ID]

// NewPeerBudget gives every peer perMinute a minute, at most burst at once.
func NewPeerBudget(perMinute, burst int) *PeerBudget {
	return NewBudget[peer.ID](float64(perMinute), float64(burst))
}

// NewBudget gives every key perMinute a minute, at most burst at once.
func NewBudget[K comparable](perMinute, burst float64) *Budget[K] {
	return &Budget[K]{perMinute: perMinute, burst: burst, keys: map[K]*bucket{}}
}

// Spend takes one from k's budget at now and reports whether there was one to take.
func (b *Budget[K]) Spend(k K, now time.Time) bool { return b.Take(k, now, 1) }

// Take takes n from k's budget at now, all or nothing, and reports whether there was that
// much to take.
func (b *Budget[K]) Take(k K, now time.Time, n float64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	x := b.keys[k]
	if x == nil {
		if len(b.keys) >= 10_000 {
			// Forget the keys whose budget is full again: they cost nothing to recreate.
			for q, y := range b.keys {
				if y.tokens+now.Sub(y.at).Minutes()*b.perMinute >= b.burst {
					delete(b.keys, q)
				}
			}
		}
		x = &bucket{tokens: b.burst, at: now}
		b.keys[k] = x
	}
	x.tokens = min(b.burst, x.tokens+now.Sub(x.at).Minutes()*b.perMinute)
	x.at = now
	if x.tokens < n {
		return false
	}
	x.tokens -= n
	return true
}

// NetworkBudget is a Budget per network (an IPv4 address, an IPv6 /64; for a peer reached
// through a relay, that relay and the peer) of the peers a node talks to. Peers at this
// host's own address (127.0.0.1, ::1) have none: they are the operator's own processes (a
// devnet, a test); nor have the trusted coordinators: strangers on a coordinator's address
// (its host, or peers it relays) must not spend what the coordinator asks for.
type NetworkBudget struct {
	b       *Budget[string]
	trusted map[peer.ID]bool
}

// NewNetworkBudget gives every network perMinute a minute, at most burst at once; the
// trusted peers (the coordinators) spend none.
func NewNetworkBudget(perMinute, burst float64, trusted ...peer.ID) *NetworkBudget {
	nb := &NetworkBudget{b: NewBudget[string](perMinute, burst), trusted: map[peer.ID]bool{}}
	for _, id := range trusted {
		nb.trusted[id] = true
	}
	return nb
}

// Take takes n from the budget of the connection's network at now, all or nothing.
func (nb *NetworkBudget) Take(c network.Conn, now time.Time, n float64) bool {
	if nb.trusted[c.RemotePeer()] {
		return true
	}
	net := NetworkOfConn(c)
	return net == "loopback" || nb.b.Take(net, now, n)
}

// Sources bounds the costly work peers may ask for both per peer and per network, so that a
// new peer ID buys nothing: a host that rotates identities shares its network's budget.
type Sources struct {
	peers *Budget[peer.ID]
	nets  *NetworkBudget
}

// NewSources gives each peer perMinute (burst at once), and each network netFactor times
// that; the trusted peers (the coordinators) have a peer's budget and spend no network's.
func NewSources(perMinute, burst, netFactor float64, trusted ...peer.ID) *Sources {
	return &Sources{peers: NewBudget[peer.ID](perMinute, burst), nets: NewNetworkBudget(perMinute*netFactor, burst*netFactor, trusted...)}
}

// Take spends n of the budgets of the stream's peer and network at now; false, and
// nothing spent, when either is short.
func (s *Sources) Take(c network.Conn, now time.Time, n float64) bool {
	if !s.nets.Take(c, now, n) {
		return false
	}
	if !s.peers.Take(c.RemotePeer(), now, n) {
		s.nets.Take(c, now, -n) // give the network's share back
		return false
	}
	return true
}

// NetworkOf names the network an address is in: an IPv4 address, an IPv6 /64, "loopback"
// for 127.0.0.1 and ::1, "relay/<relay>/<peer>" for a peer's address through a relay, or the
// address itself when it holds no IP (an in-memory connection, a relayed address that names
// no peer). A relayed address starts with the relay's own address, which says nothing of
// where the peer is: counted as the relay's network, one stranger reached through a
// coordinator's relay would spend the budget of every peer reached through it (the relay
// bounds the circuits each network of its own peers opens instead, relayACL).
func NetworkOf(a ma.Multiaddr) string {
	if a == nil {
		return ""
	}
	if IsRelayed(a) {
		relayPart, peerPart := ma.SplitFunc(a, func(c ma.Component) bool { return c.Protocol().Code == ma.P_CIRCUIT })
		_, relay := peer.SplitAddr(relayPart)
		_, id := peer.SplitAddr(peerPart)
		if relay == "" || id == "" {
			return a.String()
		}
		return "relay/" + relay.String() + "/" + id.String()
	}
	ip, err := manet.ToIP(a)
	if err != nil {
		return a.String()
	}
	if ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback) {
		return "loopback"
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// NetworkOfConn names the network of a connection's remote peer (NetworkOf): a relayed
// connection's remote address names the relay only, so the peer is added to it.
func NetworkOfConn(c network.Conn) string {
	a := c.RemoteMultiaddr()
	if a != nil && IsRelayed(a) {
		if p2p, err := ma.NewComponent("p2p", c.RemotePeer().String()); err == nil {
			a = a.Encapsulate(p2p)
		}
	}
	return NetworkOf(a)
}
