package p2p

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// identifyFailedKept bounds how many peers' last identify failure a node remembers.
const identifyFailedKept = 1024

// identifyRetryAfter is how long a bootstrap peer whose identify failed is left connected
// without a completed identify before its connections are replaced (replaceUnidentified).
var identifyRetryAfter = 5 * time.Second

// identifyReplaceEvery is the least time between two replacements of one peer's
// connections: an overloaded peer is not hammered with reconnections.
const identifyReplaceEvery = time.Minute

// bootstrapProtection is the connection manager's protection of the bootstrap peers (the
// coordinators) against trimming past p2p.max_peers (KeepJoined).
const bootstrapProtection = "gpunex-bootstrap"

// identifyFailures counts the connections whose identify exchange failed, and replaces a
// bootstrap peer's. Gossipsub takes a peer in only when identify completes and names a
// gossipsub protocol (or the peer later announces one), and the DHT adds a peer to its
// routing table the same way; a failed identify is not tried again on the same connection.
// So a connection whose identify failed carries no gossip, on either of its ends once both
// failed, until it is replaced: the scale harness found providers connected to their
// coordinator alone, with no gossip and no DHT peer, after both ends' identify ran out of
// time in a burst of 300 joins over QUIC (docs/performance.md). Only the connections to a
// bootstrap peer (a coordinator) are replaced: the node dials it again at once, while a
// coordinator that closed a provider's connection would leave it unconnected until its
// next probe; between other peers, gossip has other paths and the connection manager
// trims what carries nothing.
type identifyFailures struct {
	count    atomic.Int64
	replaced atomic.Int64
	mu       sync.Mutex
	last     map[peer.ID]string    // the reason of each peer's last failure
	checking map[peer.ID]bool      // peers whose connections are to be checked (replaceUnidentified)
	lastDone map[peer.ID]time.Time // when each peer's connections were last replaced
	// identified holds the connections whose identify completed (closed ones are swept out
	// when it grows past identifyFailedKept).
	identified map[network.Conn]bool
}

// watchIdentify counts identify failures and, identifyRetryAfter after one with a
// bootstrap peer, replaces its connections if none of them completed identify, until ctx
// ends.
func (p *Peer) watchIdentify(ctx context.Context) {
	f := &p.identify
	onEvent(ctx, p, func(e event.EvtPeerIdentificationFailed) {
		f.count.Add(1)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.last == nil || len(f.last) >= identifyFailedKept {
			f.last = map[peer.ID]string{}
		}
		reason := "unknown"
		if e.Reason != nil {
			reason = e.Reason.Error()
		}
		f.last[e.Peer] = reason
		if f.checking == nil {
			f.checking = map[peer.ID]bool{}
		}
		if !f.checking[e.Peer] && p.Host.ConnManager().IsProtected(e.Peer, bootstrapProtection) {
			f.checking[e.Peer] = true
			time.AfterFunc(identifyRetryAfter, func() { p.replaceUnidentified(ctx, e.Peer) })
		}
	})
	onEvent(ctx, p, func(e event.EvtPeerIdentificationCompleted) {
		if e.Conn == nil {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.identified == nil {
			f.identified = map[network.Conn]bool{}
		}
		if len(f.identified) >= identifyFailedKept {
			for c := range f.identified {
				if c.IsClosed() {
					delete(f.identified, c)
				}
			}
		}
		f.identified[e.Conn] = true
	})
}

// replaceUnidentified closes the connections of the bootstrap peer id when none of them
// completed identify, and connects to it again at once: both ends run identify on the new
// connection.
func (p *Peer) replaceUnidentified(ctx context.Context, id peer.ID) {
	f := &p.identify
	conns := p.Host.Network().ConnsToPeer(id)
	now := time.Now()
	f.mu.Lock()
	delete(f.checking, id)
	replace := ctx.Err() == nil && len(conns) > 0 && now.Sub(f.lastDone[id]) >= identifyReplaceEvery
	for _, c := range conns {
		replace = replace && !f.identified[c]
	}
	if replace {
		if f.lastDone == nil || len(f.lastDone) >= identifyFailedKept {
			f.lastDone = map[peer.ID]time.Time{}
		}
		f.lastDone[id] = now
	}
	f.mu.Unlock()
	if !replace {
		return
	}
	f.replaced.Add(1)
	_ = p.Host.Network().ClosePeer(id)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = p.Host.Connect(cctx, peer.AddrInfo{ID: id})
}

// IdentifyFailures is how many connections' identify exchange failed.
func (p *Peer) IdentifyFailures() int64 { return p.identify.count.Load() }

// IdentifyReplacements is how many times a bootstrap peer's connections were closed and
// opened again because identify had failed on every one of them.
func (p *Peer) IdentifyReplacements() int64 { return p.identify.replaced.Load() }

// IdentifyFailedWith is the reason the last identify exchange with id failed, or "" when
// none failed that the node remembers.
func (p *Peer) IdentifyFailedWith(id peer.ID) string {
	p.identify.mu.Lock()
	defer p.identify.mu.Unlock()
	return p.identify.last[id]
}

// IdentifyFailureReasons counts the reasons of the failures the node remembers, one per peer.
func (p *Peer) IdentifyFailureReasons() map[string]int {
	p.identify.mu.Lock()
	defer p.identify.mu.Unlock()
	out := map[string]int{}
	for _, r := range p.identify.last {
		out[r]++
	}
	return out
}
