package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// SearchFilter selects offers. Zero fields match everything.
type SearchFilter struct {
	Model    string
	Region   string
	MaxPrice protocol.MicroUSDC // per GPU-hour
	MinGPUs  int
	// Sort orders the rows: "" (merit, see RankTerms), "placement" (price less the tier
	// and commitment bonus), "price", "score" (reliability, highest first) or "perf"
	// (performance score per USDC, highest first). Rows without the figure sort last.
	Sort string
}

// SortRows orders search rows as f.Sort says; ties go to the better placement, then the ID.
func (f SearchFilter) SortRows(rows []OfferRow) {
	key := func(r OfferRow) float64 {
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

// OfferRow is one GPU model of one provider's live offer, as search shows it.
type OfferRow struct {
	ID             string             `json:"id"`
	Provider       string             `json:"provider"`
	Model          string             `json:"model"`
	GPUs           int                `json:"gpus"`
	VRAMGB         int                `json:"vram_gb"`
	PriceUSDC      string             `json:"price_usdc_per_gpu_hour"`
	PriceMicroUSDC protocol.MicroUSDC `json:"price_micro_usdc_per_gpu_hour"`
	Region         string             `json:"region"`
	Availability   string             `json:"availability"`
	Simulated      bool               `json:"simulated"`
	Seq            uint64             `json:"seq"`
	IssuedAt       time.Time          `json:"issued_at"`
	ExpiresAt      time.Time          `json:"expires_at"`
	// Tier and CommitmentEnd come from the provider's certificate.
	Tier          string    `json:"tier"`
	CommitmentEnd time.Time `json:"commitment_end"`
	// PlacementMicroUSDC is the price search ranks by: the price less the placement
	// bonus of the tier and the commitment (see PlacementBonusBP).
	PlacementMicroUSDC protocol.MicroUSDC `json:"placement_micro_usdc"`
	// Measured figures of the model's GPUs (mean over them) from the offer's benchmark
	// attestation; absent when the provider has none.
	Bench *RowBench `json:"bench,omitempty"`
	// Score is the provider's reliability score (0-100) from a trusted coordinator's
	// latest score record; absent when none is held.
	Score *int `json:"score,omitempty"`
	// Rank holds the terms of the default order (see Rank).
	Rank RankTerms `json:"rank"`
}

// RankTerms are the terms of a row's merit, the default search order (highest first):
//
//	merit = (score/100)^2 x perf x (1 + bonus) / price_vs_market
//
// score is the reliability score (90, a new provider's, when none is held); perf is the
// measured performance score over 100 (0.8 when unmeasured); bonus is the tier and
// commitment placement bonus (PlacementBonusBP / 10000); price_vs_market is the row's price
// over the median price of the same model in the same region among the rows found (1 when
// it is the only one).
type RankTerms struct {
	Score         int     `json:"score"`
	Perf          float64 `json:"perf"`
	Bonus         float64 `json:"bonus"`
	PriceVsMarket float64 `json:"price_vs_market"`
	Merit         float64 `json:"merit"`
}

// Rank fills each row's rank terms from the rows found.
func Rank(rows []OfferRow) {
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
		t := RankTerms{Score: 90, Perf: 0.8, PriceVsMarket: 1}
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

// RowBench is the measured performance of one model's GPUs in an offer.
type RowBench struct {
	FP32TFLOPS   float64   `json:"fp32_tflops"`
	FP16TFLOPS   float64   `json:"fp16_tflops"`
	TensorTFLOPS float64   `json:"tensor_tflops"`
	MemBandwidth float64   `json:"mem_bandwidth_gbps"`
	PerfScore    int       `json:"perf_score"`
	MeasuredAt   time.Time `json:"measured_at"`
	// GPUs are the per-GPU figures.
	GPUs []protocol.GPUBenchmark `json:"gpus"`
}

// rowBench summarises an attestation's GPUs of one model, leaving out delisted ones.
func rowBench(a *protocol.SignedAttestation, model string) *RowBench {
	if a == nil {
		return nil
	}
	rb := &RowBench{MeasuredAt: a.IssuedAt}
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

func (f SearchFilter) match(o *protocol.Offer, g protocol.OfferGPUs) bool {
	return (f.Model == "" || protocol.NormalizeModel(f.Model) == g.Model) &&
		(f.Region == "" || protocol.NormalizeRegion(f.Region) == o.Region) &&
		(f.MaxPrice <= 0 || g.PricePerGPUHour <= f.MaxPrice) &&
		(f.MinGPUs <= 0 || g.Count >= f.MinGPUs)
}

// Rows flattens a verified offer into search rows that match the filter.
func (f SearchFilter) Rows(so *protocol.SignedOffer) []OfferRow {
	var out []OfferRow
	for _, g := range so.Offer.GPUs {
		if !f.match(&so.Offer, g) {
			continue
		}
		row := OfferRow{
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
			Seq:            so.Offer.Seq,
			IssuedAt:       so.Offer.IssuedAt,
			ExpiresAt:      so.Offer.ExpiresAt,
		}
		row.PlacementMicroUSDC = row.PriceMicroUSDC
		row.Bench = rowBench(so.Attest, g.Model)
		if so.Cert != nil {
			row.Tier, row.CommitmentEnd = so.Cert.Tier, so.Cert.CommitmentEnd
			bp := PlacementBonusBP(row.Tier, row.CommitmentEnd, so.Offer.IssuedAt)
			row.PlacementMicroUSDC = row.PriceMicroUSDC * protocol.MicroUSDC(10000-bp) / 10000
		}
		out = append(out, row)
	}
	return out
}

// Search returns every live offer on the network that matches f, verified and certified,
// best placed first (lowest price after the placement bonus, see PlacementBonusBP).
//
// It queries the DHT for the providers announced under the most selective key (model,
// region or all), fetches the offer record of each provider it holds no current record for,
// and merges them with the offers received over gossip.
func (n *Node) Search(ctx context.Context, f SearchFilter) ([]OfferRow, error) {
	rows, _, err := n.search(ctx, f)
	return rows, err
}

// searchStats says where a search's offers came from.
type searchStats struct {
	found, fetched, failed int
	sync, dht              time.Duration
}

func (n *Node) search(ctx context.Context, f SearchFilter) ([]OfferRow, searchStats, error) {
	var st searchStats
	var mu sync.Mutex
	start := time.Now()
	defer func() { n.metrics.Searches.Observe(time.Since(start).Seconds()) }()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Offers.SearchTimeout.Duration)
	defer cancel()

	key := protocol.AllOffersKey()
	switch {
	case f.Model != "":
		key = protocol.ModelKey(f.Model)
	case f.Region != "":
		key = protocol.RegionKey(f.Region)
	}
	if len(n.dht.RoutingTable().ListPeers()) > 0 {
		stale := n.cfg.Offers.Republish.Duration + n.cfg.Offers.Republish.Duration/2
		if n.clock.Now().Sub(n.book.lastSynced()) > stale {
			// Gossip may have missed offers (this node just joined, or was away): catch up
			// from peers first, so that the DHT phase only fetches what they lacked.
			t := time.Now()
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			n.syncOffers(sctx)
			scancel()
			st.sync = time.Since(t)
		}
		t := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for ai := range n.dht.FindProvidersAsync(ctx, key, 0) {
			if ai.ID == n.id {
				continue
			}
			st.found++
			so, at := n.book.get(ai.ID)
			if so != nil && n.clock.Now().Sub(at) < stale {
				continue // gossip keeps this one current
			}
			wg.Add(1)
			sem <- struct{}{}
			go func(ai peer.AddrInfo) {
				defer func() { <-sem; wg.Done() }()
				ok := n.fetchOffer(ctx, ai)
				mu.Lock()
				if ok {
					st.fetched++
				} else {
					st.failed++
				}
				mu.Unlock()
			}(ai)
		}
		wg.Wait()
		st.dht = time.Since(t)
	}

	now := n.clock.Now()
	var rows []OfferRow
	for _, so := range n.book.live(now) {
		rs := f.Rows(so)
		if s := n.Score(so.Signer); s != nil {
			for i := range rs {
				v := s.Score
				rs[i].Score = &v
			}
		}
		rows = append(rows, rs...)
	}
	Rank(rows)
	f.SortRows(rows)
	n.log.Debug("search", "dht_providers", st.found, "fetched", st.fetched, "fetch_failed", st.failed, "sync", st.sync, "dht", st.dht, "rows", len(rows), "took", time.Since(start))
	return rows, st, nil
}

// fetchOffer gets a provider's offer record into the book: from the provider itself over
// the offer stream, or else from the DHT value record.
func (n *Node) fetchOffer(ctx context.Context, ai peer.AddrInfo) bool {
	raw, err := n.fetchOfferDirect(ctx, ai)
	if err == nil {
		if _, _, err = n.book.acceptFrom(raw, "stream", ai.ID); err == nil {
			return true
		}
	} else if errors.Is(err, protocol.ErrTooLarge) {
		n.book.reject("stream", err)
	}
	n.log.Debug("offer stream failed; trying the DHT", "provider", ai.ID, "err", err)
	raw, err = n.dht.GetValue(ctx, protocol.OfferKey(ai.ID), dht.Quorum(3))
	if err != nil && raw == nil {
		n.log.Debug("offer not found in DHT", "provider", ai.ID, "err", err)
		return false
	}
	// The DHT validator already applied every rule, but gossip may have brought a newer
	// record meanwhile: then this one counts as a replay and the newer one stays.
	_, _, err = n.book.acceptFrom(raw, "dht", ai.ID)
	return err == nil
}

// OfferRecord returns the signed record, as received, of the offer with the given ID.
func (n *Node) OfferRecord(ctx context.Context, id string) (*protocol.SignedOffer, error) {
	p, model, err := protocol.ParseOfferID(id)
	if err != nil {
		return nil, err
	}
	so, _ := n.book.get(p)
	if so == nil {
		fctx, cancel := context.WithTimeout(ctx, n.cfg.Offers.SearchTimeout.Duration)
		n.fetchOffer(fctx, peer.AddrInfo{ID: p})
		cancel()
		so, _ = n.book.get(p)
	}
	if so == nil {
		return nil, fmt.Errorf("%w: no offer known from %s", ErrNotFound, p)
	}
	for _, g := range so.Offer.GPUs {
		if g.Model == model {
			return so, nil
		}
	}
	if so.Offer.Withdrawn != "" {
		return so, nil // the record shows why there is nothing to rent
	}
	return nil, fmt.Errorf("%w: provider %s offers no %s", ErrNotFound, p, model)
}
