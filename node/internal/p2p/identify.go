package p2p

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"
)

// identifyFailedKept bounds how many peers' last identify failure a node remembers.
const identifyFailedKept = 1024

// identifyRetryAfter is how long after an identify failure with a bootstrap peer its
// connections are checked (replaceUnidentified). A connection younger than this and a
// second (identify's own time limit is 5 s) may still be identifying: it is checked again
// once it is that old.
const identifyRetryAfter = 5 * time.Second

// identifyReplaceEvery is the least time between two replacements of one peer's
// connections: an overloaded peer is not hammered with reconnections. A peer still
// unidentified when it comes is checked again then.
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
	// retryAfter and replaceEvery replace identifyRetryAfter and identifyReplaceEvery when
	// set (tests).
	retryAfter, replaceEvery atomic.Int64
	mu                       sync.Mutex
	last                     map[peer.ID]string    // the reason of each peer's last failure
	checking                 map[peer.ID]bool      // bootstrap peers whose connections are to be checked
	lastDone                 map[peer.ID]time.Time // when each peer's connections were last replaced
}

// putBounded sets m[k] to v, emptying m first when it holds identifyFailedKept entries.
func putBounded[V any](m map[peer.ID]V, k peer.ID, v V) map[peer.ID]V {
	if m == nil || len(m) >= identifyFailedKept {
		m = map[peer.ID]V{}
	}
	m[k] = v
	return m
}

func (f *identifyFailures) wait() time.Duration {
	if d := time.Duration(f.retryAfter.Load()); d > 0 {
		return d
	}
	return identifyRetryAfter
}

func (f *identifyFailures) every() time.Duration {
	if d := time.Duration(f.replaceEvery.Load()); d > 0 {
		return d
	}
	return identifyReplaceEvery
}

// watchIdentify counts identify failures and, identifyRetryAfter after one with a
// bootstrap peer, replaces its connections if gossipsub has not taken the peer in (it does
// once identify completes on one of them), until ctx ends.
func (p *Peer) watchIdentify(ctx context.Context) {
	f := &p.identify
	onEvent(ctx, p, func(e event.EvtPeerIdentificationFailed) {
		f.count.Add(1)
		bootstrap := p.Host.ConnManager().IsProtected(e.Peer, bootstrapProtection)
		f.mu.Lock()
		defer f.mu.Unlock()
		reason := "unknown"
		if e.Reason != nil {
			reason = e.Reason.Error()
		}
		f.last = putBounded(f.last, e.Peer, reason)
		if bootstrap && !f.checking[e.Peer] {
			f.checking = putBounded(f.checking, e.Peer, true)
			time.AfterFunc(f.wait(), func() { p.replaceUnidentified(ctx, e.Peer) })
		}
	})
}

// replaceUnidentified closes the connections of the bootstrap peer id when gossipsub has
// not taken the peer in, and connects to it again at once: both ends run identify on the
// new connection. While a connection may still be
// identifying, or the last replacement is under identifyReplaceEvery old, it checks again
// later.
func (p *Peer) replaceUnidentified(ctx context.Context, id peer.ID) {
	f := &p.identify
	if ctx.Err() != nil {
		return
	}
	conns := p.Host.Network().ConnsToPeer(id)
	inGossip := len(conns) > 0 && takenIn(p.ps, id)
	now := time.Now()
	youngest := time.Duration(1<<63 - 1)
	for _, c := range conns {
		if opened := c.Stat().Opened; !opened.IsZero() {
			youngest = min(youngest, now.Sub(opened))
		}
	}
	f.mu.Lock()
	var again time.Duration
	switch settle := f.wait() + time.Second; {
	case len(conns) == 0 || inGossip:
	case youngest < settle:
		again = settle - youngest
	case now.Sub(f.lastDone[id]) < f.every():
		again = f.every() - now.Sub(f.lastDone[id])
	}
	if again > 0 {
		time.AfterFunc(again, func() { p.replaceUnidentified(ctx, id) })
		f.mu.Unlock()
		return
	}
	delete(f.checking, id)
	replace := len(conns) > 0 && !inGossip
	if replace {
		f.lastDone = putBounded(f.lastDone, id, now)
	}
	f.mu.Unlock()
	if !replace {
		return
	}
	// Dial back where the peer was reached as well as where the peerstore says: addresses
	// learnt from the bootstrap list may have expired since.
	ai := peer.AddrInfo{ID: id, Addrs: p.Host.Peerstore().Addrs(id)}
	for _, c := range conns {
		if a := c.RemoteMultiaddr(); a != nil && !slices.ContainsFunc(ai.Addrs, a.Equal) {
			ai.Addrs = append(ai.Addrs, a)
		}
	}
	f.replaced.Add(1)
	_ = p.Host.Network().ClosePeer(id)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = p.Host.Connect(cctx, ai)
}

// IdentifyFailures is how many connections' identify exchange failed.
func (p *Peer) IdentifyFailures() int64 { return p.identify.count.Load() }

// IdentifyReplacements is how many times a bootstrap peer's connections were closed and
// opened again because gossipsub had not taken the peer in after an identify failure.
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
