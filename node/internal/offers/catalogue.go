// Package offers is every node's view of the market's offers, and a provider's own offer:
// the offer book and the trust store (certificates, revocations), the gossip and DHT
// validators, catalogue and revocation sync, search, and the provider's publisher with its
// planned maintenance (docs/protocols/offers.md).
package offers

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// Scores gives the latest reliability score record of a provider (nil when none); search
// shows it on each row.
type Scores interface {
	Score(provider, by peer.ID) *protocol.SignedScore
	// Records are the valid score records held of providers (all when empty), as signed
	// (served to a joining peer); Take checks one and keeps it (a record of a sync).
	Records(providers []string) [][]byte
	Take(raw []byte, source string) error
}

// Deps are what the catalogue needs.
type Deps struct {
	subsystem.Base // the peer, clock, logger and metrics of the node
	Book           *Book
	Trust          *Trust
	Offers         config.OffersConfig
	// Bootstrap are asked first in a catalogue sync.
	Bootstrap []peer.AddrInfo
	// Scores may be nil: rows then carry no score.
	Scores Scores
	// Models are the GPU models a search without a model walks the DHT keys of (the
	// model catalogues of the trusted coordinators).
	Models func() []string
}

// Catalogue is the node's side of the offer network: it takes offers and revocations in
// (gossip validators, sync), serves its catalogue and revocations to peers, and searches.
type Catalogue struct {
	peer    *p2p.Peer
	id      peer.ID
	book    *Book
	trust   *Trust
	metrics *metrics.Metrics
	log     *slog.Logger
	clock   clock.Clock
	cfg     config.OffersConfig
	boot    []peer.AddrInfo
	scores  Scores
	// offerSyncs, revocationSyncs and scoreSyncs bound the syncs of each kind served: to
	// each peer and network, and at once; syncWaiting counts those waiting for a slot.
	offerSyncs, revocationSyncs, scoreSyncs *syncGate
	syncWaiting                             atomic.Int32
	// sideSynced is when a coordinator last brought revocations and scores in a sync (unix
	// nanoseconds by the node's clock): a search's sync within sideSyncFresh of it asks for
	// offers only.
	sideSynced atomic.Int64
	// streamIdle is how long a sync's stream may go without a record (syncStreamIdle).
	streamIdle time.Duration
	// joins are the first join syncs (SyncJoined), traced.
	joinsMu sync.Mutex
	joins   []*JoinSync
	// findProviders walks the DHT for the providers under a key (the peer's; a test's slow
	// walk).
	findProviders func(context.Context, cid.Cid) <-chan peer.AddrInfo
	// models are the models a search without one walks the keys of (Deps.Models).
	models func() []string
	// followed are the offer topics this node subscribes to (topics.go).
	topicsMu sync.Mutex
	followed []string
	// ownRevoked is called when this node's own certificate is revoked (a provider stops
	// publishing); set with OnOwnRevocation.
	ownRevoked func()
}

// New returns the catalogue of a node whose peer, book and trust store are up.
func New(d Deps) *Catalogue {
	return &Catalogue{
		peer: d.Peer, id: d.Peer.ID, book: d.Book, trust: d.Trust, metrics: d.Metrics, log: d.Log,
		clock: d.Clock, cfg: d.Offers, boot: d.Bootstrap, scores: d.Scores, models: d.Models,
		offerSyncs: newSyncGate("offers"), revocationSyncs: newSyncGate("revocations"), scoreSyncs: newSyncGate("scores"),
		findProviders: d.Peer.FindProviders, streamIdle: syncStreamIdle,
	}
}

// SyncsPerMinute is how many syncs of each kind (offers, revocations, scores) one peer may
// ask for a minute (a node syncs when it joins, when it finds itself cut off, and at a cold
// search); its network four times that. Each answer may hold the whole catalogue. The kinds
// have a budget each: one sync asks for all three at once, and a renter searching three
// models after a gap in its gossip syncs three times (one budget for all three kinds
// refused its third search, and counted the refusal towards a ban).
const SyncsPerMinute = 6

// syncGate bounds the syncs of one kind (offers, revocations, scores) a node serves: each
// peer and its network within SyncsPerMinute, and maxSyncServing answers written at once.
// The kinds have slots each, as budgets: a sync asks for the three at once, and with
// shared slots the small score and revocation answers of a burst of joins wait behind the
// offer answers.
type syncGate struct {
	kind   string // offers, revocations, scores: the metrics' label
	budget *p2p.Sources
	slots  chan struct{}
	// held counts, by network (p2p.NetworkOfConn), the syncs being answered or waiting for
	// a slot: a network has maxSyncHeld at most. A host that asks and does not read holds
	// each slot until its answer's 30 s deadline: within its budget (24 a minute), it
	// would hold every slot, and every other asker would be sent away busy.
	mu   sync.Mutex
	held map[string]int
}

// maxSyncHeld is the share of a kind's slots one network may hold, answered or waiting.
const maxSyncHeld = maxSyncServing / 2

func newSyncGate(kind string) *syncGate {
	return &syncGate{kind: kind, budget: p2p.NewSources(SyncsPerMinute, SyncsPerMinute, 4), slots: make(chan struct{}, maxSyncServing),
		held: map[string]int{}}
}

// hold takes one of net's share of the slots, if it has one left (this host's own
// processes, "loopback", are not counted: a devnet's nodes share it).
func (g *syncGate) hold(net string) bool {
	if net == "loopback" {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[net] >= maxSyncHeld {
		return false
	}
	g.held[net]++
	return true
}

// unhold gives back what hold took.
func (g *syncGate) unhold(net string) {
	if net == "loopback" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[net]--; g.held[net] <= 0 {
		delete(g.held, net)
	}
}

// admitSync says whether a sync of g's kind may be served to the stream's peer now: a slot
// is free (release it after: it counts the sync served, and times its answer), the peer
// and its network are within the kind's budget, and its network holds less than its share
// of the slots (maxSyncHeld, answered or waiting).
func (c *Catalogue) admitSync(s network.Stream, g *syncGate) (release func(), ok bool) {
	if !g.budget.Take(s.Conn(), time.Now(), 1) {
		c.metrics.RecordsRejected.WithLabelValues("sync", "stream", "rate_limited").Inc()
		c.metrics.SyncsServed.WithLabelValues(g.kind, "rate_limited").Inc()
		c.peer.Misbehaved(s.Conn().RemotePeer())
		return nil, false
	}
	net := p2p.NetworkOfConn(s.Conn())
	if !g.hold(net) {
		c.metrics.SyncsServed.WithLabelValues(g.kind, "busy").Inc()
		return nil, false // its network has its share of the slots: the asker tries its other peers
	}
	defer func() {
		if !ok {
			g.unhold(net)
		}
	}()
	arrived := time.Now()
	admitted := func() func() {
		start := time.Now()
		c.metrics.SyncSeconds.WithLabelValues(g.kind, "wait").Observe(start.Sub(arrived).Seconds())
		return func() {
			<-g.slots
			g.unhold(net)
			c.metrics.SyncsServed.WithLabelValues(g.kind, "served").Inc()
			c.metrics.SyncSeconds.WithLabelValues(g.kind, "write").Observe(time.Since(start).Seconds())
		}
	}
	select {
	case g.slots <- struct{}{}:
		return admitted(), true
	default:
	}
	// Busy: wait a little for a slot rather than send the asker away at once. A burst of
	// joins (a network's renters when their coordinator comes back) would otherwise back
	// off for seconds each, and spend the budget above on asking again.
	if c.syncWaiting.Add(1) > maxSyncWaiting {
		c.syncWaiting.Add(-1)
		c.metrics.SyncsServed.WithLabelValues(g.kind, "busy").Inc()
		return nil, false // the asker tries its other peers
	}
	defer c.syncWaiting.Add(-1)
	t := time.NewTimer(syncSlotWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return admitted(), true
	case <-t.C:
		c.metrics.SyncsServed.WithLabelValues(g.kind, "busy").Inc()
		return nil, false
	}
}

// syncSlotWait is how long a sync waits for a slot before it is sent away as busy, and
// maxSyncWaiting how many syncs may wait at once (the rest are sent away at once).
const (
	syncSlotWait   = 3 * time.Second
	maxSyncWaiting = 64
)

// OnOwnRevocation sets what to do when a revocation of this node's own certificate arrives.
func (c *Catalogue) OnOwnRevocation(f func()) { c.ownRevoked = f }

func (c *Catalogue) onOwnRevocation() {
	if c.ownRevoked != nil {
		c.ownRevoked()
	}
}

// score is an offer's score: its provider's, by the coordinator that certified it.
func (c *Catalogue) score(so *protocol.SignedOffer) *protocol.SignedScore {
	if c.scores == nil || so.Cert == nil {
		return nil
	}
	return c.scores.Score(so.Signer, so.Cert.Signer)
}

// ValidateOffer is the offers topic validator: replays and expired records are ignored,
// anything else that fails is rejected, which lowers the sender's gossip score
// (node/internal/p2p/gossipscore.go).
func (c *Catalogue) ValidateOffer(ctx context.Context, from peer.ID, data []byte) p2p.Verdict {
	_, fresh, err := c.book.Accept(data, "gossip")
	return verdict(fresh, err)
}

// verdict is the gossip verdict on an offer the book took (fresh: it changed the book) or
// refused with err.
func verdict(fresh bool, err error) p2p.Verdict {
	if err == nil && !fresh {
		// The record held already, again (a republish: it says the offer is still
		// current, and is forwarded): free within the sender's budget, so that a peer
		// replaying a record as fast as its link goes is soon penalised.
		return p2p.Repeat
	}
	// Stale, early (clock skew), revoked since it was sent, or certified by a coordinator
	// another node trusts: an honest relay can forward these, so they cost it nothing.
	return p2p.VerdictOf(err)
}

// Get returns the offer held from a provider and when it was received (nil when none).
func (c *Catalogue) Get(p peer.ID) (*protocol.SignedOffer, time.Time) { return c.book.Get(p) }
