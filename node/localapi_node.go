package node

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Routes of the local API about the node and its peers (docs/api.md): its status, a
// peer's connection and gossip score, its clock against its coordinator's, and the score
// records it holds.

func (a *APIServer) nodeRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/status", answer: a.status},
		{pattern: "GET /v1/peers/{id}", answer: a.peerConnection},
		{pattern: "GET /v1/clock", answer: a.clockOffset},
		{pattern: "GET /v1/gossip/{peer}", answer: a.gossipScore},
		{pattern: "GET /v1/scores", answer: a.scores},
	}
}

func (a *APIServer) status(r *http.Request) (any, error) {
	return a.n.Status(a.started), nil
}

// Status describes the node.
func (n *Node) Status(started time.Time) api.Status {
	r := n.peer.Reachability()
	return api.Status{
		PeerID:       n.peer.ID.String(),
		Role:         n.cfg.Role,
		Version:      api.Version,
		Addrs:        n.Addrs(),
		Peers:        n.peer.Connected(),
		OffersKnown:  len(n.book.Live(n.clock.Now())),
		StartedAt:    started,
		Sandbox:      n.sandboxStatus,
		Reachability: r.State,
		Relayed:      len(r.Relays) > 0,
	}
}

// peerConnection answers GET /v1/peers/{id}: how this node is connected to the peer.
func (a *APIServer) peerConnection(r *http.Request) (any, error) {
	id, err := peer.Decode(r.PathValue("id"))
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("%q: not a peer ID", r.PathValue("id")))
	}
	v := api.PeerView{ID: id.String(), Path: a.n.peer.Path(id), Conns: []string{}}
	for _, c := range a.n.peer.Host.Network().ConnsToPeer(id) {
		v.Conns = append(v.Conns, c.RemoteMultiaddr().String())
	}
	return v, nil
}

// clockOffset answers GET /v1/clock: this node's clock against its coordinator's.
func (a *APIServer) clockOffset(r *http.Request) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	return a.n.wallet.ClockOffset(ctx)
}

// gossipScore answers GET /v1/gossip/{peer}: the peer's gossipsub score here.
func (a *APIServer) gossipScore(r *http.Request) (any, error) {
	p, err := peer.Decode(r.PathValue("peer"))
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("peer %q: %w", r.PathValue("peer"), err))
	}
	score, known := a.n.peer.GossipScore(p)
	return api.GossipView{Peer: p.String(), Score: score, Known: known}, nil
}

// scores answers GET /v1/scores[?provider=ID]: the score records this node holds.
func (a *APIServer) scores(r *http.Request) (any, error) {
	all := a.n.scores.Scores()
	want := r.URL.Query().Get("provider")
	if want == "" {
		return all, nil
	}
	out := []protocol.ScoreRecord{}
	for _, s := range all {
		if s.Provider == want {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no score record for %s (scores come from the coordinator's probes)", api.ErrNotFound, want)
	}
	return out, nil
}
