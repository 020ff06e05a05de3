package offers

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/protocol"
)

// Book holds the latest verified offer of every provider this node has heard of,
// whatever the channel (gossip, DHT, offer stream, catalogue sync, its own publisher). It is where the stateful rule
// lives: an offer older than one already seen from the same provider is a replay.
type Book struct {
	seen    *ledger.OfferStore // the offers it flushes and loads
	trust   *Trust
	metrics *metrics.Metrics
	log     *slog.Logger
	clock   clock.Clock

	mu      sync.Mutex
	offers  map[peer.ID]*bookEntry
	dirty   map[peer.ID]bool
	changed chan struct{} // closed and replaced on every change
	// synced is when the last catalogue sync from peers brought a model's offers, by
	// normalised model; "" for one of everything the node follows.
	synced map[string]time.Time
	// heardSince is since when every offer topic the node follows has had a coordinator
	// among its gossip peers at each check (Catalogue.checkGossip); zero when one had none
	// at the last.
	heardSince time.Time
}

type bookEntry struct {
	offer      *protocol.SignedOffer
	receivedAt time.Time
	counted    bool // counted live in the gauge of live offers
}

func NewBook(l *ledger.OfferStore, trust *Trust, m *metrics.Metrics, log *slog.Logger, clk clock.Clock) *Book {
	return &Book{
		seen: l, trust: trust, metrics: m, log: log, clock: clk,
		offers:  map[peer.ID]*bookEntry{},
		dirty:   map[peer.ID]bool{},
		synced:  map[string]time.Time{},
		changed: make(chan struct{}),
	}
}

// Load restores the offers seen before a restart, so that replays stay rejected.
func (b *Book) Load() error {
	now := b.clock.Now()
	seen, err := b.seen.SeenOffers(now)
	if err != nil {
		return err
	}
	for _, s := range seen {
		so, err := protocol.CheckOffer(s.Raw, now)
		if err == nil {
			err = b.trust.certify(so, now)
		}
		if err != nil {
			continue // expired or revoked since, or from an older version: forget it
		}
		b.offers[so.Signer] = &bookEntry{offer: so, receivedAt: time.Time{}}
	}
	b.updateGauge(now)
	return nil
}

// check applies every rule without storing: the stateless ones of protocol.CheckOffer, the
// certificate (trusted coordinator, not revoked, covering the offer) and the replay rule. Rejections are counted and logged at debug level.
func (b *Book) check(raw []byte, source string) (*protocol.SignedOffer, error) {
	so, err := b.checkQuiet(raw)
	if err != nil {
		b.reject(source, err)
		return nil, err
	}
	return so, nil
}

// checkQuiet is check without counting.
func (b *Book) checkQuiet(raw []byte) (*protocol.SignedOffer, error) {
	now := b.clock.Now()
	so, err := protocol.CheckOffer(raw, now)
	if err != nil {
		return nil, err
	}
	if err := b.trust.certify(so, now); err != nil {
		return nil, err
	}
	if err := b.replayCheck(so); err != nil {
		return nil, err
	}
	return so, nil
}

// errOlderSeq marks replays whose sequence is below the one held (as opposed to a
// different record under the same sequence).
var errOlderSeq = errors.New("older sequence")

// replayCheck rejects an offer older than the one held from the same provider, or as old
// but different.
func (b *Book) replayCheck(so *protocol.SignedOffer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.offers[so.Signer]; cur != nil {
		if so.Offer.Seq < cur.offer.Offer.Seq {
			return fmt.Errorf("%w: %w: seq %d from %s, already have %d", protocol.ErrReplay, errOlderSeq, so.Offer.Seq, so.Signer, cur.offer.Offer.Seq)
		}
		if so.Offer.Seq == cur.offer.Offer.Seq && !bytes.Equal(so.Payload, cur.offer.Payload) {
			// Two different records under one sequence: the provider signed both, or
			// someone is replaying with a twist. Never a stale copy. The payload is
			// compared, not the envelope: a copy re-encoded around the same signed bytes
			// (an extra protobuf field) is the same record, and must not make the
			// provider's own copy look like a replay.
			return fmt.Errorf("%w: a different record with seq %d from %s", protocol.ErrReplay, so.Offer.Seq, so.Signer)
		}
	}
	return nil
}

func (b *Book) reject(source string, err error) {
	b.rejectAs(source, protocol.Reason(err), err)
}

func (b *Book) rejectAs(source, reason string, err error) {
	b.metrics.RecordsRejected.WithLabelValues(string(protocol.KindOffer), source, reason).Inc()
	b.log.Debug("offer rejected", "source", source, "reason", reason, "err", err)
}

// Accept checks an offer and stores it when it is newer than the one held. fresh reports
// whether it changed the book.
func (b *Book) Accept(raw []byte, source string) (so *protocol.SignedOffer, fresh bool, err error) {
	so, err = b.check(raw, source)
	if err != nil {
		return nil, false, err
	}
	so, fresh = b.store(so, source)
	return so, fresh, nil
}

// acceptFrom is accept for a record asked of one provider: a record signed by anyone else
// is rejected, so a peer cannot answer for another.
func (b *Book) acceptFrom(raw []byte, source string, want peer.ID) (*protocol.SignedOffer, bool, error) {
	so, err := b.check(raw, source)
	if err != nil {
		return nil, false, err
	}
	if so.Signer != want {
		err := fmt.Errorf("%w: asked %s for its offer, got one signed by %s", protocol.ErrWrongSigner, want, so.Signer)
		b.reject(source, err)
		return nil, false, err
	}
	so, fresh := b.store(so, source)
	return so, fresh, nil
}

// acceptBatch accepts many records, verifying their signatures as one batch, and returns
// how many passed every check (valid) and how many of those changed the book (fresh).
func (b *Book) acceptBatch(raws [][]byte, source string) (fresh, valid int) {
	now := b.clock.Now()
	offers, errs := protocol.CheckOffers(raws, now)
	for i, so := range offers {
		err := errs[i]
		if err == nil {
			err = b.trust.certify(so, now)
		}
		if err == nil {
			err = b.replayCheck(so)
		}
		if err != nil {
			b.reject(source, err)
			continue
		}
		valid++
		if _, isNew := b.store(so, source); isNew {
			fresh++
		}
	}
	return fresh, valid
}

// store keeps a checked offer if it is newer than the one held, and returns the one held.
func (b *Book) store(so *protocol.SignedOffer, source string) (*protocol.SignedOffer, bool) {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.offers[so.Signer]
	if cur != nil && cur.offer.Offer.Seq >= so.Offer.Seq {
		cur.receivedAt = now // the same record again: it is still current
		return cur.offer, false
	}
	e := &bookEntry{offer: so, receivedAt: now, counted: isLive(so, now)}
	b.offers[so.Signer] = e
	b.dirty[so.Signer] = true
	b.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindOffer), source).Inc()
	close(b.changed)
	b.changed = make(chan struct{})
	// The gauge moves by this offer alone: counting the book at every offer made a sync of
	// n offers cost n² (a renter joining 10,000 providers). Offers that expire meanwhile
	// leave it at the next Flush's count.
	if cur != nil && cur.counted {
		b.metrics.OffersKnown.Dec()
	}
	if e.counted {
		b.metrics.OffersKnown.Inc()
	}
	return so, true
}

// Get returns the held offer of a provider and when it was last received.
func (b *Book) Get(p peer.ID) (*protocol.SignedOffer, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.offers[p]; e != nil {
		return e.offer, e.receivedAt
	}
	return nil, time.Time{}
}

// Live returns every held offer that is unexpired and not withdrawn at time now.
func (b *Book) Live(now time.Time) []*protocol.SignedOffer {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*protocol.SignedOffer, 0, len(b.offers))
	for _, e := range b.offers {
		if isLive(e.offer, now) {
			out = append(out, e.offer)
		}
	}
	return out
}

func isLive(so *protocol.SignedOffer, now time.Time) bool {
	return so.Offer.Withdrawn == "" && now.Before(so.Offer.ExpiresAt) && so.Cert != nil && now.Before(so.Cert.ExpiresAt)
}

// evict drops a provider's offer whose certificate a revocation covers, and says whether
// it held one.
func (b *Book) evict(r *protocol.SignedRevocation) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.offers[r.Provider]
	if e == nil || e.offer.Cert == nil || !r.Revokes(e.offer.Cert) {
		return false
	}
	delete(b.offers, r.Provider)
	close(b.changed)
	b.changed = make(chan struct{})
	if e.counted {
		b.metrics.OffersKnown.Dec()
	}
	return true
}

// waitChange returns a channel closed at the next change of the book.
func (b *Book) waitChange() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// Flush writes changed offers to the ledger in one batch and forgets expired ones.
func (b *Book) Flush() error {
	now := b.clock.Now()
	b.mu.Lock()
	batch := make([]ledger.SeenOffer, 0, len(b.dirty))
	for p := range b.dirty {
		if e := b.offers[p]; e != nil {
			batch = append(batch, ledger.SeenOffer{Provider: p, Seq: e.offer.Offer.Seq, ExpiresAt: e.offer.Offer.ExpiresAt, Raw: e.offer.Raw})
		}
	}
	clear(b.dirty)
	for p, e := range b.offers {
		if !now.Before(e.offer.Offer.ExpiresAt) {
			delete(b.offers, p)
		}
	}
	b.updateGaugeLocked(now)
	b.mu.Unlock()
	var errs []error
	if len(batch) > 0 {
		errs = append(errs, b.seen.SaveSeenOffers(batch))
	}
	_, err := b.seen.PruneSeenOffers(now)
	return errors.Join(append(errs, err)...)
}

func (b *Book) updateGauge(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.updateGaugeLocked(now)
}

func (b *Book) updateGaugeLocked(now time.Time) {
	n := 0
	for _, e := range b.offers {
		if e.counted = isLive(e.offer, now); e.counted {
			n++
		}
	}
	b.metrics.OffersKnown.Set(float64(n))
}

// DHTValidator validates offer records for the DHT: every stateless rule, the replay rule,
// and that the record is stored under its own signer's key.
type DHTValidator struct{ book *Book }

// DHTValidator returns the DHT validator of offer records that this book backs.
func (b *Book) DHTValidator() DHTValidator { return DHTValidator{b} }

func (v DHTValidator) Validate(key string, value []byte) error {
	owner, err := protocol.ParseOfferKey(key)
	if err != nil {
		v.book.reject("dht_validator", err)
		return err
	}
	so, err := v.book.checkQuiet(value)
	if err != nil {
		// An older record in the DHT is most often a stale copy that a peer still holds
		// (or this node's own, about to be replaced), not an attack: count it apart.
		reason := protocol.Reason(err)
		if errors.Is(err, protocol.ErrReplay) && errors.Is(err, errOlderSeq) {
			reason = "superseded"
		}
		v.book.rejectAs("dht_validator", reason, err)
		return err
	}
	if so.Signer != owner {
		err := fmt.Errorf("%w: offer of %s stored under the key of %s", protocol.ErrWrongSigner, so.Signer, owner)
		v.book.reject("dht_validator", err)
		return err
	}
	return nil
}

// Select picks the record with the highest sequence. Values were validated already.
func (v DHTValidator) Select(key string, values [][]byte) (int, error) {
	best, bestSeq := -1, uint64(0)
	for i, raw := range values {
		seq, err := protocol.PeekOfferSeq(raw)
		if err != nil {
			continue
		}
		if best < 0 || seq > bestSeq {
			best, bestSeq = i, seq
		}
	}
	if best < 0 {
		return 0, errors.New("no valid offer record")
	}
	return best, nil
}

// Reset forgets every offer (benchmarks use it to force searches through the DHT).
func (b *Book) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.offers)
	clear(b.dirty)
	clear(b.synced)
	b.heardSince = time.Time{}
	b.metrics.OffersKnown.Set(0)
}

// markSynced notes a sync at t of the offers of models; of everything the node follows
// when models is empty (a zero t forgets it: a model followed since is not in the book).
func (b *Book) markSynced(t time.Time, models ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(models) == 0 {
		b.synced[""] = t
	}
	if len(b.synced)+len(models) > maxSyncedModels {
		// Searches for names of no model (a node following every model syncs any name
		// searched): forget the models' times, not the book's.
		all := b.synced[""]
		clear(b.synced)
		b.synced[""] = all
	}
	for _, m := range models {
		b.synced[protocol.NormalizeModel(m)] = t
	}
}

// maxSyncedModels bounds the models whose last sync a book remembers.
const maxSyncedModels = 256

// lastSynced is when a sync last brought everything the node follows.
func (b *Book) lastSynced() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.synced[""]
}

// heard notes whether, at now, every followed offer topic has a coordinator among its
// gossip peers: heardSince starts at the first such check and ends at the first that fails.
func (b *Book) heard(now time.Time, heard bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !heard:
		b.heardSince = time.Time{}
	case b.heardSince.IsZero():
		b.heardSince = now
	}
}

// warmth returns when a sync last brought the offers of model ("": of everything the node
// follows), and since when its gossip has flowed.
func (b *Book) warmth(model string) (synced, heardSince time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	synced = b.synced[""]
	if m := b.synced[protocol.NormalizeModel(model)]; model != "" && m.After(synced) {
		synced = m
	}
	return synced, b.heardSince
}
