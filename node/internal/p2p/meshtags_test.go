package p2p

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
)

// gossipsub's mesh protections become values the connection manager trims by, last; every
// other protection (a coordinator's, a job's) stays one; gossipsub keeps its decaying tags.
func TestMeshPeersValuedNotProtected(t *testing.T) {
	cm, err := libp2pconnmgr.NewConnManager(12, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	tagged := meshTagged(cm)
	if _, ok := connmgr.SupportsDecay(tagged); !ok {
		t.Fatal("gossipsub would lose its delivery tags")
	}
	mesh, coord := peer.ID("mesh peer"), peer.ID("coordinator")
	tagged.Protect(mesh, "pubsub:/gpunex/scores/1")
	tagged.Protect(mesh, "pubsub:/gpunex/revocations/1")
	tagged.Protect(coord, "gpunex-bootstrap")
	if cm.IsProtected(mesh, "") {
		t.Fatal("a mesh peer is protected from trimming")
	}
	if info := cm.GetTagInfo(mesh); info == nil || info.Value != 2*meshPeerValue {
		t.Fatalf("a mesh peer of two topics: %+v", info)
	}
	if !cm.IsProtected(coord, "gpunex-bootstrap") {
		t.Fatal("the coordinator lost its protection")
	}
	tagged.Unprotect(mesh, "pubsub:/gpunex/scores/1")
	if info := cm.GetTagInfo(mesh); info == nil || info.Value != meshPeerValue {
		t.Fatalf("a mesh peer of one topic left: %+v", info)
	}
}
