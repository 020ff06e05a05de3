package p2p

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Bans: a peer that keeps asking past its limits (rate-limited streams, spent budgets) is
// disconnected and refused for a while, so that it cannot make the node open, refuse and
// close streams for it at the speed of its link.

const (
	// MisbehaviourPerMinute is how many refused requests a peer may cause a minute (with
	// as many at once) before it is banned.
	MisbehaviourPerMinute = 60
	// BanFor is how long a banned peer's connections are refused.
	BanFor = 10 * time.Minute
)

// bans is the host's connection gater: it refuses the connections of banned peers.
type bans struct {
	mu      sync.Mutex
	until   map[peer.ID]time.Time
	refusal *Budget[peer.ID]
}

func newBans() *bans {
	return &bans{until: map[peer.ID]time.Time{}, refusal: NewBudget[peer.ID](MisbehaviourPerMinute, MisbehaviourPerMinute)}
}

func (b *bans) banned(p peer.ID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.until[p]
	if ok && time.Now().After(t) {
		delete(b.until, p)
		return false
	}
	return ok
}

// Misbehaved records a request refused to p for going past a limit; past
// MisbehaviourPerMinute, p is banned for BanFor and disconnected. It reports whether p is
// banned now.
func (p *Peer) Misbehaved(id peer.ID) bool {
	b := p.bans
	if b == nil {
		return false
	}
	if b.refusal.Spend(id, time.Now()) {
		return false
	}
	b.mu.Lock()
	if len(b.until) >= 10_000 {
		now := time.Now()
		for q, t := range b.until {
			if now.After(t) {
				delete(b.until, q)
			}
		}
	}
	b.until[id] = time.Now().Add(BanFor)
	b.mu.Unlock()
	p.Host.Network().ClosePeer(id)
	return true
}

// Banned reports whether a peer's connections are refused now.
func (p *Peer) Banned(id peer.ID) bool { return p.bans != nil && p.bans.banned(id) }

func (b *bans) InterceptPeerDial(p peer.ID) bool                                { return !b.banned(p) }
func (b *bans) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool                { return !b.banned(p) }
func (b *bans) InterceptAccept(network.ConnMultiaddrs) bool                     { return true }
func (b *bans) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
func (b *bans) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !b.banned(p)
}
