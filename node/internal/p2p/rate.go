package p2p

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// PeerRate limits how many requests each peer makes in a sliding minute.
type PeerRate struct {
	mu    sync.Mutex
	limit int
	seen  map[peer.ID][]time.Time
}

// NewPeerRate allows limit requests per peer in any minute.
func NewPeerRate(limit int) *PeerRate {
	return &PeerRate{limit: limit, seen: map[peer.ID][]time.Time{}}
}

// Allow records a request from p at now and reports whether it is within the limit.
func (r *PeerRate) Allow(p peer.ID, now time.Time) bool {
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
