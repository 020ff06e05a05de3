package offers

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// Offer stream: a provider hands its current signed offer to whoever asks
// (docs/protocols/offers.md, "Direct fetch").

const offerStreamTimeout = 5 * time.Second

// fetchOfferDirect asks a provider for its offer over the offer stream.
func (c *Catalogue) fetchOfferDirect(ctx context.Context, ai peer.AddrInfo) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if len(ai.Addrs) > 0 {
		// The DHT's provider record names the addresses: use them (else OpenStream asks
		// the DHT).
		c.peer.Host.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Minute)
	}
	s, err := c.peer.OpenStream(ctx, ai.ID, protocol.OfferProtocol)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	s.CloseWrite()
	raw, err := io.ReadAll(io.LimitReader(s, protocol.MaxOfferSize+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > protocol.MaxOfferSize {
		s.Reset()
		return nil, fmt.Errorf("%w: offer stream sent more than %d bytes", protocol.ErrTooLarge, protocol.MaxOfferSize)
	}
	return raw, nil
}

// maxSyncServing caps the sync answers of each kind a node writes at once: each can be large.
const maxSyncServing = 4

// HandleSyncStream writes the live offers this node holds that the asker's request asks
// for (every one for an asker of the previous release, which sends no request).
func (c *Catalogue) HandleSyncStream(s network.Stream) {
	defer s.Close()
	req, err := readSyncRequest(s)
	if err != nil {
		c.metrics.RecordsRejected.WithLabelValues("sync", "stream", protocol.Reason(err)).Inc()
		s.Reset()
		return
	}
	if !c.answers(req) {
		// This node's book does not follow what is asked (a provider holds its own offer
		// only): a part of the market would pass for all of it. The asker tries its other
		// peers.
		s.Reset()
		return
	}
	release, ok := c.admitSync(s, c.offerSyncs)
	if !ok {
		s.Reset() // busy or asked too often: the asker tries its other peers
		return
	}
	defer release()
	s.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriter(s)
	sent := 0
	for _, so := range c.book.Live(c.clock.Now()) {
		if sent == protocol.MaxSyncOffers {
			break
		}
		if !req.Matches(&so.Offer) {
			continue
		}
		sent++
		var lenBuf [binary.MaxVarintLen64]byte
		w.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(so.Raw)))])
		if _, err := w.Write(so.Raw); err != nil {
			s.Reset()
			return
		}
	}
	if err := w.Flush(); err != nil {
		s.Reset()
	}
}

// syncRequestWait bounds the wait for a sync request, before a sync slot is taken.
const syncRequestWait = 5 * time.Second

// readSyncRequest reads the request that starts a sync stream: none (the asker closed its
// side at once: a node of the previous release) asks for every offer.
func readSyncRequest(s network.Stream) (protocol.OfferSyncRequest, error) {
	var req protocol.OfferSyncRequest
	if err := readRequest(s, protocol.MaxOfferSyncRequest, &req); err != nil {
		return req, err
	}
	return req, req.Check()
}

// readRequest reads the JSON frame (at most max bytes) that starts a sync stream into v,
// waiting syncRequestWait at most; an asker that closed its side at once sent none, and v
// stays as it was.
func readRequest(s network.Stream, max int, v any) error {
	s.SetReadDeadline(time.Now().Add(syncRequestWait))
	r := bufio.NewReader(s)
	if _, err := r.Peek(1); err == io.EOF {
		return nil
	}
	return protocol.ReadJSONFrame(r, max, v)
}

// syncFrom reads the live offers a peer holds that req asks for into the book, and returns
// how many were new and how many of those it received passed their checks (a record that
// fails them counts for nothing: a stranger's garbage must not make a sync done).
func (c *Catalogue) syncFrom(ctx context.Context, p peer.ID, req protocol.OfferSyncRequest) (fresh, received int, err error) {
	s, err := c.startSync(ctx, p, protocol.OfferSyncProtocol, protocol.KindOffer, req)
	if err != nil {
		return 0, 0, err
	}
	defer s.done()
	// Records are checked in batches of 64: one batch signature verification costs less
	// than 64 single ones.
	var batch [][]byte
	flush := func() {
		f, v := c.book.acceptBatch(batch, "sync")
		fresh, received = fresh+f, received+v
		c.metrics.OfferSyncRecords.Add(float64(v))
		batch = batch[:0:0]
	}
	err = protocol.ReadSyncFrames(bufio.NewReader(s), func(raw []byte) {
		s.idle.renew()
		s.trace.record()
		if batch = append(batch, raw); len(batch) == 64 {
			flush()
		}
	})
	if len(batch) > 0 {
		flush()
	}
	// A stream this node ended (its time was up, or a coordinator answered first) reads as
	// a truncated frame: not the peer's fault, not counted.
	if reason, ok := s.idle.reason(err); ok && (errors.Is(err, protocol.ErrTooLarge) || errors.Is(err, protocol.ErrMalformed)) {
		s.Reset()
		c.book.rejectAs("sync", reason, err)
	}
	return fresh, received, err
}

// A sync's stream is given up when no record came for syncStreamIdle (a peer that stalls),
// and in all after syncStreamMost, past the 30 s a server gives an answer: a whole answer
// may take longer than the first (10,000 providers' scores, 6 MB, take 10 s at 5 Mbit/s;
// at 300 providers in the scale harness, a renter's score sync still bringing records was
// cut at the old bound of 10 s in all, and its join asked for everything again). Opening
// the stream is bounded by syncStreamIdle too. A test shortens a catalogue's idle bound
// (Catalogue.streamIdle).
const (
	syncStreamIdle = 10 * time.Second
	syncStreamMost = 35 * time.Second
)

// syncStream is a sync's stream to a peer, its request sent: its answer is read, then done
// ends it.
type syncStream struct {
	network.Stream
	trace *SyncTrace // of a coordinator's stream, or nil
	idle  *idleBound
	done  func()
}

// startSync opens a sync's stream of kind to p on proto (within the idle bound), bounded
// to syncStreamMost in all and reset when ctx ends (endWith), sends req as a JSON frame
// (nothing when nil) and closes its side.
func (c *Catalogue) startSync(ctx context.Context, p peer.ID, proto string, kind protocol.Kind, req any) (*syncStream, error) {
	ctx, cancel := context.WithTimeout(ctx, syncStreamMost)
	octx, ocancel := context.WithTimeout(ctx, c.streamIdle)
	s, err := c.peer.OpenStream(octx, p, proto)
	ocancel()
	if err != nil {
		cancel()
		return nil, err
	}
	trace := traceOf(ctx, kind)
	stop := endWith(ctx, s)
	ss := &syncStream{Stream: s, trace: trace, done: func() {
		stop()
		s.Close()
		trace.mark(traceEnded)
		cancel()
	}}
	if req != nil {
		if err := protocol.WriteJSONFrame(s, req); err != nil {
			s.Reset()
			ss.done()
			return nil, err
		}
	}
	trace.mark(traceOpened)
	s.CloseWrite()
	ss.idle = c.newIdleBound(ctx, s)
	return ss, nil
}

// idleBound is a sync stream's read deadline, the idle bound from its last record (or its
// request), never past its context's deadline.
type idleBound struct {
	ctx    context.Context
	s      network.Stream
	idle   time.Duration
	until  time.Time
	capped bool // until is the context's deadline: this node's own end, not a stall
}

func (c *Catalogue) newIdleBound(ctx context.Context, s network.Stream) *idleBound {
	b := &idleBound{ctx: ctx, s: s, idle: c.streamIdle}
	b.renew()
	return b
}

// renew moves the deadline to the idle bound from now: a record came.
func (b *idleBound) renew() {
	b.until, b.capped = time.Now().Add(b.idle), false
	if dl, ok := b.ctx.Deadline(); ok && dl.Before(b.until) {
		b.until, b.capped = dl, true
	}
	b.s.SetReadDeadline(b.until)
}

// reason is the reason a failed read of the answer is counted under, and whether it is
// the peer's fault: "stalled" past the idle bound, or err's reason; a stream this node
// ended (its context's end or deadline: its time was up, or a coordinator answered first)
// is not counted.
func (b *idleBound) reason(err error) (string, bool) {
	expired := !time.Now().Before(b.until)
	switch {
	case err == nil || b.ctx.Err() != nil || (expired && b.capped):
		return "", false
	case expired:
		return "stalled", true
	}
	return protocol.Reason(err), true
}

// endWith ends a sync stream when ctx ends, and returns the function that stops watching
// ctx: when the asker stops it (a coordinator answered whole), which no deadline says, and
// at ctx's deadline, which the stream's own deadline, set too, says only on a transport
// that honours deadlines (go-libp2p's mocknet does not; the scale harness adds them).
func endWith(ctx context.Context, s network.Stream) (stop func() bool) {
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	return context.AfterFunc(ctx, func() { s.Reset() })
}

// SyncOffers asks up to three connected peers for the offers req asks for, in parallel,
// the bootstrap peers first (infrastructure that follows the whole network, where any other
// peer may have joined moments ago). The sync counts as done only if one of them answered;
// a sync of everything this node follows makes its book warm again (searches answer from it).
func (c *Catalogue) SyncOffers(ctx context.Context, req protocol.OfferSyncRequest) (answered bool) {
	return c.sync(ctx, &req)
}

// SyncJoined is the sync of a node that just joined: revocations and scores, and the
// offers of the models it follows if it follows any (a provider's book holds its own offer
// only: it syncs the market's at a search) and offers is set (a join asked again, whose
// offers came the time before, asks for the rest only). The offers are asked for once
// ready is closed (the model catalogues their attestations are checked with came; nil: at
// once). It says whether the sync was answered whole, and whether the offers came.
func (c *Catalogue) SyncJoined(ctx context.Context, ready <-chan struct{}, offers bool) (answered, offersCame bool) {
	ctx, traces := traced(ctx, protocol.KindOffer, protocol.KindRevocation, protocol.KindScore)
	j := &JoinSync{At: traces[protocol.KindOffer].start, Coordinator: traces}
	c.joinsMu.Lock()
	if len(c.joins) < maxJoinSyncs {
		c.joins = append(c.joins, j)
	}
	c.joinsMu.Unlock()
	var req *protocol.OfferSyncRequest
	if offers && c.Following() {
		req = &protocol.OfferSyncRequest{Models: c.cfg.Models}
	}
	out := c.syncBy(ctx, req, false, ready)
	c.joinsMu.Lock()
	j.Took, j.Answered = time.Since(j.At), out.answered
	c.joinsMu.Unlock()
	return out.answered, out.offers
}

// JoinSync is one join sync (SyncJoined): when it began, how long it took (0: still
// running), whether it was answered, and the traces of the coordinator's streams by kind
// (offers, revocations, scores).
type JoinSync struct {
	At          time.Time
	Took        time.Duration
	Answered    bool
	Coordinator map[protocol.Kind]*SyncTrace
}

// maxJoinSyncs is how many join syncs a node keeps the traces of: a join and its retries.
const maxJoinSyncs = 8

// JoinSyncs are the node's first join syncs, traced (the scale harness's renters' time to
// their coordinator's scores).
func (c *Catalogue) JoinSyncs() []JoinSync {
	c.joinsMu.Lock()
	defer c.joinsMu.Unlock()
	out := make([]JoinSync, len(c.joins))
	for i, j := range c.joins {
		out[i] = *j
	}
	return out
}

// answers says whether this node's book follows every model req asks for (every model,
// when it names none), so that its answer to a sync is the market's, not a part of it.
func (c *Catalogue) answers(req protocol.OfferSyncRequest) bool {
	if len(req.Models) == 0 {
		return c.follows("")
	}
	for _, m := range req.Models {
		if !c.follows(m) {
			return false
		}
	}
	return true
}

// followsAll says whether a sync of req brings everything this node follows by gossip.
func (c *Catalogue) followsAll(req protocol.OfferSyncRequest) bool {
	return len(req.Regions) == 0 && (len(req.Models) == 0 || slices.Equal(req.Models, c.cfg.Models))
}

// follows says whether this node's book follows the gossip of model ("": every model).
func (c *Catalogue) follows(model string) bool {
	if !c.Following() {
		return false
	}
	if len(c.cfg.Models) == 0 {
		return true
	}
	return model != "" && slices.ContainsFunc(c.cfg.Models, func(m string) bool { return protocol.NormalizeModel(m) == protocol.NormalizeModel(model) })
}

// staleAfter is how old a held offer, or the last catalogue sync, may be before a republish
// must have been missed: 1.5 x offers.republish.
func (c *Catalogue) staleAfter() time.Duration {
	return c.cfg.Republish.Duration + c.cfg.Republish.Duration/2
}

// sideSyncFresh is how long after a sync that brought revocations and scores a search's
// sync asks for offers only.
const sideSyncFresh = 30 * time.Second

// sync syncs revocations, scores and the offers req asks for (none when nil) side by side.
func (c *Catalogue) sync(ctx context.Context, req *protocol.OfferSyncRequest) (answered bool) {
	return c.syncBy(ctx, req, false, nil).answered
}

// syncBy is sync, and says whether a bootstrap peer (a coordinator, which follows every
// model) answered req whole and with offers: its answer is then the market's offers of req,
// and the other peers' answers, copies of it, are stopped where they are (what they sent is
// kept): each copy costs the asker as much to check as the first. Other coordinators' are
// not: one that answered first may have done so from a book still filling after its
// restart. A search's sync (search) skips revocations and scores within sideSyncFresh of a
// sync in which a coordinator brought them. The offers are asked for once ready is closed
// (nil: at once).
func (c *Catalogue) syncBy(ctx context.Context, req *protocol.OfferSyncRequest, search bool, ready <-chan struct{}) syncOutcome {
	peers := c.peer.Host.Network().Peers()
	boot := map[peer.ID]bool{}
	for _, ai := range c.boot {
		boot[ai.ID] = true
	}
	slices.SortStableFunc(peers, func(a, b peer.ID) int {
		switch {
		case boot[a] && !boot[b]:
			return -1
		case boot[b] && !boot[a]:
			return 1
		}
		return 0
	})
	// Revocations and scores also travel by gossip: a search's sync soon after a sync in
	// which a coordinator brought them (a search right after the join's; a renter
	// searching several models after a gap in its gossip, one sync a model) asks for
	// offers only. A clock stepped back counts as stale.
	since := c.clock.Now().Sub(time.Unix(0, c.sideSynced.Load()))
	r := &syncRound{req: req, side: !search || req == nil || since < 0 || since >= sideSyncFresh, ready: ready}
	if !r.side {
		r.scored.Store(true)
	}
	// The other peers' answers are copies of a coordinator's: their offer streams are
	// stopped once a coordinator answered its offers (with at least one), their revocation
	// and score streams once it answered both.
	r.offerCopies, r.stopOfferCopies = context.WithCancel(ctx)
	defer r.stopOfferCopies()
	r.sideCopies, r.stopSideCopies = context.WithCancel(ctx)
	defer r.stopSideCopies()
	// bootAsked are the bootstrap peers' syncs, othersAsked the other peers'.
	var bootAsked, othersAsked sync.WaitGroup
	for i, p := range peers {
		if i == 3 {
			break
		}
		asked := &othersAsked
		if boot[p] {
			asked = &bootAsked
		}
		asked.Go(func() { c.syncPeer(ctx, r, p, boot[p]) })
	}
	// The sync ends once the coordinators are done and have answered every kind asked
	// (the other peers' streams are then stopped), or at its context's end (a search's
	// bound), whatever the other peers' streams are still doing: a stream opening that
	// ignores its context (mocknet's, in the scale harness) held searches past their 2 s
	// bound, to 3.9 s, and to it after the coordinator had answered in 60 to 200 ms. The
	// streams still running are reset when the caller's context ends (endWith).
	waited := make(chan struct{})
	go func() {
		bootAsked.Wait()
		if (req != nil && r.offerCopies.Err() == nil) || (r.side && r.sideCopies.Err() == nil) {
			othersAsked.Wait() // a coordinator did not answer every kind: the others' answers count
		}
		close(waited)
	}()
	select {
	case <-waited:
	case <-ctx.Done():
	}
	if r.side && r.bootSide.Load() {
		// Only a coordinator's answers make a search skip them: an empty answer from a
		// stranger would otherwise hide a revocation lost in a gap of the gossip.
		c.sideSynced.Store(c.clock.Now().UnixNano())
	}
	ok := r.ok.Load()
	if ok && req != nil {
		switch {
		case c.followsAll(*req):
			c.book.markSynced(c.clock.Now())
		case len(req.Regions) == 0 && c.answers(*req):
			// Some of the models it follows, whole: a search for one of them need not
			// sync again.
			c.book.markSynced(c.clock.Now(), req.Models...)
		}
	}
	if req != nil {
		// Offers without scores rank providers without their scores: the sync is asked
		// again until both came (as for offers, an empty answer counts from a coordinator
		// only).
		return syncOutcome{answered: ok && r.scored.Load(), byCoordinator: r.coordinator.Load(), offers: ok && r.received.Load()}
	}
	return syncOutcome{answered: ok}
}

// syncOutcome is what a sync brought: answered, it is done (the offers asked for, if any,
// and the scores came); byCoordinator, a coordinator answered the offers with at least one;
// offers, the offers asked for came, at least one (a coordinator's empty answer may be a
// book still filling after its restart: a join asked again asks for them again).
type syncOutcome struct{ answered, byCoordinator, offers bool }

// syncRound is one sync's state, shared by its peers' streams: what it asks for, what
// their answers brought, and the stops of the copies of the peers that are not
// coordinators.
type syncRound struct {
	req   *protocol.OfferSyncRequest // the offers asked for; nil: none
	side  bool                       // revocations and scores asked for
	ready <-chan struct{}            // closed once the offers may be asked for; nil: at once
	// ok: a peer answered the offers (a coordinator, or another with at least one), or the
	// scores when no offer is asked for; received: an answer brought offers; scored: the
	// scores came; coordinator: a coordinator answered the offers with at least one;
	// bootSide: a coordinator answered the revocations and the scores.
	ok, received, scored, coordinator, bootSide atomic.Bool
	offerCopies, sideCopies                     context.Context
	stopOfferCopies, stopSideCopies             context.CancelFunc
}

// readyFor waits until the offers may be asked for, and says whether they may (ctx did not
// end first).
func (r *syncRound) readyFor(ctx context.Context) bool {
	if r.ready == nil {
		return true
	}
	select {
	case <-r.ready:
		return true
	case <-ctx.Done():
		return false
	}
}

// syncPeer asks p for what r asks, revocations, scores and offers side by side, each on
// its own stream: a revoked provider's offer that comes before its revocation is evicted
// when the revocation comes (TakeRevocation), one that comes after is refused. Revocations
// first cost every sync a round trip more (300 ms between regions 150 ms apart); scores
// waiting for the offers delayed a new renter's ranking (docs/performance.md: renters
// holding the coordinator's scores).
func (c *Catalogue) syncPeer(ctx context.Context, r *syncRound, p peer.ID, boot bool) {
	offersCtx, sideCtx := ctx, ctx
	if !boot {
		// Only a coordinator's streams are traced.
		offersCtx, sideCtx = untraced(r.offerCopies), untraced(r.sideCopies)
	}
	var parts sync.WaitGroup
	var gotRevocations, gotScores atomic.Bool
	if r.side {
		parts.Go(func() {
			if err := c.syncRevocations(sideCtx, p); err != nil {
				c.log.Debug("revocation sync failed", "peer", p, "err", err)
				return
			}
			gotRevocations.Store(true)
		})
		parts.Go(func() {
			n, err := c.syncScores(sideCtx, p, c.scoresWanted())
			switch {
			case err != nil:
				c.log.Debug("score sync failed", "peer", p, "err", err)
				return
			case r.req == nil && !c.Following():
				// A provider asks for its own score, which it may not have yet: any answer
				// does, and without offers the sync is done once it came.
				r.ok.Store(true)
				r.scored.Store(true)
			case n > 0 || boot || c.scores == nil:
				// The market's scores: an empty answer counts from a coordinator only (a
				// renter that joined moments ago holds none), with or without offers.
				r.scored.Store(true)
				if r.req == nil {
					r.ok.Store(true)
				}
			}
			gotScores.Store(true)
		})
	}
	if r.req != nil && r.readyFor(offersCtx) {
		if got, received, err := c.syncFrom(offersCtx, p, *r.req); err != nil {
			c.log.Debug("offer sync failed", "peer", p, "err", err)
		} else if received > 0 || boot {
			// An empty answer from a peer that is not a coordinator may be a node that
			// joined moments ago: the sync is not done, and is asked again.
			r.ok.Store(true)
			if received > 0 {
				r.received.Store(true)
			}
			// A coordinator's empty answer may be a book still filling after its restart:
			// it does not stand for the market's.
			if boot && received > 0 {
				r.coordinator.Store(true)
				r.stopOfferCopies()
			}
			c.log.Debug("offer sync", "peer", p, "new", got)
		}
	}
	parts.Wait()
	if boot && gotRevocations.Load() && gotScores.Load() {
		r.bootSide.Store(true)
		r.stopSideCopies()
	}
}
