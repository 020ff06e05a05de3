package p2p

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
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
// And it tries again to open a stream that failed while the peer stays connected
// (NewStream).
type gossipHost struct {
	host.Host
	cm connmgr.ConnManager
	// retries counts the stream openings tried again (Peer.GossipStreamRetries).
	retries *atomic.Int64
}

func newGossipHost(h host.Host, retries *atomic.Int64) host.Host {
	return gossipHost{Host: h, cm: meshTagged(h.ConnManager()), retries: retries}
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
		h.retries.Add(1)
	}
}
