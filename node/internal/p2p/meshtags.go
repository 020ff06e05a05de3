package p2p

import (
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/peer"
)

// meshPeerValue is what being in one topic's gossip mesh is worth to the connection manager
// (the DHT's routing table peers are worth 5, a peer with a job stream open 100).
const meshPeerValue = 20

// meshTagged is cm, valuing gossip mesh peers instead of protecting them.
func meshTagged(cm connmgr.ConnManager) connmgr.ConnManager {
	m := meshTagManager{cm}
	if d, ok := connmgr.SupportsDecay(cm); ok {
		// gossipsub also tags the peers that deliver messages first, decaying.
		return meshTagDecayer{m, d}
	}
	return m
}

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
