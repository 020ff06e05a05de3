package offers

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// CatchUp makes sure a coordinator holds the current offer of a provider that just answered
// its uptime probe: when its book holds none, an expired one, or one signed more than 1.5 x
// offers.republish ago (the provider republishes every offers.republish, so one was
// missed), it asks the provider over the offer stream (2 s), and gossips what it got, if
// new, on the topics of the offer's models and of the previous release that it follows,
// for the renters that follow them. A provider's offer reaches the market through the peers
// that follow its models, and gossipsub can lose a peer for good while connected (the
// scale harness over QUIC at 300 providers: a tenth of the providers connected to their
// coordinator without gossip either way, repairs or not; docs/performance.md): the
// coordinator's book, which renters sync from at join and at searches, would lack their
// offers for as long. It reports whether an offer was fetched (new or not).
func (c *Catalogue) CatchUp(ctx context.Context, p peer.ID) bool {
	// Judged by when the provider signed the record held, not when it last arrived: any
	// peer may send an old record again, and a republish is a new record.
	if so, _ := c.book.Get(p); so != nil && c.clock.Now().Sub(so.Offer.IssuedAt) < c.staleAfter() && so.Offer.ExpiresAt.After(c.clock.Now()) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := c.fetchOfferDirect(ctx, peer.AddrInfo{ID: p})
	if err != nil {
		c.log.Debug("catching up a provider's offer failed", "provider", p, "err", err)
		return false
	}
	so, fresh, err := c.book.acceptFrom(raw, "stream", p)
	if err != nil {
		c.log.Debug("a provider's offer, caught up, refused", "provider", p, "err", err)
		return false
	}
	if !fresh {
		return true // (it had reached the book meanwhile, and the peers with it)
	}
	c.metrics.OffersCaughtUp.Inc()
	for _, name := range c.Followed() {
		if !carries(so, name) {
			continue
		}
		t, err := c.peer.JoinToPublish(name)
		if err == nil {
			err = t.Publish(ctx, raw)
		}
		if err != nil {
			c.log.Debug("gossiping a caught-up offer failed", "provider", p, "topic", name, "err", err)
		}
	}
	return true
}
