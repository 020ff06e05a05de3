package p2p

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	msmux "github.com/multiformats/go-multistream"
)

// gossipHost is the host gossipsub is given: the same host, with two changes.
//
// Its connection manager values gossip mesh peers instead of protecting them (meshTagged).
// gossipsub protects every mesh peer of every topic from trimming. Every node follows the
// scores, revocations, market and model-catalogue topics (renters and coordinators the
// offers of their models too), and meshes fill from whoever is connected and grafts: at
// 150 providers a provider had 18 mesh peers per topic and 68 peers protected, at 300 it
// had 85, and the connection manager, which trims only unprotected peers, held it at
// about 85 + 48 connections against a p2p.max_peers of 64 (docs/performance.md,
// "Connections held to max_peers"). Valued instead, mesh peers are still the last
// trimmed, but trimmed to the limit.
//
// It tries again to open a stream that failed while the peer stays connected
// (NewStream).
//
// And it takes in a peer whose gossip stream comes in when identify did not name its
// gossipsub protocol (takeIn).
type gossipHost struct {
	host.Host
	cm    connmgr.ConnManager
	state *gossipState
	// protocolsUpdated tells gossipsub of a peer taken in by its stream (nil when the event
	// bus refused an emitter: such peers are then left to identify).
	protocolsUpdated event.Emitter
}

// gossipState is what gossipHost keeps beside the host: its counts, for the peer's
// counters, and what takeIn needs.
type gossipState struct {
	// retries counts the stream openings tried again (Peer.GossipStreamRetries).
	retries atomic.Int64
	// takenIn counts the peers taken in by their gossip stream (Peer.GossipPeersTakenIn).
	takenIn atomic.Int64
	// ps is the gossipsub this host was given to, once it started: takeIn asks it which
	// peers it has taken in.
	ps atomic.Pointer[pubsub.PubSub]
	// checking holds the connections takeIn is checking: one check a connection, however
	// many gossip streams the peer opens on it.
	checking sync.Map
	// grace replaces takeInGrace when set (tests).
	grace atomic.Int64
}

func newGossipHost(h host.Host, state *gossipState) host.Host {
	em, err := h.EventBus().Emitter(new(event.EvtPeerProtocolsUpdated))
	if err != nil {
		em = nil
	}
	return gossipHost{Host: h, cm: meshTagged(h.ConnManager()), state: state, protocolsUpdated: em}
}

func (h gossipHost) ConnManager() connmgr.ConnManager { return h.cm }

// gossipStreamWaits are the pauses before each new try at opening gossipsub's stream to a
// peer: five more tries over about 30 s.
var gossipStreamWaits = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

// NewStream opens gossipsub's stream to a peer, and tries again while the peer stays
// connected. gossipsub opens its one outbound stream to a peer once identify has named a
// gossipsub protocol, and if that fails it forgets the peer until the next connection: the
// peer never hears this node's subscriptions, so nothing it publishes on those topics comes
// here. The protocol being known, the negotiation is deferred to the first write (a failure
// there goes through gossipsub's own dead-peer retries); what fails here is opening the
// stream itself: a resource limit, a QUIC connection out of stream credit for 10 s
// (libp2p's negotiation timeout). Over QUIC at 300 providers on 2 cores, the providers tried
// 1 to 24 openings again per run, the coordinator none (docs/performance.md). A peer that
// speaks no gossipsub protocol is not tried again.
func (h gossipHost) NewStream(ctx context.Context, id peer.ID, protos ...protocol.ID) (network.Stream, error) {
	for try := 0; ; try++ {
		s, err := h.Host.NewStream(ctx, id, protos...)
		var unsupported msmux.ErrNotSupported[protocol.ID]
		if err == nil || try == len(gossipStreamWaits) || errors.As(err, &unsupported) ||
			h.Network().Connectedness(id) != network.Connected {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(gossipStreamWaits[try]):
		}
		if h.Network().Connectedness(id) != network.Connected {
			return nil, err
		}
		h.state.retries.Add(1)
	}
}

// SetStreamHandler sets gossipsub's handler of its inbound streams, which first takes the
// peer in (takeIn).
func (h gossipHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, h.takingIn(handler))
}

// SetStreamHandlerMatch is SetStreamHandler for a matched protocol.
func (h gossipHost) SetStreamHandlerMatch(pid protocol.ID, match func(protocol.ID) bool, handler network.StreamHandler) {
	h.Host.SetStreamHandlerMatch(pid, match, h.takingIn(handler))
}

func (h gossipHost) takingIn(handler network.StreamHandler) network.StreamHandler {
	return func(s network.Stream) {
		h.takeIn(s)
		handler(s)
	}
}

// takeInGrace is how long takeIn leaves gossipsub to take in a peer whose protocol the
// peerstore names once identify has ended on the connection: gossipsub reads identify's
// own event first.
const takeInGrace = 5 * time.Second

// takeIn tells gossipsub that the peer of an inbound gossip stream speaks its protocol,
// when identify has ended on the stream's connection and gossipsub has not taken the peer
// in. Gossipsub opens its own stream to a peer, which carries this node's subscriptions,
// only once identify names a gossipsub protocol for the peer; and identify is not tried
// again on a connection. So when this end's identify of the peer failed and the peer's of
// this end did not, the peer's gossip came in and this node's never went out: the peer
// never learnt what this node follows, and published nothing to it. Over QUIC at 300
// providers, 4 providers' offers never reached the coordinator that way in 4 minutes, each
// connected to it, having identified it, while the coordinator's identify of each had run
// out of time (docs/performance.md). The stream itself shows the protocol: the peer
// negotiated it.
//
// The peerstore alone cannot tell: libp2p keeps a peer's protocols for a minute past its
// last connection, so a peer back on a new connection whose identify failed is still
// named there. When the peerstore names the peer, gossipsub is given takeInGrace to take
// it in (it does at once when identify named it on this connection).
func (h gossipHost) takeIn(s network.Stream) {
	c, id, proto := s.Conn(), s.Conn().RemotePeer(), s.Protocol()
	if h.protocolsUpdated == nil || proto == "" {
		return
	}
	if _, already := h.state.checking.LoadOrStore(c, true); already {
		return
	}
	go func() {
		if ids, ok := h.Host.(interface{ IDService() identify.IDService }); ok {
			<-ids.IDService().IdentifyWait(c) // closed once identify ends, done or failed
		}
		if !h.supports(id, proto) {
			h.tell(c, id, proto)
			return
		}
		if h.inGossip(id) {
			h.state.checking.Delete(c)
			return
		}
		grace := time.Duration(h.state.grace.Load())
		if grace <= 0 {
			grace = takeInGrace
		}
		time.AfterFunc(grace, func() { h.tell(c, id, proto) })
	}()
}

// tell adds proto to the peer's protocols and tells gossipsub, unless the connection
// closed or gossipsub has taken the peer in meanwhile.
func (h gossipHost) tell(c network.Conn, id peer.ID, proto protocol.ID) {
	defer h.state.checking.Delete(c)
	if c.IsClosed() || h.inGossip(id) || h.Peerstore().AddProtocols(id, proto) != nil {
		return
	}
	h.state.takenIn.Add(1)
	_ = h.protocolsUpdated.Emit(event.EvtPeerProtocolsUpdated{Peer: id, Added: []protocol.ID{proto}})
}

func (h gossipHost) supports(id peer.ID, proto protocol.ID) bool {
	known, err := h.Peerstore().SupportsProtocols(id, proto)
	return err == nil && len(known) > 0
}

// inGossip reports whether gossipsub has taken the peer in (true before it started).
func (h gossipHost) inGossip(id peer.ID) bool {
	ps := h.state.ps.Load()
	return ps == nil || takenIn(ps, id)
}

// takenIn reports whether gossipsub has taken the peer in: it holds a stream to it,
// whatever the topics.
func takenIn(ps *pubsub.PubSub, id peer.ID) bool { return slices.Contains(ps.ListPeers(""), id) }
