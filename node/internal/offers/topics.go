package offers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// Offers travel on one gossip topic per GPU model (protocol.ModelTopic). A renter follows
// the topics of the models it rents, a coordinator every model and the topic of the
// previous release (protocol.OffersTopic). A provider follows none: it publishes on its
// models' topics and the old one without subscribing (the Publisher), and its book holds
// its own offer only, so that what a provider receives and keeps does not grow with the
// network (docs/performance.md).

// errWrongTopic marks an offer sent on the topic of a model it does not offer.
var errWrongTopic = errors.New("offer on the topic of a model it does not offer")

// Follow subscribes to the offer topics of models, once each. A node that follows any
// topic holds the market's offers: its book follows gossip, so searches answer from it.
func (c *Catalogue) Follow(models []string) error {
	c.topicsMu.Lock()
	defer c.topicsMu.Unlock()
	for _, m := range models {
		name := protocol.ModelTopic(m)
		if slices.Contains(c.followed, name) {
			continue
		}
		if _, err := c.peer.Join(name, c.modelValidator(protocol.NormalizeModel(m))); err != nil {
			return fmt.Errorf("follow the offers of %s: %w", m, err)
		}
		c.followed = append(c.followed, name)
		// The new topic's offers came by no gossip yet, nor by the last sync of everything
		// followed.
		c.book.heard(time.Time{}, false)
		c.book.markSynced(time.Time{})
	}
	return nil
}

// FollowPrevious subscribes to the offers topic of the previous release, on which its
// providers publish (and this release's providers too, for its renters).
func (c *Catalogue) FollowPrevious() error {
	c.topicsMu.Lock()
	defer c.topicsMu.Unlock()
	if slices.Contains(c.followed, protocol.OffersTopic) {
		return nil
	}
	if _, err := c.peer.Join(protocol.OffersTopic, c.ValidateOffer); err != nil {
		return err
	}
	c.followed = append(c.followed, protocol.OffersTopic)
	c.book.heard(time.Time{}, false)
	c.book.markSynced(time.Time{})
	return nil
}

// gossipCheckEvery is how often a node that follows offer gossip checks that each topic it
// follows has a coordinator among its gossip peers (WatchGossip).
const gossipCheckEvery = 5 * time.Second

// WatchGossip notes, every gossipCheckEvery until ctx ends, since when every offer topic
// this node follows has had a coordinator among its gossip peers at each check (warm).
func (c *Catalogue) WatchGossip(ctx context.Context) {
	for {
		c.checkGossip(c.clock.Now())
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(gossipCheckEvery):
		}
	}
}

// checkGossip is one of WatchGossip's checks, at now: every followed topic must have a
// coordinator (a bootstrap peer, which follows every model) among its gossip peers. Other
// peers do not count: a stranger subscribing to every topic would otherwise keep the book
// warm, so that it never synced again, while it passed on nothing.
func (c *Catalogue) checkGossip(now time.Time) {
	gossips := map[string]bool{}
	for _, ai := range c.boot {
		for name, ok := range c.peer.GossipsWith(ai.ID) {
			gossips[name] = gossips[name] || ok
		}
	}
	c.topicsMu.Lock()
	defer c.topicsMu.Unlock()
	heard := len(c.followed) > 0
	for _, name := range c.followed {
		if !gossips[name] {
			heard = false
		}
	}
	c.book.heard(now, heard)
}

// warm says whether this node's book holds the market's offers of model (""; every model)
// at now, so that a search need not sync or wait for the whole DHT walk: it follows the
// model's gossip, and a sync brought that model's offers (or everything it follows) within
// staleAfter, or its coordinator's gossip has flowed
// on every followed topic without a gap for staleAfter (every live offer is republished
// within it). A renter that only follows gossip would otherwise go cold staleAfter after
// its last sync (4.5 minutes), and most of a person's searches, minutes apart, would sync
// and walk the DHT to its end (docs/performance.md, "1,000 providers by a smaller model").
func (c *Catalogue) warm(model string, now time.Time) bool {
	if !c.follows(model) {
		return false
	}
	stale := c.staleAfter()
	synced, since := c.book.warmth(model)
	return (!synced.IsZero() && now.Sub(synced) <= stale) || (!since.IsZero() && now.Sub(since) >= stale)
}

// Following says whether this node follows offer gossip (a renter or a coordinator), and
// so holds the market's offers.
func (c *Catalogue) Following() bool {
	c.topicsMu.Lock()
	defer c.topicsMu.Unlock()
	return len(c.followed) > 0
}

// Followed returns the offer topics this node subscribes to.
func (c *Catalogue) Followed() []string {
	c.topicsMu.Lock()
	defer c.topicsMu.Unlock()
	return slices.Clone(c.followed)
}

// modelValidator is the validator of a model's offer topic: ValidateOffer, and an offer
// that neither offers nor is certified for the model is rejected before it reaches the
// book (it would reach the renters of another model: a provider flooding every topic with
// its offer is scored down).
func (c *Catalogue) modelValidator(model string) p2p.Validator {
	return func(ctx context.Context, from peer.ID, data []byte) p2p.Verdict {
		so, err := c.book.check(data, "gossip")
		if err != nil {
			return verdict(false, err)
		}
		if !belongsTo(so, model) {
			err := fmt.Errorf("%w: %s on the topic of %s", errWrongTopic, so.Signer, model)
			c.book.rejectAs("gossip", "wrong_topic", err)
			return p2p.Reject
		}
		_, fresh := c.book.store(so, "gossip")
		return verdict(fresh, nil)
	}
}

// belongsTo says whether an offer travels on a model's topic: it offers the model, or its
// certificate certifies it. The latter carries an offer that stopped offering a model (its
// GPUs delisted by a benchmark, or outside its availability: a withdrawal names no GPUs)
// to that model's renters, who would otherwise keep the old one until it expires.
func belongsTo(so *protocol.SignedOffer, model string) bool {
	if slices.ContainsFunc(so.Offer.GPUs, func(g protocol.OfferGPUs) bool { return g.Model == model }) {
		return true
	}
	if so.Cert == nil {
		return len(so.Offer.GPUs) == 0 // a withdrawal without a certificate: nothing tells
	}
	return slices.ContainsFunc(so.Cert.GPUs, func(g protocol.CertifiedGPU) bool { return protocol.NormalizeModel(g.Model) == model })
}

// carries says whether an offer travels on a topic: the previous release's, or the topic of
// a model it belongs to (belongsTo); a provider publishes it there, and a coordinator that
// caught it up (CatchUp) gossips it there.
func carries(so *protocol.SignedOffer, topic string) bool {
	model, ok := strings.CutPrefix(topic, protocol.ModelTopicPrefix)
	return !ok || belongsTo(so, model)
}

// topicsOf returns the topics a provider declaring models may publish on: each model's,
// and the previous release's. It publishes on those its offer belongs to (belongsTo).
func topicsOf(models []string) []string {
	names := []string{protocol.OffersTopic}
	for _, m := range models {
		if name := protocol.ModelTopic(m); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}
