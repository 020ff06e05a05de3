package p2p

import (
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// meshPeerValue is what being in one topic's gossip mesh is worth to the connection manager
// (the DHT's routing table peers are worth 5, a peer with a job stream open 100).
const meshPeerValue = 20

// meshTagHost is the host gossipsub is given: the same host, whose connection manager
// values gossip mesh peers instead of protecting them.
//
// gossipsub protects every mesh peer of every topic from trimming. Every node follows the
// scores, revocations, market and model-catalogue topics (renters and coordinators the
// offers of their models too), and meshes fill from whoever is connected and grafts: at
// 150 providers a provider had 18 mesh peers per topic and 68 peers protected, at 300 it
// had 85, and the connection manager, which trims only unprotected peers, held it at
// about 85 + 48 connections against a p2p.max_peers of 64 (docs/performance.md,
// "Connections held to max_peers"). Valued instead, mesh peers are still the last
// trimmed, but trimmed to the limit.
type meshTagHost struct {
	host.Host
	cm connmgr.ConnManager
}

func newMeshTagHost(h host.Host) host.Host {
	return meshTagHost{Host: h, cm: meshTagged(h.ConnManager())}
}

// meshTagged is cm, valuing gossip mesh peers instead of protecting them.
func meshTagged(cm connmgr.ConnManager) connmgr.ConnManager {
	m := meshTagManager{cm}
	if d, ok := connmgr.SupportsDecay(cm); ok {
		// gossipsub also tags the peers that deliver messages first, decaying.
		return meshTagDecayer{m, d}
	}
	return m
}

func (h meshTagHost) ConnManager() connmgr.ConnManager { return h.cm }

// meshTagManager turns gossipsub's protections (tags "pubsub:<topic>") into tags worth
// meshPeerValue; every other protection stays one.
type meshTagManager struct{ connmgr.ConnManager }

func gossipTag(tag string) bool { return strings.HasPrefix(tag, "pubsub:") }

func (m meshTagManager) Protect(id peer.ID, tag string) {
	if gossipTag(tag) {
		m.TagPeer(id, tag, meshPeerValue)
		return
	}
	m.ConnManager.Protect(id, tag)
}

func (m meshTagManager) Unprotect(id peer.ID, tag string) bool {
	if gossipTag(tag) {
		m.UntagPeer(id, tag)
		return false
	}
	return m.ConnManager.Unprotect(id, tag)
}

func (m meshTagManager) IsProtected(id peer.ID, tag string) bool {
	if gossipTag(tag) {
		return false
	}
	return m.ConnManager.IsProtected(id, tag)
}

// meshTagDecayer is meshTagManager over a connection manager with decaying tags.
type meshTagDecayer struct {
	meshTagManager
	d connmgr.Decayer
}

func (m meshTagDecayer) RegisterDecayingTag(name string, interval time.Duration, decay connmgr.DecayFn, bump connmgr.BumpFn) (connmgr.DecayingTag, error) {
	return m.d.RegisterDecayingTag(name, interval, decay, bump)
}
