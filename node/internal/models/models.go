// Package models keeps the model catalogues of the coordinators a node trusts: GPU models,
// the names NVML gives them, their memory and datasheet figures (protocol.ModelCatalogue).
// Every node takes them from gossip and keeps them in its ledger; a provider names its GPUs
// and scores its benchmarks with its coordinator's, validators check attestations with the
// one each names; a coordinator edits, signs and republishes its own. See
// docs/protocols/models.md.
package models

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// RepublishInterval is how often a coordinator gossips its latest catalogue again, for the
// nodes that joined since.
const RepublishInterval = 10 * time.Minute

// Deps are what a Book needs.
type Deps struct {
	subsystem.Base                     // the peer, clock, logger and metrics of the node
	Models         *ledger.ModelStore  // the catalogues kept
	Serials        *ledger.SerialStore // a coordinator's catalogue sequences
	// Trusted are the coordinators whose catalogues count (a coordinator among them).
	Trusted []peer.ID
}

// Book holds the catalogues of the trusted coordinators, the newest
// ledger.KeptModelCatalogues of each.
type Book struct {
	peer    *p2p.Peer
	models  *ledger.ModelStore
	serials *ledger.SerialStore
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	trust   protocol.Trust

	mu       sync.RWMutex
	held     map[peer.ID][]*protocol.SignedModelCatalogue // oldest first
	onChange []func(coordinator peer.ID, old, cur *protocol.ModelCatalogue)
	topic    *p2p.Topic
	lastSync map[peer.ID]time.Time // when each coordinator was last asked (syncSoon)
	syncs    *p2p.Sources          // sync requests served, per peer and per network
	edit     sync.Mutex            // a coordinator's edits, one at a time
}

// ErrHeld: the catalogue is the one already held (a republish): nothing to do, not counted.
var ErrHeld = fmt.Errorf("%w: model catalogue already held", protocol.ErrReplay)

// New returns the book with the catalogues the ledger holds; a book that edits or
// republishes also needs its peer (Deps.Peer or UsePeer).
func New(d Deps) *Book {
	b := &Book{peer: d.Peer, models: d.Models, serials: d.Serials, clock: d.Clock, log: d.Log, metrics: d.Metrics,
		trust: protocol.NewTrust(d.Trusted...), held: map[peer.ID][]*protocol.SignedModelCatalogue{}, lastSync: map[peer.ID]time.Time{},
		syncs: p2p.NewSources(syncsPerMinute, syncsPerMinute, 4, d.Trusted...)}
	raws, err := d.Models.ModelCatalogues()
	if err != nil {
		b.log.Warn("stored model catalogues not read", "err", err)
	}
	for _, raw := range raws {
		// One from a coordinator no longer trusted stays stored but has no effect.
		if c, err := protocol.CheckModelCatalogue(raw, b.clock.Now().Add(protocol.MaxClockSkew), b.trust); err == nil {
			b.held[c.Signer] = append(b.held[c.Signer], c)
		}
	}
	for c, cs := range b.held {
		sort.Slice(cs, func(i, k int) bool { return cs[i].Seq < cs[k].Seq })
		b.held[c] = needed(cs, b.clock.Now())
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

// Take checks a catalogue and keeps it. A newer one than the signer's latest becomes its
// current catalogue (the OnChange hooks run). An older one never does: it is kept only
// while attestations may still name it (its successor was issued within
// protocol.MaxAttestationAge), to check them, and refused (protocol.ErrReplay, counted)
// otherwise. One held already is ErrHeld, found by its bytes before any check.
func (b *Book) Take(raw []byte, source string) error {
	b.mu.RLock()
	for _, h := range b.all() {
		if len(h.Raw) == len(raw) && string(h.Raw) == string(raw) {
			b.mu.RUnlock()
			return ErrHeld
		}
	}
	b.mu.RUnlock()
	now := b.clock.Now()
	refuse := func(err error) error {
		b.metrics.RecordsRejected.WithLabelValues(string(protocol.KindModelCatalogue), source, protocol.Reason(err)).Inc()
		return err
	}
	c, err := protocol.CheckModelCatalogue(raw, now, b.trust)
	if err != nil {
		return refuse(err)
	}
	b.mu.Lock()
	cs := b.held[c.Signer]
	old, newest := protocol.FirstModels(), true
	at := len(cs) // where c goes, in seq order
	for i, h := range cs {
		if h.Seq == c.Seq && string(h.Raw) == string(raw) {
			b.mu.Unlock()
			return ErrHeld // taken meanwhile (gossip and sync at once)
		}
		if h.Seq == c.Seq {
			b.mu.Unlock()
			return refuse(fmt.Errorf("%w: model catalogue %d of %s held with other contents", protocol.ErrReplay, c.Seq, c.Signer))
		}
		if h.Seq > c.Seq && at == len(cs) {
			at = i
		}
	}
	if at < len(cs) {
		newest = false
		if now.Sub(cs[at].IssuedAt) >= protocol.MaxAttestationAge {
			b.mu.Unlock()
			return refuse(fmt.Errorf("%w: model catalogue %d of %s, replaced by %d on %s", protocol.ErrReplay, c.Seq, c.Signer, cs[at].Seq,
				cs[at].IssuedAt.UTC().Format(time.RFC3339)))
		}
	} else if len(cs) > 0 {
		old = &cs[len(cs)-1].ModelCatalogue
	}
	if err := b.models.SaveModelCatalogue(c.Signer.String(), c.Seq, raw); err != nil {
		b.mu.Unlock()
		return err
	}
	cs = append(cs[:at:at], append([]*protocol.SignedModelCatalogue{c}, cs[at:]...)...)
	b.held[c.Signer] = needed(cs, now)
	var hooks []func(peer.ID, *protocol.ModelCatalogue, *protocol.ModelCatalogue)
	if newest {
		hooks = append(hooks, b.onChange...)
	}
	b.mu.Unlock()
	b.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindModelCatalogue), source).Inc()
	b.log.Info("model catalogue taken", "coordinator", c.Signer, "seq", c.Seq, "models", len(c.Models), "current", newest, "source", source)
	for _, f := range hooks {
		f(c.Signer, old, &c.ModelCatalogue)
	}
	return nil
}

// needed keeps of a coordinator's catalogues (in seq order) the newest, and each older one
// whose successor was issued within protocol.MaxAttestationAge (an attestation may still
// name it), at most ledger.KeptModelCatalogues.
func needed(cs []*protocol.SignedModelCatalogue, now time.Time) []*protocol.SignedModelCatalogue {
	var out []*protocol.SignedModelCatalogue
	for i, c := range cs {
		if i == len(cs)-1 || now.Sub(cs[i+1].IssuedAt) < protocol.MaxAttestationAge {
			out = append(out, c)
		}
	}
	if len(out) > ledger.KeptModelCatalogues {
		out = out[len(out)-ledger.KeptModelCatalogues:]
	}
	return out
}

// all lists every catalogue held (under b.mu).
func (b *Book) all() []*protocol.SignedModelCatalogue {
	var out []*protocol.SignedModelCatalogue
	for _, cs := range b.held {
		out = append(out, cs...)
	}
	return out
}

// Validate is the models topic validator: the catalogue held already (a coordinator's
// republish) is a repeat, free within the sender's budget (p2p.Repeat); a stale or
// foreign-coordinator one is ignored, anything else rejected.
func (b *Book) Validate(ctx context.Context, from peer.ID, data []byte) p2p.Verdict {
	err := b.Take(data, "gossip")
	if errors.Is(err, ErrHeld) {
		return p2p.Repeat
	}
	return p2p.VerdictOf(err)
}

// Lookup returns a coordinator's catalogue of a sequence (protocol.ModelsLookup): seq 0
// is the first, compiled-in catalogue; nil when the book does not hold it, and then the
// book asks that coordinator for its catalogues in the background (at most every
// SyncEvery), so that the record naming it passes when it comes again.
func (b *Book) Lookup(coordinator peer.ID, seq uint64) *protocol.ModelCatalogue {
	if seq == 0 {
		return protocol.FirstModels()
	}
	b.mu.RLock()
	for _, c := range b.held[coordinator] {
		if c.Seq == seq {
			b.mu.RUnlock()
			return &c.ModelCatalogue
		}
	}
	b.mu.RUnlock()
	b.syncSoon(coordinator)
	return nil
}

// SyncEvery is the least time between two catalogue syncs with one coordinator that a
// missing catalogue starts.
const SyncEvery = 30 * time.Second

// maxSyncCatalogues bounds the catalogues of one sync answer; syncsPerMinute the sync
// requests a node serves one peer a minute (an answer can reach 1.5 MiB).
const (
	maxSyncCatalogues = 24
	syncsPerMinute    = 6
)

// syncSoon asks a trusted coordinator for its catalogues in the background, unless it was
// asked within SyncEvery.
func (b *Book) syncSoon(coordinator peer.ID) {
	if !b.trust[coordinator] {
		return
	}
	now := b.clock.Now()
	b.mu.Lock()
	if b.peer == nil || now.Sub(b.lastSync[coordinator]) < SyncEvery {
		b.mu.Unlock()
		return
	}
	b.lastSync[coordinator] = now
	b.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.Sync(ctx, coordinator); err != nil {
			b.log.Debug("model catalogue sync", "coordinator", coordinator, "err", err)
		}
	}()
}

// Sync asks a coordinator for the catalogues of its own that it holds (those an attestation
// may still name) and takes them in.
func (b *Book) Sync(ctx context.Context, coordinator peer.ID) error {
	var ans protocol.ModelsSyncAnswer
	if err := b.peer.Exchange(ctx, coordinator, protocol.ModelsSyncProtocol, 30*time.Second,
		protocol.ModelsSyncRequest{Coordinator: coordinator.String()}, protocol.MaxModelsSyncAnswer, &ans); err != nil {
		return err
	}
	if len(ans.Catalogues) > maxSyncCatalogues {
		return fmt.Errorf("%w: %d catalogues in one answer", protocol.ErrInvalid, len(ans.Catalogues))
	}
	var errs []error
	for _, raw := range ans.Catalogues {
		if err := b.Take(raw, "sync"); err != nil && !errors.Is(err, protocol.ErrReplay) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SyncTrusted syncs with every trusted coordinator that is not this node (a node that
// just joined the network: what it missed).
func (b *Book) SyncTrusted(ctx context.Context) {
	for c := range b.trust {
		if b.peer != nil && c != b.peer.ID {
			if err := b.Sync(ctx, c); err != nil {
				b.log.Debug("model catalogue sync", "coordinator", c, "err", err)
			}
		}
	}
}

// HandleSync answers a models sync request: the held catalogues of the coordinator asked
// about, oldest first, the newest maxSyncCatalogues of them.
func (b *Book) HandleSync(s network.Stream) {
	defer s.Close()
	// A peer gets syncsPerMinute a minute, and its network (IPv4 address, IPv6 /64) four
	// times that: fresh identities from one host share one budget.
	if !b.syncs.Take(s.Conn(), time.Now(), 1) {
		b.metrics.RecordsRejected.WithLabelValues("models-sync", "stream", "rate_limited").Inc()
		b.peer.Misbehaved(s.Conn().RemotePeer())
		s.Reset()
		return
	}
	s.SetDeadline(time.Now().Add(30 * time.Second))
	var req protocol.ModelsSyncRequest
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxModelsSyncRequest, &req); err != nil {
		s.Reset()
		return
	}
	c, err := peer.Decode(req.Coordinator)
	var ans protocol.ModelsSyncAnswer
	if err == nil {
		b.mu.RLock()
		cs := b.held[c]
		if len(cs) > maxSyncCatalogues {
			cs = cs[len(cs)-maxSyncCatalogues:]
		}
		for _, h := range cs {
			ans.Catalogues = append(ans.Catalogues, h.Raw)
		}
		b.mu.RUnlock()
	}
	protocol.WriteJSONFrame(s, ans)
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

// Names are the model names of the coordinators' current catalogues, each once (the first
// catalogue's when no coordinator is given): what a renter follows offers of, and what a
// search without a model walks.
func (b *Book) Names(coordinators []peer.ID) []string {
	catalogues := []*protocol.ModelCatalogue{}
	for _, c := range coordinators {
		catalogues = append(catalogues, b.Current(c))
	}
	if len(catalogues) == 0 {
		catalogues = append(catalogues, protocol.FirstModels())
	}
	var names []string
	for _, c := range catalogues {
		for _, m := range c.Models {
			if !slices.Contains(names, m.Model) {
				names = append(names, m.Model)
			}
		}
	}
	return names
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
	// The sequence is the ledger's serial, at least the time in milliseconds: a coordinator
	// whose ledger was lost or restored does not reuse one the network holds.
	now := b.clock.Now()
	seq, err := b.serials.NextSerial("models", now)
	if err != nil {
		return nil, err
	}
	c := protocol.ModelCatalogue{Version: protocol.ModelsVersion, Coordinator: self.String(), Seq: max(seq, cur.Seq+1),
		IssuedAt: now.UTC(), Models: entries}
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
