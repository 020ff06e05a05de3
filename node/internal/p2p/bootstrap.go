package p2p

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/internal/clock"
)

// gossipRepairAfter is how long a bootstrap peer may stay connected but out of this node's
// gossip before the connection is closed and made again; gossipRepairEvery, how long after
// a repair the same peer may be repaired again.
const (
	gossipRepairAfter = 20 * time.Second
	gossipRepairEvery = 10 * time.Minute
)

// repairGossip reconnects to a bootstrap peer that has been connected for gossipRepairAfter
// without being a gossip peer on a joined topic. Gossipsub gives up on a peer whose stream it
// could not open (a busy coordinator refusing streams in a burst of joins, a protocol
// negotiation timing out on a loaded machine) until the next connection: the node would
// hear nothing of its coordinator's gossip, and its offers would not reach it (the scale
// harness, docs/performance.md). A peer that shares none of this node's topics is cut off;
// one that shares some is not (a coordinator of another version, or one this node scores
// low). cutOff remembers since when each peer is cut off, repaired when each was last
// repaired: a repair closes every stream with the peer, so it is rare. Repairing more often
// did not pay: backing off from 20 s instead of waiting 10 minutes, with or without 5 s
// between closing and reconnecting, made 169 (mocknet) to 420 (QUIC) reconnections per
// scale-harness run at 300 providers and did not mend the providers whose gossip with the coordinator was cut
// (docs/performance.md, "300 providers over QUIC, converging"); the coordinator catches
// their offers up after its probes instead (offers.Catalogue.CatchUp).
func (p *Peer) repairGossip(ctx context.Context, boot []peer.AddrInfo, now time.Time, cutOff, repaired map[peer.ID]time.Time, log *slog.Logger) {
	p.mu.Lock()
	topics := slices.Clone(p.topics)
	p.mu.Unlock()
	for _, ai := range boot {
		if ai.ID == p.ID || p.Host.Network().Connectedness(ai.ID) != network.Connected || len(topics) == 0 {
			delete(cutOff, ai.ID)
			continue
		}
		gossiping := false
		for _, t := range topics {
			if slices.Contains(t.t.ListPeers(), ai.ID) {
				gossiping = true
			}
		}
		if gossiping {
			delete(cutOff, ai.ID)
			continue
		}
		since, seen := cutOff[ai.ID]
		if !seen {
			cutOff[ai.ID] = now
			continue
		}
		if now.Sub(since) < gossipRepairAfter || now.Sub(repaired[ai.ID]) < gossipRepairEvery {
			continue
		}
		delete(cutOff, ai.ID)
		repaired[ai.ID] = now
		p.gossipRepairs.Add(1)
		log.Info("connected to a bootstrap peer but not gossiping with it: reconnecting", "peer", ai.ID)
		p.Host.Network().ClosePeer(ai.ID)
		// The peer may dial this node back at the same moment (its DHT redials a peer it
		// lost): over TCP the two dials can meet as one connection where both ends start
		// TLS as its client, and both fail (1 repair in about 150 on loopback). Up to three
		// times, then, a moment apart, past the dial backoff the failure set.
		// A peer that did not answer in time is not tried again: the loop's other checks
		// wait for this one.
		for try := range 3 {
			if try > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
				p.clearBackoff(ai.ID)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := p.Host.Connect(cctx, ai)
			timedOut := cctx.Err() != nil
			cancel()
			if err == nil && p.Host.Network().Connectedness(ai.ID) == network.Connected {
				break
			}
			log.Debug("bootstrap peer unreachable", "peer", ai.ID, "try", try+1, "err", err)
			if timedOut {
				break
			}
		}
	}
}

// Joined are what a node does each time it goes from no peer to some, and what it watches
// while joined.
type Joined struct {
	// Sync runs first: catch up on what was missed (revocations, the offer catalogue).
	Sync func(ctx context.Context)
	// Announce runs once the DHT's routing table has been refreshed: a provider publishes
	// its offer to the network just joined.
	Announce func()
	// Unheard, when set, says whether something the node publishes does not reach its
	// coordinators: a provider's offer topic with no bootstrap peer among its gossip peers.
	// The node then dials the bootstrap peers it is not connected to (reachBootstrap).
	Unheard func() bool
}

// reachFirstWait is how long a node with peers may publish to nobody before it dials its
// unconnected bootstrap peers; the wait doubles after each dial that did not mend it, up to
// reachMostWait.
const (
	reachFirstWait = 30 * time.Second
	reachMostWait  = 5 * time.Minute
)

// bootstrapReach is reachBootstrap's state: since when the node is unheard, when it may
// dial next, and the wait after that.
type bootstrapReach struct {
	since, next time.Time
	wait        time.Duration
}

// reachBootstrap dials the bootstrap peers this node is not connected to once it has been
// unheard for reachFirstWait, then after 1, 2, 4 and every 5 minutes while it stays unheard.
// A provider publishes its offer by fanout, to the connected peers that subscribe to its
// model's topic: one connected to other providers only (its connection to the coordinator
// closed, by either end) publishes to nobody, and the coordinator, which probes and scores
// by the offer, lacks it until a probe catches it up; with more peers than none, the node
// would otherwise never dial its coordinators again (docs/performance.md, "A provider
// connected to others but not to its coordinator"). A coordinator connected but out of
// gossip is mended by repairGossip and the identify watch instead, so connected bootstrap
// peers are left alone. The backoff keeps a network whose coordinators trim their
// connections (past p2p.max_peers) from being dialled in a loop.
func (p *Peer) reachBootstrap(ctx context.Context, boot []peer.AddrInfo, now time.Time, unheard bool, r *bootstrapReach, log *slog.Logger) {
	if !unheard {
		*r = bootstrapReach{}
		return
	}
	if r.since.IsZero() {
		*r = bootstrapReach{since: now, next: now.Add(reachFirstWait), wait: 2 * reachFirstWait}
	}
	if now.Before(r.next) {
		return
	}
	if n := p.dialBootstrap(ctx, boot, log); n > 0 {
		p.bootstrapRedials.Add(int64(n))
		log.Info("publishing to nobody: dialled the bootstrap peers again", "dialled", n, "unheard", now.Sub(r.since).Round(time.Second))
		r.next, r.wait = now.Add(r.wait), min(2*r.wait, reachMostWait)
	}
}

// dialBootstrap dials each bootstrap peer this node is not connected to, 5 s each, and says
// how many it dialled.
func (p *Peer) dialBootstrap(ctx context.Context, boot []peer.AddrInfo, log *slog.Logger) int {
	dialled := 0
	for _, ai := range boot {
		if ai.ID == p.ID || p.Host.Network().Connectedness(ai.ID) == network.Connected {
			continue
		}
		dialled++
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.Host.Connect(cctx, ai)
		cancel()
		if err != nil {
			log.Debug("bootstrap peer unreachable", "peer", ai.ID, "err", err)
		}
	}
	return dialled
}

// BootstrapRedials is how many times this node, having peers but publishing to nobody,
// dialled a bootstrap peer it was not connected to (reachBootstrap).
func (p *Peer) BootstrapRedials() int64 { return p.bootstrapRedials.Load() }

// KeepJoined connects to the bootstrap peers until connected, and again whenever the node
// finds itself alone, until ctx ends. Whenever it goes from no peer to at least one, however
// that happened, it runs j.Sync, refreshes the DHT routing table and runs j.Announce. While
// joined, it mends a bootstrap peer out of gossip (repairGossip) and dials the unconnected
// ones while j.Unheard says the node publishes to nobody (reachBootstrap).
func (p *Peer) KeepJoined(ctx context.Context, boot []peer.AddrInfo, clk clock.Clock, log *slog.Logger, j Joined) {
	if len(boot) == 0 {
		return
	}
	// alone is true at start and whenever every peer is gone. The DHT may connect to the
	// bootstrap peers by itself, so joining is noticed by having peers, not by connecting.
	alone := true
	cutOff, repaired := map[peer.ID]time.Time{}, map[peer.ID]time.Time{}
	var reach bootstrapReach
	// The coordinators' connections are never closed to make room (p2p.max_peers).
	for _, ai := range boot {
		p.Host.ConnManager().Protect(ai.ID, bootstrapProtection)
	}
	for {
		p.repairGossip(ctx, boot, clk.Now(), cutOff, repaired, log)
		if p.Connected() == 0 {
			alone = true
			reach = bootstrapReach{} // joined again, the wait starts over
			p.dialBootstrap(ctx, boot, log)
		} else if !alone && j.Unheard != nil {
			p.reachBootstrap(ctx, boot, clk.Now(), j.Unheard(), &reach, log)
		}
		if peers := p.Connected(); alone && peers > 0 {
			alone = false
			log.Info("joined the network", "peers", peers)
			if j.Sync != nil {
				j.Sync(ctx)
			}
			p.RefreshRoutingTable(ctx)
			if ctx.Err() != nil {
				return
			}
			if j.Announce != nil {
				j.Announce()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(2 * time.Second):
		}
	}
}
