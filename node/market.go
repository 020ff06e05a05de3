package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Market statistics: the coordinator publishes, per model and region, the supply listed,
// the recent demand and lease prices, the utilisation and a recommended price, signed; every
// node keeps the latest and `gpunex price recommend` reads it. docs/settlement.md, "Market
// statistics".

// marketBook holds the latest valid market statistics.
type marketBook struct {
	mu     sync.Mutex
	latest *protocol.SignedMarketStats
	seq    uint64 // the coordinator's own sequence
}

// computeMarket builds the statistics from the offers this coordinator sees and the job
// reports of the window.
func (s *settlement) computeMarket(now time.Time) (protocol.MarketStats, error) {
	window := s.n.cfg.Settlement.MarketWindow.Duration
	type key struct{ model, region string }
	type acc struct {
		m         protocol.Market
		providers map[string]bool
		listed    []protocol.MicroUSDC
		leased    []protocol.MicroUSDC
	}
	markets := map[key]*acc{}
	get := func(k key) *acc {
		a := markets[k]
		if a == nil {
			a = &acc{m: protocol.Market{Model: k.model, Region: k.region}, providers: map[string]bool{}}
			markets[k] = a
		}
		return a
	}
	regionOf := map[string]string{}
	for _, so := range s.n.book.live(now) {
		regionOf[so.Offer.Provider] = so.Offer.Region
		for _, g := range so.Offer.GPUs {
			a := get(key{g.Model, so.Offer.Region})
			a.m.ListedGPUs += g.Count
			a.providers[so.Offer.Provider] = true
			for range g.Count {
				a.listed = append(a.listed, g.PricePerGPUHour)
			}
		}
	}
	reports, err := s.n.ledger.JobReports(now.Add(-window))
	if err != nil {
		return protocol.MarketStats{}, err
	}
	for _, r := range reports {
		// Only jobs paid through an escrow hold count: anyone can sign a lease with a
		// renter of its own, nobody can make the coordinator charge one.
		if h, err := s.n.ledger.GetHold(r.Job); err != nil || h.State != ledger.HoldCharged || h.Provider != r.Provider {
			continue
		}
		l, _, err := protocol.OpenLease(r.Lease)
		if err != nil || protocol.CheckLeaseTerms(l) != nil {
			continue
		}
		rec, err := protocol.CheckReceipt(r.Receipt, r.Lease, l)
		if err != nil {
			continue
		}
		a := get(key{l.Model, regionOf[l.Provider]})
		a.m.Leases++
		a.m.LeasedGPUSeconds += int64(rec.GPUs) * rec.Seconds
		a.leased = append(a.leased, l.Price)
	}
	st := protocol.MarketStats{Version: protocol.SettlementVersion, Coordinator: s.n.id.String(), IssuedAt: now.UTC(),
		ExpiresAt: now.UTC().Add(3 * s.n.cfg.Settlement.MarketInterval.Duration), WindowSecs: int64(window / time.Second),
		CommissionBPS: s.n.cfg.Settlement.CommissionBPS, Markets: []protocol.Market{}}
	for _, a := range markets {
		a.m.ListedProviders = len(a.providers)
		a.m.MedianListPrice = protocol.Median(a.listed)
		a.m.MedianLeasePrice = protocol.Median(a.leased)
		if supply := int64(a.m.ListedGPUs) * int64(window/time.Second); supply > 0 {
			a.m.Utilisation = int(min(1000, a.m.LeasedGPUSeconds*1000/supply))
		} else if a.m.Leases > 0 {
			a.m.Utilisation = 1000
		}
		a.m.Recommended, a.m.Basis = protocol.Recommend(a.m)
		st.Markets = append(st.Markets, a.m)
	}
	sort.Slice(st.Markets, func(i, k int) bool {
		if st.Markets[i].Model != st.Markets[k].Model {
			return st.Markets[i].Model < st.Markets[k].Model
		}
		return st.Markets[i].Region < st.Markets[k].Region
	})
	if len(st.Markets) > 500 {
		st.Markets = st.Markets[:500]
	}
	return st, nil
}

// publishMarket signs and gossips the current market statistics.
func (s *settlement) publishMarket(ctx context.Context) {
	now := s.n.clock.Now()
	st, err := s.computeMarket(now)
	if err != nil {
		s.n.log.Warn("market statistics not computed", "err", err)
		return
	}
	s.n.market.mu.Lock()
	s.n.market.seq = max(s.n.market.seq+1, uint64(now.UnixNano()))
	st.Seq = s.n.market.seq
	s.n.market.mu.Unlock()
	raw, err := protocol.Seal(protocol.KindMarketStats, st, s.n.key)
	if err != nil {
		s.n.log.Warn("market statistics not signed", "err", err)
		return
	}
	// Publishing runs the topic validator here too, which keeps the record.
	if err := s.n.marketTopic.Publish(ctx, raw); err != nil && ctx.Err() == nil {
		s.n.log.Debug("market statistics not published", "err", err)
		s.n.takeMarket(raw, "self")
	}
}

// takeMarket checks market statistics and keeps them when newer.
func (n *Node) takeMarket(raw []byte, source string) error {
	trusted, err := n.cfg.TrustedCoordinators()
	if err != nil {
		return err
	}
	if n.cfg.Role == RoleCoordinator {
		trusted = append(trusted, n.id)
	}
	m, err := protocol.CheckMarketStats(raw, n.clock.Now(), protocol.NewTrust(trusted...))
	if err != nil {
		n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindMarketStats), source, protocol.Reason(err)).Inc()
		return err
	}
	n.market.mu.Lock()
	defer n.market.mu.Unlock()
	if cur := n.market.latest; cur != nil && cur.Signer == m.Signer && cur.Seq >= m.Seq {
		return fmt.Errorf("%w: market statistics seq %d, have %d", protocol.ErrReplay, m.Seq, cur.Seq)
	}
	n.market.latest = m
	n.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindMarketStats), source).Inc()
	return nil
}

// validateMarket is the market topic validator.
func (n *Node) validateMarket(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	return recordVerdict(n.takeMarket(msg.Data, "gossip"))
}

// PriceAdvice is what `gpunex price recommend` prints for one market.
type PriceAdvice struct {
	protocol.Market
	RecommendedUSDC string `json:"recommended_usdc"`
	MedianListUSDC  string `json:"median_list_usdc"`
	MedianLeaseUSDC string `json:"median_lease_usdc"`
	LeasedGPUHours  string `json:"leased_gpu_hours"`
	// YourPrice is this provider's current price for the model, when it sells it.
	YourPriceUSDC string    `json:"your_price_usdc,omitempty"`
	IssuedAt      time.Time `json:"stats_issued_at"`
	WindowHours   int64     `json:"window_hours"`
	CommissionBPS int       `json:"commission_bps"`
	Coordinator   string    `json:"coordinator"`
}

// RecommendPrice returns the latest market advice for a model (all models when empty) in
// a region (this provider's region when empty; all regions for other roles).
func (n *Node) RecommendPrice(model, region string) ([]PriceAdvice, error) {
	n.market.mu.Lock()
	m := n.market.latest
	n.market.mu.Unlock()
	if m == nil {
		return nil, errors.New("no market statistics received from the coordinator yet: they are published every settlement.market_interval")
	}
	if region == "" && n.cfg.Role == RoleProvider {
		region = n.cfg.Provider.Region
	}
	model, region = protocol.NormalizeModel(model), protocol.NormalizeRegion(region)
	own := map[string]protocol.MicroUSDC{}
	if n.cfg.Role == RoleProvider {
		if items, err := n.cfg.Provider.Items(); err == nil {
			for _, it := range items {
				own[it.Model] = it.PricePerGPUHour
			}
		}
		if prices, err := n.ledger.Prices(); err == nil {
			for k, v := range prices {
				own[k] = v
			}
		}
	}
	var out []PriceAdvice
	for _, mk := range m.Markets {
		if (model != "" && mk.Model != model) || (region != "" && mk.Region != region) {
			continue
		}
		a := PriceAdvice{Market: mk, RecommendedUSDC: mk.Recommended.String(), MedianListUSDC: mk.MedianListPrice.String(),
			MedianLeaseUSDC: mk.MedianLeasePrice.String(), LeasedGPUHours: fmt.Sprintf("%.1f", float64(mk.LeasedGPUSeconds)/3600),
			IssuedAt: m.IssuedAt, WindowHours: m.WindowSecs / 3600, CommissionBPS: m.CommissionBPS, Coordinator: m.Coordinator}
		if p, ok := own[mk.Model]; ok {
			a.YourPriceUSDC = p.String()
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no market statistics for model %q in region %q", ErrNotFound, model, region)
	}
	return out, nil
}
