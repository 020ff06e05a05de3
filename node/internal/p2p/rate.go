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

// PeerBudget is a per-peer token bucket: each peer may spend up to burst at once, and its
// budget refills at perMinute. It costs O(1) a call, for limits in the thousands.
type PeerBudget struct {
	mu        sync.Mutex
	perMinute float64
	burst     float64
	peers     map[peer.ID]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// NewPeerBudget gives every peer perMinute a minute, at most burst at once.
func NewPeerBudget(perMinute, burst int) *PeerBudget {
	return &PeerBudget{perMinute: float64(perMinute), burst: float64(burst), peers: map[peer.ID]*bucket{}}
}

// Spend takes one from p's budget at now and reports whether there was one to take.
func (b *PeerBudget) Spend(p peer.ID, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.peers[p]
	if k == nil {
		if len(b.peers) >= 10_000 {
			// Forget the peers whose budget is full again: they cost nothing to recreate.
			for q, x := range b.peers {
				if x.tokens+now.Sub(x.at).Minutes()*b.perMinute >= b.burst {
					delete(b.peers, q)
				}
			}
		}
		k = &bucket{tokens: b.burst, at: now}
		b.peers[p] = k
	}
	k.tokens = min(b.burst, k.tokens+now.Sub(k.at).Minutes()*b.perMinute)
	k.at = now
	if k.tokens < 1 {
		return false
	}
	k.tokens--
	return true
}
