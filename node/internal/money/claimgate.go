package money

import (
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/internal/p2p"
)

// The coordinator's Solana RPC quota against floods of deposit claims: the wallet stream
// limits each peer and network, but peers from many networks together could still spend a
// metered or public RPC endpoint, and then real deposits go uncredited and payouts fail.
// So claims that would reach the RPC share one budget for the whole coordinator, and a
// signature the RPC just said it does not know is answered from memory for a while.

const (
	// claimRPCPerMinute is the most deposit claims a minute, from all peers together, that
	// may ask the RPC (each costs up to three calls); claimRPCBurst the most at once.
	claimRPCPerMinute = 60
	claimRPCBurst     = 60
	// unknownSignatureTTL is how long a signature the RPC did not know is answered "not
	// finalized yet" without asking again: short, since a deposit just sent may reach the
	// coordinator's RPC node a little after the renter's.
	unknownSignatureTTL = 10 * time.Second
	// maxUnknownSignatures bounds the negative cache's memory.
	maxUnknownSignatures = 10_000
)

// claimGate decides which deposit claims may ask the RPC.
type claimGate struct {
	budget *p2p.Budget[struct{}]

	mu      sync.Mutex
	unknown map[string]time.Time // signature -> until when it is answered from memory
}

func newClaimGate() *claimGate {
	return &claimGate{budget: p2p.NewBudget[struct{}](claimRPCPerMinute, claimRPCBurst), unknown: map[string]time.Time{}}
}

// knownUnknown says whether the RPC said it did not know signature less than
// unknownSignatureTTL ago.
func (g *claimGate) knownUnknown(signature string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.unknown[signature]
	if ok && !now.Before(until) {
		delete(g.unknown, signature)
		return false
	}
	return ok
}

// noteUnknown remembers that the RPC did not know signature at now.
func (g *claimGate) noteUnknown(signature string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.unknown) >= maxUnknownSignatures {
		for s, until := range g.unknown {
			if !now.Before(until) {
				delete(g.unknown, s)
			}
		}
		if len(g.unknown) >= maxUnknownSignatures {
			clear(g.unknown) // a flood of fresh signatures: the global budget still holds
		}
	}
	g.unknown[signature] = now.Add(unknownSignatureTTL)
}

// take spends one RPC-reaching claim from the coordinator's budget at now.
func (g *claimGate) take(now time.Time) bool { return g.budget.Spend(struct{}{}, now) }
