package p2p

import (
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// Gossipsub peer scoring, on every topic (offers, revocations, scores, market): a peer that
// sends records a topic's validator rejects (forged, tampered, malformed, oversized, far in
// the future, self-certified, or past its budget of ignored messages) loses score
// quadratically; below the thresholds its gossip is ignored, then its publications, then
// everything it sends (graylist). Replays and expired records are ignored, not rejected,
// within a budget (IgnoredPerMinute), so honest relays keep their score.

const (
	invalidMessageWeight = -100 // per squared invalid message: 1 -> -100, 4 -> -1600
	gossipThreshold      = -100
	publishThreshold     = -500
	graylistThreshold    = -1000
)

func gossipScoreOptions(record func(map[peer.ID]float64)) []pubsub.Option {
	params := &pubsub.PeerScoreParams{
		SkipAtomicValidation: true,
		AppSpecificScore:     func(peer.ID) float64 { return 0 },
		DecayInterval:        time.Second,
		DecayToZero:          0.01,
		RetainScore:          time.Hour,
		Topics:               map[string]*pubsub.TopicScoreParams{},
	}
	// Every topic scores its senders alike: a rejected message costs its sender on all.
	// Topics joined later (one per GPU model) get the same parameters at Join.
	for _, name := range []string{protocol.OffersTopic, protocol.RevocationsTopic, protocol.ScoresTopic, protocol.MarketTopic, protocol.ModelsTopic} {
		params.Topics[name] = topicScoreParams()
	}
	thresholds := &pubsub.PeerScoreThresholds{
		SkipAtomicValidation:        true,
		GossipThreshold:             gossipThreshold,
		PublishThreshold:            publishThreshold,
		GraylistThreshold:           graylistThreshold,
		AcceptPXThreshold:           10,
		OpportunisticGraftThreshold: 5,
	}
	return []pubsub.Option{
		pubsub.WithPeerScore(params, thresholds),
		pubsub.WithPeerScoreInspect(record, ScoreInspectEvery),
	}
}

// topicScoreParams are the scoring parameters of every topic.
func topicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		SkipAtomicValidation:           true,
		TopicWeight:                    1,
		TimeInMeshWeight:               0.01, // P1 is always computed: its quantum must be set
		TimeInMeshQuantum:              time.Second,
		TimeInMeshCap:                  10,
		InvalidMessageDeliveriesWeight: invalidMessageWeight,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(time.Hour),
	}
}

// ScoreInspectEvery is how often the peers' gossip scores are read for the metrics, the
// local API and the tests: computing every peer's score took a tenth of the scale harness's
// CPU when done every second (docs/performance.md). The scores themselves are gossipsub's,
// kept up to date by it whatever this period.
const ScoreInspectEvery = 5 * time.Second

// GossipScores keeps the latest peer scores for metrics and tests.
type GossipScores struct {
	mu     sync.Mutex
	scores map[peer.ID]float64
}

func (g *GossipScores) record(m map[peer.ID]float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.scores = m
}

// Get returns p's latest gossip score.
func (g *GossipScores) Get(p peer.ID) (float64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.scores[p]
	return v, ok
}

// Negative counts peers with a negative score.
func (g *GossipScores) Negative() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, v := range g.scores {
		if v < 0 {
			n++
		}
	}
	return float64(n)
}
