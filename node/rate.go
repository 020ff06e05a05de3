package node

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// peerRate limits how many requests each peer makes in a sliding minute.
type peerRate struct {
	mu    sync.Mutex
	limit int
	seen  map[peer.ID][]time.Time
}

func newPeerRate(limit int) *peerRate {
	return &peerRate{limit: limit, seen: map[peer.ID][]time.Time{}}
}

// allow records a request from p at now and reports whether it is within the limit.
func (r *peerRate) allow(p peer.ID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	recent := r.seen[p][:0]
	for _, t := range r.seen[p] {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	if len(recent) >= r.limit {
		r.seen[p] = recent
		return false
	}
	r.seen[p] = append(recent, now)
	if len(r.seen) > 10_000 {
		// Forget idle peers so that many one-off peers cannot grow the map without bound.
		for q, ts := range r.seen {
			if len(ts) == 0 || now.Sub(ts[len(ts)-1]) >= time.Minute {
				delete(r.seen, q)
			}
		}
	}
	return true
}
