package p2p

import (
	"context"
	"errors"
	"slices"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// Verdict is a topic validator's judgement of one message.
type Verdict int

const (
	// Accept takes the message in and forwards it.
	Accept Verdict = iota
	// Ignore drops it at no cost to the sender (a stale record an honest relay may forward).
	Ignore
	// Reject drops it and lowers the sender's gossip score.
	Reject
	// Repeat takes in and forwards a record the node holds already (a republish), within
	// the sender's budget of ignored messages; past it, it is rejected.
	Repeat
)

// Validator judges a message received on a topic; it is also where the message is taken in.
type Validator func(ctx context.Context, from peer.ID, data []byte) Verdict

// VerdictOf is the usual verdict on a record that failed with err: replays, expired and
// early records, revoked ones, those certified by a coordinator another node trusts and
// those scored with a model catalogue this node has not received yet are ignored (an honest relay can forward them); anything else is rejected, among it what only
// its author can make: malformed, forged, signed by the wrong key, dated far in the future
// (protocol.ErrFarFuture), self-certified (protocol.ErrSelfSigned).
func VerdictOf(err error) Verdict {
	switch {
	case err == nil:
		return Accept
	case errors.Is(err, protocol.ErrReplay), errors.Is(err, protocol.ErrExpired), errors.Is(err, protocol.ErrFuture),
		errors.Is(err, protocol.ErrRevoked), errors.Is(err, protocol.ErrUntrusted), errors.Is(err, protocol.ErrUnknownModels):
		return Ignore
	default:
		return Reject
	}
}

// Topic is a joined gossip topic whose subscription is drained in the background: its
// validator has already taken each message in.
type Topic struct {
	t   *pubsub.Topic
	sub *pubsub.Subscription
}

// IgnoredPerMinute is how many messages a peer may send on one topic each minute that
// are ignored at no cost (stale, early, revoked, or certified by a coordinator this node
// does not trust: an honest relay forwards such records now and then), with a burst of
// IgnoredBurst; past it, each further one is rejected and lowers the sender's score. A peer
// relaying the offers of a federation of about 5,000 providers this node does not trust
// (republished every 3 minutes) stays within it.
const (
	IgnoredPerMinute = 2000
	IgnoredBurst     = 4000
)

// Join registers v as the topic's validator, joins and subscribes to it. The topic is left at
// Close. Messages v ignores are free only within IgnoredPerMinute per peer. A topic joined
// already (JoinToPublish) is subscribed to.
func (p *Peer) Join(name string, v Validator) (*Topic, error) {
	ignored := NewPeerBudget(IgnoredPerMinute, IgnoredBurst)
	err := p.ps.RegisterTopicValidator(name, func(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		switch v(ctx, from, msg.Data) {
		case Accept:
			return pubsub.ValidationAccept
		case Ignore:
			if !ignored.Spend(from, time.Now()) {
				p.overBudget.Add(1)
				return pubsub.ValidationReject
			}
			return pubsub.ValidationIgnore
		case Repeat:
			if !ignored.Spend(from, time.Now()) {
				p.overBudget.Add(1)
				return pubsub.ValidationReject
			}
			return pubsub.ValidationAccept
		default:
			return pubsub.ValidationReject
		}
	})
	if err != nil {
		return nil, err
	}
	t, err := p.JoinToPublish(name)
	if err != nil {
		return nil, err
	}
	if t.sub, err = t.t.Subscribe(); err != nil {
		return nil, err
	}
	go func() {
		for {
			if _, err := t.sub.Next(context.Background()); err != nil {
				return // cancelled at Close
			}
		}
	}()
	return t, nil
}

// OverBudget is how many gossip messages were rejected past their sender's budget of
// repeated and ignored records (IgnoredPerMinute).
func (p *Peer) OverBudget() int64 { return p.overBudget.Load() }

// GossipStreamRetries is how many times gossipsub's stream to a connected peer was tried
// again after failing to open (gossipHost.NewStream).
func (p *Peer) GossipStreamRetries() int64 { return p.gossip.retries.Load() }

// GossipPeersTakenIn is how many peers gossipsub took in by the gossip stream they opened,
// identify having ended on the connection without gossipsub taking them in
// (gossipHost.takeIn).
func (p *Peer) GossipPeersTakenIn() int64 { return p.gossip.takenIn.Load() }

// GossipRepairs is how many times this node reconnected to a bootstrap peer that was
// connected but out of its gossip (KeepJoined).
func (p *Peer) GossipRepairs() int64 { return p.gossipRepairs.Load() }

// JoinToPublish joins a topic without subscribing to it: the node publishes on it
// (gossipsub's fanout: to the connected peers that subscribe) and receives nothing. A
// provider announces its offer so, and holds no one else's. Joining a topic twice returns
// the topic joined.
func (p *Peer) JoinToPublish(name string) (*Topic, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.topics {
		if t.t.String() == name {
			return t, nil
		}
	}
	pt, err := p.ps.Join(name)
	if err != nil {
		return nil, err
	}
	if err := pt.SetScoreParams(topicScoreParams()); err != nil {
		pt.Close()
		return nil, err
	}
	t := &Topic{t: pt}
	p.topics = append(p.topics, t)
	return t, nil
}

// GossipsWith says, for each topic this node joined, whether id is one of its gossip peers
// there (it told this node it subscribes).
func (p *Peer) GossipsWith(id peer.ID) map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for _, t := range p.topics {
		out[t.Name()] = slices.Contains(t.t.ListPeers(), id)
	}
	return out
}

// GossipPeerCounts says, for each topic this node joined, how many gossip peers it has
// there.
func (p *Peer) GossipPeerCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, t := range p.topics {
		out[t.Name()] = len(t.t.ListPeers())
	}
	return out
}

// Name is the topic's name.
func (t *Topic) Name() string { return t.t.String() }

// HasPeerAmong says whether one of peers is a gossip peer on the topic (it told this node
// it subscribes).
func (t *Topic) HasPeerAmong(peers []peer.AddrInfo) bool {
	for _, id := range t.t.ListPeers() {
		if slices.ContainsFunc(peers, func(ai peer.AddrInfo) bool { return ai.ID == id }) {
			return true
		}
	}
	return false
}

// Publish sends data to the topic's peers.
func (t *Topic) Publish(ctx context.Context, data []byte) error { return t.t.Publish(ctx, data) }

// Peers returns how many gossip peers the node has on the topic.
func (t *Topic) Peers() int { return len(t.t.ListPeers()) }

// WhenPeerJoins calls f for each peer that joins the topic, saying whether it is the only
// peer (the topic went from no peer to one), until ctx ends.
func (t *Topic) WhenPeerJoins(ctx context.Context, f func(id peer.ID, first bool)) error {
	events, err := t.t.EventHandler()
	if err != nil {
		return err
	}
	defer events.Cancel()
	// Counted from the events, not from ListPeers: two peers joining at once would show two
	// peers at the first event, and no event would be the first.
	peers := 0
	for {
		ev, err := events.NextPeerEvent(ctx)
		if err != nil {
			return nil
		}
		switch ev.Type {
		case pubsub.PeerJoin:
			peers++
			f(ev.Peer, peers == 1)
		case pubsub.PeerLeave:
			peers = max(peers-1, 0)
		}
	}
}

func (t *Topic) close() {
	if t.sub != nil {
		t.sub.Cancel()
	}
	t.t.Close()
}
