// Package models keeps the model catalogues of the coordinators a node trusts: GPU models,
// the names NVML gives them, their memory and datasheet figures (protocol.ModelCatalogue).
// Every node takes them from gossip and keeps them in its ledger; a provider names its GPUs
// and scores its benchmarks with its coordinator's, validators check attestations with the
// one each names; a coordinator edits, signs and republishes its own. See
// docs/protocols/models.md.
package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// RepublishInterval is how often a coordinator gossips its latest catalogue again, for the
// nodes that joined since.
const RepublishInterval = 10 * time.Minute

// Deps are what a Book needs.
type Deps struct {
	Peer    *p2p.Peer
	Ledger  *ledger.Ledger
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Trusted are the coordinators whose catalogues count (a coordinator among them).
	Trusted []peer.ID
}

// Book holds the catalogues of the trusted coordinators, the newest
// ledger.KeptModelCatalogues of each.
type Book struct {
	peer    *p2p.Peer
	ledger  *ledger.Ledger
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	trust   protocol.Trust

	mu       sync.RWMutex
	held     map[peer.ID][]*protocol.SignedModelCatalogue // oldest first
	onChange []func(coordinator peer.ID, old, cur *protocol.ModelCatalogue)
	topic    *p2p.Topic
	edit     sync.Mutex // a coordinator's edits, one at a time
}

// ErrHeld: the catalogue is the one already held (a republish): nothing to do, not counted.
var ErrHeld = fmt.Errorf("%w: model catalogue already held", protocol.ErrReplay)

// New returns the book with the catalogues the ledger holds; a book that edits or
// republishes also needs its peer (Deps.Peer or UsePeer).
func New(d Deps) *Book {
	b := &Book{peer: d.Peer, ledger: d.Ledger, clock: d.Clock, log: d.Log, metrics: d.Metrics,
		trust: protocol.NewTrust(d.Trusted...), held: map[peer.ID][]*protocol.SignedModelCatalogue{}}
	raws, err := d.Ledger.ModelCatalogues()
	if err != nil {
		b.log.Warn("stored model catalogues not read", "err", err)
	}
	for _, raw := range raws {
		// One from a coordinator no longer trusted stays stored but has no effect.
		if c, err := protocol.CheckModelCatalogue(raw, b.clock.Now().Add(protocol.MaxClockSkew), b.trust); err == nil {
			b.held[c.Signer] = append(b.held[c.Signer], c)
		}
	}
	for _, cs := range b.held {
		sort.Slice(cs, func(i, k int) bool { return cs[i].Seq < cs[k].Seq })
	}
	return b
}

// UsePeer sets the node's peer, whose key signs this coordinator's catalogues.
func (b *Book) UsePeer(p *p2p.Peer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.peer = p
}

// OnChange calls f, outside the book's lock, each time a newer catalogue of a coordinator
// is taken: old is the one it replaces (FirstModels when none).
func (b *Book) OnChange(f func(coordinator peer.ID, old, cur *protocol.ModelCatalogue)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onChange = append(b.onChange, f)
}

// Take checks a catalogue and keeps it when it is newer than the signer's latest. An older
// one is refused (protocol.ErrReplay), the same one again is ErrHeld.
func (b *Book) Take(raw []byte, source string) error {
	c, err := protocol.CheckModelCatalogue(raw, b.clock.Now(), b.trust)
	if err != nil {
		b.metrics.RecordsRejected.WithLabelValues(string(protocol.KindModelCatalogue), source, protocol.Reason(err)).Inc()
		return err
	}
	b.mu.Lock()
	cs := b.held[c.Signer]
	old := protocol.FirstModels()
	if n := len(cs); n > 0 {
		last := cs[n-1]
		if last.Seq == c.Seq && string(last.Raw) == string(raw) {
			b.mu.Unlock()
			return ErrHeld
		}
		if last.Seq >= c.Seq {
			b.mu.Unlock()
			err := fmt.Errorf("%w: model catalogue %d of %s, have %d", protocol.ErrReplay, c.Seq, c.Signer, last.Seq)
			b.metrics.RecordsRejected.WithLabelValues(string(protocol.KindModelCatalogue), source, protocol.Reason(err)).Inc()
			return err
		}
		old = &last.ModelCatalogue
	}
	if err := b.ledger.SaveModelCatalogue(c.Signer.String(), c.Seq, raw); err != nil {
		b.mu.Unlock()
		return err
	}
	cs = append(cs, c)
	if len(cs) > ledger.KeptModelCatalogues {
		cs = cs[len(cs)-ledger.KeptModelCatalogues:]
	}
	b.held[c.Signer] = cs
	hooks := append([]func(peer.ID, *protocol.ModelCatalogue, *protocol.ModelCatalogue){}, b.onChange...)
	b.mu.Unlock()
	b.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindModelCatalogue), source).Inc()
	b.log.Info("model catalogue taken", "coordinator", c.Signer, "seq", c.Seq, "models", len(c.Models), "source", source)
	for _, f := range hooks {
		f(c.Signer, old, &c.ModelCatalogue)
	}
	return nil
}

// Validate is the models topic validator. The catalogue already held is accepted, and so
// relayed: a coordinator republishes it for nodes that joined since, which may be reached
// only through nodes that have it.
func (b *Book) Validate(ctx context.Context, from peer.ID, data []byte) p2p.Verdict {
	err := b.Take(data, "gossip")
	if errors.Is(err, ErrHeld) {
		return p2p.Accept
	}
	return p2p.VerdictOf(err)
}

// Lookup returns a coordinator's catalogue of a sequence (protocol.ModelsLookup): seq 0
// is the first, compiled-in catalogue; nil when the book does not hold it.
func (b *Book) Lookup(coordinator peer.ID, seq uint64) *protocol.ModelCatalogue {
	if seq == 0 {
		return protocol.FirstModels()
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, c := range b.held[coordinator] {
		if c.Seq == seq {
			return &c.ModelCatalogue
		}
	}
	return nil
}

// Latest returns a coordinator's newest catalogue, nil when none was received.
func (b *Book) Latest(coordinator peer.ID) *protocol.SignedModelCatalogue {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if cs := b.held[coordinator]; len(cs) > 0 {
		return cs[len(cs)-1]
	}
	return nil
}

// Current returns a coordinator's newest catalogue, the first one when none was received.
func (b *Book) Current(coordinator peer.ID) *protocol.ModelCatalogue {
	if c := b.Latest(coordinator); c != nil {
		return &c.ModelCatalogue
	}
	return protocol.FirstModels()
}

// Publish sets the topic a coordinator gossips its catalogue on.
func (b *Book) Publish(t *p2p.Topic) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.topic = t
}

// Edit changes this coordinator's catalogue: f gets a copy of the current entries (the
// first catalogue's before any edit) and returns the new ones, which are checked, sorted,
// signed under the next sequence, kept and gossiped.
func (b *Book) Edit(ctx context.Context, f func(models []protocol.ModelEntry) ([]protocol.ModelEntry, error)) (*protocol.SignedModelCatalogue, error) {
	b.edit.Lock()
	defer b.edit.Unlock()
	self := b.peer.ID
	cur := b.Current(self)
	entries := make([]protocol.ModelEntry, len(cur.Models))
	for i, e := range cur.Models {
		e.Aliases = append([]string(nil), e.Aliases...)
		entries[i] = e
	}
	entries, err := f(entries)
	if err != nil {
		return nil, err
	}
	protocol.SortModels(entries)
	if err := protocol.CheckModelEntries(entries); err != nil {
		return nil, fmt.Errorf("%w: %v", protocol.ErrInvalid, err)
	}
	c := protocol.ModelCatalogue{Version: protocol.ModelsVersion, Coordinator: self.String(), Seq: cur.Seq + 1,
		IssuedAt: b.clock.Now().UTC(), Models: entries}
	raw, err := protocol.Seal(protocol.KindModelCatalogue, c, b.peer.Key)
	if err != nil {
		return nil, err
	}
	if err := b.Take(raw, "self"); err != nil {
		return nil, err
	}
	b.gossip(ctx, raw)
	return b.Latest(self), nil
}

func (b *Book) gossip(ctx context.Context, raw []byte) {
	b.mu.RLock()
	t := b.topic
	b.mu.RUnlock()
	if t == nil {
		return
	}
	// The topic validator runs on our own message too, and accepts the catalogue held.
	if err := t.Publish(ctx, raw); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		b.log.Debug("model catalogue not gossiped", "err", err)
	}
}

// RepublishLoop gossips this coordinator's latest catalogue every RepublishInterval, for
// the nodes that joined since (others ignore it at no cost).
func (b *Book) RepublishLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.clock.After(RepublishInterval):
		}
		if c := b.Latest(b.peer.ID); c != nil {
			b.gossip(ctx, c.Raw)
		}
	}
}
