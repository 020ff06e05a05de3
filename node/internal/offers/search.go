package offers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// SortRows orders search rows as the filter's Sort says; ties go to the better placement, then the ID.
func SortRows(f api.SearchFilter, rows []api.OfferRow) {
	key := func(r api.OfferRow) float64 {
		switch f.Sort {
		case "price":
			return float64(r.PriceMicroUSDC)
		case "score":
			if r.Score == nil {
				return math.Inf(1)
			}
			return -float64(*r.Score)
		case "perf":
			if r.Bench == nil || r.PriceMicroUSDC <= 0 {
				return math.Inf(1)
			}
			return -float64(r.Bench.PerfScore) / float64(r.PriceMicroUSDC)
		case "placement":
			return float64(r.PlacementMicroUSDC)
		}
		return -r.Rank.Merit
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if ki, kj := key(rows[i]), key(rows[j]); ki != kj {
			return ki < kj
		}
		if rows[i].PlacementMicroUSDC != rows[j].PlacementMicroUSDC {
			return rows[i].PlacementMicroUSDC < rows[j].PlacementMicroUSDC
		}
		return rows[i].ID < rows[j].ID
	})
}

// Rank fills each row's rank terms from the rows found.
func Rank(rows []api.OfferRow) {
	market := map[string][]protocol.MicroUSDC{}
	for _, r := range rows {
		k := r.Model + "|" + r.Region
		market[k] = append(market[k], r.PriceMicroUSDC)
	}
	median := map[string]float64{}
	for k, ps := range market {
		slices.Sort(ps)
		m := float64(ps[len(ps)/2])
		if len(ps)%2 == 0 {
			m = float64(ps[len(ps)/2-1]+ps[len(ps)/2]) / 2
		}
		median[k] = m
	}
	for i := range rows {
		r := &rows[i]
		t := api.RankTerms{Score: 90, Perf: 0.8, PriceVsMarket: 1}
		if r.Score != nil {
			t.Score = *r.Score
		}
		if r.Bench != nil && r.Bench.PerfScore > 0 {
			t.Perf = float64(r.Bench.PerfScore) / 100
		}
		if r.PriceMicroUSDC > 0 {
			t.Bonus = 1 - float64(r.PlacementMicroUSDC)/float64(r.PriceMicroUSDC)
		}
		if m := median[r.Model+"|"+r.Region]; m > 0 {
			t.PriceVsMarket = float64(r.PriceMicroUSDC) / m
		}
		s := float64(t.Score) / 100
		t.Merit = math.Round(s*s*t.Perf*(1+t.Bonus)/t.PriceVsMarket*10000) / 10000
		r.Rank = t
	}
}

// rowBench summarises an attestation's GPUs of one model, leaving out delisted ones.
func rowBench(a *protocol.SignedAttestation, model string) *api.RowBench {
	if a == nil {
		return nil
	}
	rb := &api.RowBench{MeasuredAt: a.IssuedAt}
	score := 0
	for _, g := range a.GPUs {
		if g.Model != model || g.Below != "" || g.PerfScore == 0 {
			continue // delisted, or not measured
		}
		rb.GPUs = append(rb.GPUs, g)
		rb.FP32TFLOPS += g.FP32TFLOPS
		rb.FP16TFLOPS += g.FP16TFLOPS
		rb.TensorTFLOPS += g.TensorTFLOPS
		rb.MemBandwidth += g.MemBandwidth
		score += g.PerfScore
	}
	n := float64(len(rb.GPUs))
	if n == 0 {
		return nil
	}
	rb.FP32TFLOPS, rb.FP16TFLOPS = roundTenth(rb.FP32TFLOPS/n), roundTenth(rb.FP16TFLOPS/n)
	rb.TensorTFLOPS, rb.MemBandwidth = roundTenth(rb.TensorTFLOPS/n), roundTenth(rb.MemBandwidth/n)
	rb.PerfScore = score / len(rb.GPUs)
	return rb
}

func roundTenth(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// BenchmarkGap says why no fresh benchmark attestation vouches for an offer's GPUs of
// model at now, "" when one does: the offer carries none, its attestation's challenge is
// past protocol.MaxAttestationAge (an offer accepted while it was fresh stays in the book
// until the offer expires), or the offer counts more GPUs of the model than the attestation
// attests without delisting them (a GPU attested with no figure measured, a real GPU
// without working kernels, counts: it was there for the challenged run and is not
// delisted). Renters pass such offers over unless they ask for them.
func BenchmarkGap(so *protocol.SignedOffer, model string, now time.Time) string {
	a := so.Attest
	if a == nil || a.Challenge == nil {
		return "no benchmark attestation"
	}
	if until := a.Challenge.IssuedAt.Add(protocol.MaxAttestationAge); !now.Before(until) {
		return fmt.Sprintf("its benchmark attestation expired at %s", until.UTC().Format(time.RFC3339))
	}
	offered, certified := 0, 0
	for _, g := range so.Offer.GPUs {
		if g.Model == model {
			offered = g.Count
		}
	}
	for _, g := range a.GPUs {
		if g.Model == model && g.Below == "" {
			certified++
		}
	}
	if offered > certified {
		return fmt.Sprintf("offers %d x %s, its benchmark attestation certifies %d", offered, model, certified)
	}
	return ""
}

// PlacementBonusBP is the ranking bonus, in basis points of the price, that a certified
// provider earns: 1000 (10%) for the Enterprise tier, plus 25 per whole month of commitment
// left, up to 24 months (600, 6%). Search ranks rows by price x (10000 - bonus) / 10000;
// the price shown and charged is unchanged.
func PlacementBonusBP(tier string, commitmentEnd, now time.Time) int64 {
	var bp int64
	if tier == protocol.TierEnterprise {
		bp += 1000
	}
	months := int64(commitmentEnd.Sub(now) / (30 * 24 * time.Hour))
	return bp + 25*min(max(months, 0), 24)
}

func match(f api.SearchFilter, o *protocol.Offer, g protocol.OfferGPUs) bool {
	return (f.Model == "" || protocol.NormalizeModel(f.Model) == g.Model) &&
		(f.Region == "" || protocol.NormalizeRegion(f.Region) == o.Region) &&
		(f.MaxPrice <= 0 || g.PricePerGPUHour <= f.MaxPrice) &&
		(f.MinGPUs <= 0 || g.Count >= f.MinGPUs) &&
		(!f.Egress || o.Egress != "")
}

// Rows flattens a verified offer into search rows that match the filter.
func Rows(f api.SearchFilter, so *protocol.SignedOffer) []api.OfferRow {
	if so.Attest != nil && so.Attest.HostBelow != "" {
		return nil // delisted by its own attestation (a link or disk under the minimum)
	}
	if (f.Tier != "" || f.Coordinator != "") && (so.Cert == nil || (f.Tier != "" && so.Cert.Tier != f.Tier) ||
		(f.Coordinator != "" && so.Cert.Signer.String() != f.Coordinator)) {
		return nil
	}
	var out []api.OfferRow
	for _, g := range so.Offer.GPUs {
		if !match(f, &so.Offer, g) {
			continue
		}
		row := api.OfferRow{
			ID:             protocol.OfferID(so.Signer, g.Model),
			Provider:       so.Signer.String(),
			Model:          g.Model,
			GPUs:           g.Count,
			VRAMGB:         g.VRAMGB,
			PriceUSDC:      g.PricePerGPUHour.String(),
			PriceMicroUSDC: g.PricePerGPUHour,
			Region:         so.Offer.Region,
			Availability:   so.Offer.Availability,
			Simulated:      g.Simulated,
			Egress:         so.Offer.Egress,
			EgressMbps:     so.Offer.EgressMbps,
			Seq:            so.Offer.Seq,
			IssuedAt:       so.Offer.IssuedAt,
			ExpiresAt:      so.Offer.ExpiresAt,
		}
		row.PlacementMicroUSDC = row.PriceMicroUSDC
		row.Bench = rowBench(so.Attest, g.Model)
		if so.Cert != nil {
			row.Tier, row.CommitmentEnd, row.Coordinator = so.Cert.Tier, so.Cert.CommitmentEnd, so.Cert.Signer.String()
			bp := PlacementBonusBP(row.Tier, row.CommitmentEnd, so.Offer.IssuedAt)
			row.PlacementMicroUSDC = row.PriceMicroUSDC * protocol.MicroUSDC(10000-bp) / 10000
		}
		out = append(out, row)
	}
	return out
}

// Search returns every live offer on the network that matches f, verified, certified and
// vouched for by a fresh benchmark attestation (BenchmarkGap; f.Unbenchmarked keeps the
// others too, each with its reason), best placed first (lowest price after the placement
// bonus, see PlacementBonusBP).
//
// It queries the DHT for the providers announced under the most selective key (model,
// region or all), fetches the offer record of each provider it holds no current record for,
// and merges them with the offers received over gossip.
func (c *Catalogue) Search(ctx context.Context, f api.SearchFilter) ([]api.OfferRow, error) {
	rows, _, err := c.SearchMeasured(ctx, f)
	return rows, err
}

// SearchStats say where a search's offers came from: how many providers the DHT named,
// how many records were fetched or failed, and how long the sync and DHT phases took.
type SearchStats struct {
	Found, Fetched, Failed int
	Sync, DHT              time.Duration
	// Coordinator traces the sync's offer stream from a coordinator (the first to open).
	Coordinator *SyncTrace
}

// SyncTrace is when a coordinator's stream of a sync (offers, revocations or scores) passed
// its steps, from the sync's start (0: not
// reached), as net/http/httptrace traces a request: the stream opened and the request was
// written (go-libp2p negotiates the protocol lazily: the peer's agreement comes with its
// answer; a connection not yet identified waits for identify first), the first record
// arrived, the answer ended.
type SyncTrace struct {
	claimed atomic.Bool
	start   time.Time
	steps   [3]atomic.Int64
	records atomic.Int64
}

const (
	traceOpened = iota
	traceFirst
	traceEnded
)

// Opened, First and Ended are the steps' times from the sync's start (0 on a search
// without a sync, whose trace is nil).
func (t *SyncTrace) Opened() time.Duration { return t.step(traceOpened) }
func (t *SyncTrace) First() time.Duration  { return t.step(traceFirst) }
func (t *SyncTrace) Ended() time.Duration  { return t.step(traceEnded) }

func (t *SyncTrace) step(i int) time.Duration {
	if t == nil {
		return 0
	}
	return time.Duration(t.steps[i].Load())
}

func (t *SyncTrace) String() string {
	switch {
	case t == nil:
		return "no sync"
	case !t.claimed.Load():
		return "no coordinator's stream opened"
	}
	return fmt.Sprintf("opened %s, first record %s, ended %s, %d records", t.Opened().Round(time.Millisecond), t.First().Round(time.Millisecond),
		t.Ended().Round(time.Millisecond), t.Records())
}

// Records is how many records the stream brought.
func (t *SyncTrace) Records() int64 {
	if t == nil {
		return 0
	}
	return t.records.Load()
}

// record counts a record the stream brought, the first one's time marked.
func (t *SyncTrace) record() {
	if t != nil {
		t.mark(traceFirst)
		t.records.Add(1)
	}
}

// syncTraceKey is the context key of a sync's trace of a coordinator's stream of kind.
type syncTraceKey struct{ kind protocol.Kind }

// traced is ctx carrying a new trace of a coordinator's stream of each kind, started now.
func traced(ctx context.Context, kinds ...protocol.Kind) (context.Context, map[protocol.Kind]*SyncTrace) {
	traces := map[protocol.Kind]*SyncTrace{}
	now := time.Now()
	for _, k := range kinds {
		traces[k] = &SyncTrace{start: now}
		ctx = context.WithValue(ctx, syncTraceKey{k}, traces[k])
	}
	return ctx, traces
}

// untraced is ctx without the traces of a sync's streams: another peer's streams are not
// traced.
func untraced(ctx context.Context) context.Context {
	for _, k := range []protocol.Kind{protocol.KindOffer, protocol.KindRevocation, protocol.KindScore} {
		ctx = context.WithValue(ctx, syncTraceKey{k}, (*SyncTrace)(nil))
	}
	return ctx
}

// traceOf is the trace in ctx of kind's stream that this stream may record (the first to
// ask), or nil.
func traceOf(ctx context.Context, kind protocol.Kind) *SyncTrace {
	if t, _ := ctx.Value(syncTraceKey{kind}).(*SyncTrace); t != nil && t.claimed.CompareAndSwap(false, true) {
		return t
	}
	return nil
}

// mark records now as a step's time (once), when t traces.
func (t *SyncTrace) mark(step int) {
	if t != nil && t.steps[step].Load() == 0 { // the first record's mark is asked at every record
		t.steps[step].CompareAndSwap(0, int64(max(time.Since(t.start), 1)))
	}
}

// SearchMeasured is Search with the figures of where its offers came from (benchmarks).
func (c *Catalogue) SearchMeasured(ctx context.Context, f api.SearchFilter) ([]api.OfferRow, SearchStats, error) {
	var st SearchStats
	start := time.Now()
	defer func() { c.metrics.Searches.Observe(time.Since(start).Seconds()) }()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SearchTimeout.Duration)
	defer cancel()

	keys := c.searchKeys(f)
	stale := c.staleAfter()
	walk, fetch, fetched := ctx, ctx, func() {}
	// The walk only adds what gossip or a coordinator's sync missed: the search waits for
	// it WarmSearch at most. The offers it found are fetched all the same, into the book
	// for the next search, within SearchTimeout.
	short := func() {
		var cancelWalk context.CancelFunc
		walk, cancelWalk = context.WithTimeout(ctx, c.cfg.WarmSearch.Duration)
		fetch, fetched = context.WithTimeout(context.WithoutCancel(ctx), c.cfg.SearchTimeout.Duration)
		context.AfterFunc(ctx, cancelWalk)
	}
	// A book that does not follow the model's gossip (a provider's; a renter's that
	// follows other models) is cold at every search.
	switch {
	case c.warm(f.Model, c.clock.Now()):
		short()
	case c.peer.Connected() > 0:
		// Gossip may have missed offers (this node just joined, or was away): catch up
		// from peers first, so that the DHT phase only fetches what they lacked. The sync
		// asks for what is searched: a model's offers (the book is then warm for that
		// model), or every offer (warm for every model it follows). Asking for every
		// model it follows at a one-model search costs as many times the records to
		// fetch and check as there are models: at 10,000 providers, 50 MB instead of
		// 5.5, past the sync's 2 s at a renter's 50 Mbit/s (docs/performance.md, "1,000
		// providers by a smaller model"). The sync needs connected peers only: a node
		// that joined moments ago, whose routing table is still empty, syncs from its
		// coordinator (it found nothing before: the scale harness's first searches).
		req := protocol.OfferSyncRequest{}
		if f.Model != "" {
			req.Models = []string{f.Model}
		}
		t := time.Now()
		sctx, traces := traced(ctx, protocol.KindOffer)
		st.Coordinator = traces[protocol.KindOffer]
		sctx, scancel := context.WithTimeout(sctx, 2*time.Second)
		byCoordinator := c.syncBy(sctx, &req, true, nil).byCoordinator
		scancel()
		st.Sync = time.Since(t)
		// A coordinator follows every model and catches up the offers gossip missed
		// after its probes: its answer is the market the whole walk would find, which
		// waiting for made cold searches take their whole 3 s budget from 200 providers
		// on (docs/performance.md, "1,000 providers by a smaller model"). Another peer's
		// answer may be a part of the market (a node that joined moments ago, or a
		// stranger): then the search waits for the whole walk.
		if byCoordinator {
			short()
		}
	}
	if c.peer.RoutingTableSize() > 0 {
		t := time.Now()
		st.Found, st.Fetched, st.Failed = c.walkOffers(walk, fetch, fetched, keys, stale)
		st.DHT = time.Since(t)
	} else {
		fetched()
	}

	now := c.clock.Now()
	var rows []api.OfferRow
	for _, so := range c.book.Live(now) {
		for _, r := range Rows(f, so) {
			if s := c.score(so); s != nil {
				v := s.Score
				r.Score = &v
			}
			if r.Unbenchmarked = BenchmarkGap(so, r.Model, now); r.Unbenchmarked != "" && !f.Unbenchmarked {
				c.log.Debug("search: offer passed over", "offer", r.ID, "why", r.Unbenchmarked)
				continue
			}
			rows = append(rows, r)
		}
	}
	Rank(rows)
	SortRows(f, rows)
	c.log.Debug("search", "dht_providers", st.Found, "fetched", st.Fetched, "fetch_failed", st.Failed, "sync", st.Sync, "dht", st.DHT, "rows", len(rows), "took", time.Since(start))
	return rows, st, nil
}

// searchKeys are the DHT keys a search walks: its model's, else its region's, else every
// model's. There is no key for every offer: the 20 nodes closest to it would hold a record
// of every provider, and hand them all to every search.
func (c *Catalogue) searchKeys(f api.SearchFilter) []cid.Cid {
	switch {
	case f.Model != "":
		return []cid.Cid{protocol.ModelKey(f.Model)}
	case f.Region != "":
		return []cid.Cid{protocol.RegionKey(f.Region)}
	}
	var keys []cid.Cid
	if c.models != nil {
		for _, m := range c.models() {
			keys = append(keys, protocol.ModelKey(m))
		}
	}
	return keys
}

// findProvidersOf merges the walks of several keys into one stream of providers, each named
// once; it closes when every walk is over.
func (c *Catalogue) findProvidersOf(ctx context.Context, keys []cid.Cid) <-chan peer.AddrInfo {
	out := make(chan peer.AddrInfo)
	var mu sync.Mutex
	seen := map[peer.ID]bool{}
	var walks sync.WaitGroup
	for _, k := range keys {
		walks.Go(func() {
			for ai := range c.findProviders(ctx, k) {
				mu.Lock()
				dup := seen[ai.ID]
				seen[ai.ID] = true
				mu.Unlock()
				if dup {
					continue
				}
				select {
				case out <- ai:
				case <-ctx.Done():
				}
			}
		})
	}
	go func() { walks.Wait(); close(out) }()
	return out
}

// walkOffers fetches the offers of the providers the DHT names under keys that gossip did
// not keep current (not heard from for stale). The walk and the wait for the fetches end
// with walk; each fetch ends with fetch, which may outlive walk (a warm search's late
// fetches fill the book for the next search); done is called once every fetch is over. It
// returns the providers named, and the fetches done and failed by the time the wait ended.
func (c *Catalogue) walkOffers(walk, fetch context.Context, done func(), keys []cid.Cid, stale time.Duration) (found, fetched, failed int) {
	var mu sync.Mutex
	var ok, bad int
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	providers := c.findProvidersOf(walk, keys)
	for {
		// The walk's end ends the loop at once: the DHT's queries may take a while to wind
		// down after their context ends (a peer's answer is awaited up to its own timeout),
		// and the channel closes only then; the search does not wait for that.
		var ai peer.AddrInfo // stays empty when the walk is over
		select {
		case ai = <-providers:
		case <-walk.Done():
		}
		if ai.ID == "" {
			break
		}
		if ai.ID == c.id {
			continue
		}
		found++
		so, at := c.book.Get(ai.ID)
		if so != nil && c.clock.Now().Sub(at) < stale {
			continue // gossip keeps this one current
		}
		select {
		case sem <- struct{}{}:
		case <-walk.Done():
			continue // the walk is over: the loop ends
		}
		wg.Add(1)
		go func(ai peer.AddrInfo) {
			defer func() { <-sem; wg.Done() }()
			got := c.fetchOffer(fetch, ai)
			mu.Lock()
			defer mu.Unlock()
			if got {
				ok++
			} else {
				bad++
			}
		}(ai)
	}
	over := make(chan struct{})
	go func() { wg.Wait(); done(); close(over) }()
	select {
	case <-over:
	case <-walk.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	return found, ok, bad
}

// fetchOffer gets a provider's offer record into the book: from the provider itself over
// the offer stream, or else from the DHT value record.
func (c *Catalogue) fetchOffer(ctx context.Context, ai peer.AddrInfo) bool {
	raw, err := c.fetchOfferDirect(ctx, ai)
	if err == nil {
		if _, _, err = c.book.acceptFrom(raw, "stream", ai.ID); err == nil {
			return true
		}
	} else if errors.Is(err, protocol.ErrTooLarge) {
		c.book.reject("stream", err)
	}
	c.log.Debug("offer stream failed; trying the DHT", "provider", ai.ID, "err", err)
	raw, err = c.peer.GetValue(ctx, protocol.OfferKey(ai.ID), 3)
	if err != nil && raw == nil {
		c.log.Debug("offer not found in DHT", "provider", ai.ID, "err", err)
		return false
	}
	// The DHT validator already applied every rule, but gossip may have brought a newer
	// record meanwhile: then this one counts as a replay and the newer one stays.
	_, _, err = c.book.acceptFrom(raw, "dht", ai.ID)
	return err == nil
}

// OfferRecord returns the signed record, as received, of the offer with the given ID.
func (c *Catalogue) OfferRecord(ctx context.Context, id string) (*protocol.SignedOffer, error) {
	p, model, err := protocol.ParseOfferID(id)
	if err != nil {
		return nil, err
	}
	so, _ := c.book.Get(p)
	if so == nil {
		fctx, cancel := context.WithTimeout(ctx, c.cfg.SearchTimeout.Duration)
		c.fetchOffer(fctx, peer.AddrInfo{ID: p})
		cancel()
		so, _ = c.book.Get(p)
	}
	if so == nil {
		return nil, fmt.Errorf("%w: no offer known from %s", api.ErrNotFound, p)
	}
	for _, g := range so.Offer.GPUs {
		if g.Model == model {
			return so, nil
		}
	}
	if so.Offer.Withdrawn != "" {
		return so, nil // the record shows why there is nothing to rent
	}
	return nil, fmt.Errorf("%w: provider %s offers no %s", api.ErrNotFound, p, model)
}
