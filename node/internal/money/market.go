package money

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// Market statistics: the coordinator publishes, per model and region, the supply listed,
// the recent demand and lease prices, the utilisation and a recommended price, signed; every
// node keeps the latest and `gpunex price recommend` reads it. docs/settlement.md, "Market
// statistics".

// Market holds the latest valid market statistics, from the trusted coordinators.
type Market struct {
	clock    clock.Clock
	metrics  *metrics.Metrics
	ledger   Stores
	trust    protocol.Trust
	role     string
	provider config.ProviderConfig

	mu sync.Mutex
	// latest is each trusted coordinator's newest record: coordinators are told apart.
	latest map[peer.ID]*protocol.SignedMarketStats
	seq    uint64 // the coordinator's own sequence
}

// NewMarket returns the market book of a node that trusts the given coordinators (itself
// included on a coordinator).
func NewMarket(d Deps, trusted []peer.ID) *Market {
	return &Market{clock: d.Clock, metrics: d.Metrics, ledger: d.Ledger, trust: protocol.NewTrust(trusted...),
		role: d.Config.Role, provider: d.Config.Provider}
}

// marketStats computes, signs and publishes a coordinator's market statistics.
type marketStats struct {
	id     peer.ID
	key    crypto.PrivKey // signs the statistics
	ledger Stores
	clock  clock.Clock
	log    *slog.Logger
	offers Offers
	// cfg's market_window, market_interval and commission_bps shape the statistics.
	cfg config.SettlementConfig
	// market is the node's own book (it keeps the sequence); topic where statistics go.
	market *Market
	topic  Publisher
}

// Publisher sends a record to a gossip topic's peers (a *p2p.Topic).
type Publisher interface {
	Publish(ctx context.Context, data []byte) error
}

// compute builds the statistics from the offers this coordinator sees and the job
// reports of the window.
func (s *marketStats) compute(now time.Time) (protocol.MarketStats, error) {
	window := s.cfg.MarketWindow.Duration
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
	for _, so := range s.offers.Live(now) {
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
	reports, err := s.ledger.Escrow.JobReports(now.Add(-window))
	if err != nil {
		return protocol.MarketStats{}, err
	}
	for _, r := range reports {
		// Only jobs paid through an escrow hold count: anyone can sign a lease with a
		// renter of its own, nobody can make the coordinator charge one.
		if h, err := s.ledger.Escrow.GetHold(r.Job); err != nil || h.State != ledger.HoldCharged || h.Provider != r.Provider {
			continue
		}
		l, _, err := protocol.OpenLease(r.Lease)
		if err != nil || protocol.CheckLeaseTerms(l, r.ReceivedAt) != nil {
			continue
		}
		rec, err := protocol.CheckReceipt(r.Receipt, r.Lease, l, r.ReceivedAt)
		if err != nil {
			continue
		}
		a := get(key{l.Model, regionOf[l.Provider]})
		a.m.Leases++
		a.m.LeasedGPUSeconds += int64(rec.GPUs) * rec.Seconds
		a.leased = append(a.leased, l.Price)
	}
	st := protocol.MarketStats{Version: protocol.SettlementVersion, Coordinator: s.id.String(), IssuedAt: now.UTC(),
		ExpiresAt: now.UTC().Add(3 * s.cfg.MarketInterval.Duration), WindowSecs: int64(window / time.Second),
		CommissionBPS: s.cfg.CommissionBPS, Markets: []protocol.Market{}}
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

// publish signs and gossips the current market statistics.
func (s *marketStats) publish(ctx context.Context) {
	now := s.clock.Now()
	st, err := s.compute(now)
	if err != nil {
		s.log.Warn("market statistics not computed", "err", err)
		return
	}
	s.market.mu.Lock()
	s.market.seq = max(s.market.seq+1, uint64(now.UnixNano()))
	st.Seq = s.market.seq
	s.market.mu.Unlock()
	raw, err := protocol.Seal(protocol.KindMarketStats, st, s.key)
	if err != nil {
		s.log.Warn("market statistics not signed", "err", err)
		return
	}
	// Publishing runs the topic validator here too, which keeps the record.
	if err := s.topic.Publish(ctx, raw); err != nil && ctx.Err() == nil {
		s.log.Debug("market statistics not published", "err", err)
		s.market.take(raw, "self")
	}
}

// take checks market statistics and keeps them when newer.
func (m *Market) take(raw []byte, source string) error {
	ms, err := protocol.CheckMarketStats(raw, m.clock.Now(), m.trust)
	if err != nil {
		m.metrics.RecordsRejected.WithLabelValues(string(protocol.KindMarketStats), source, protocol.Reason(err)).Inc()
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.latest[ms.Signer]; cur != nil && cur.Seq >= ms.Seq {
		return fmt.Errorf("%w: market statistics seq %d, have %d", protocol.ErrReplay, ms.Seq, cur.Seq)
	}
	if m.latest == nil {
		m.latest = map[peer.ID]*protocol.SignedMarketStats{}
	}
	m.latest[ms.Signer] = ms
	m.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindMarketStats), source).Inc()
	return nil
}

// Validate is the market topic validator: a stale, early or foreign-coordinator record is
// ignored, anything else that fails is rejected.
func (m *Market) Validate(ctx context.Context, from peer.ID, data []byte) p2p.Verdict {
	return p2p.VerdictOf(m.take(data, "gossip"))
}

// RecommendPrice returns the latest market advice for a model (all models when empty) in
// a region (this provider's region when empty; all regions for other roles), from each
// trusted coordinator's statistics, each row naming its coordinator.
func (m *Market) RecommendPrice(model, region string) ([]api.PriceAdvice, error) {
	m.mu.Lock()
	all := make([]*protocol.SignedMarketStats, 0, len(m.latest))
	for _, ms := range m.latest {
		all = append(all, ms)
	}
	m.mu.Unlock()
	if len(all) == 0 {
		return nil, fmt.Errorf("%w: no market statistics received from the coordinator yet: they are published every settlement.market_interval", api.ErrNotFound)
	}
	slices.SortFunc(all, func(a, b *protocol.SignedMarketStats) int { return strings.Compare(a.Coordinator, b.Coordinator) })
	if region == "" && m.role == config.RoleProvider {
		region = m.provider.Region
	}
	model, region = protocol.NormalizeModel(model), protocol.NormalizeRegion(region)
	own := map[string]protocol.MicroUSDC{}
	if m.role == config.RoleProvider {
		if items, err := m.provider.Items(); err == nil {
			for _, it := range items {
				own[it.Model] = it.PricePerGPUHour
			}
		}
		if prices, err := m.ledger.Own.Prices(); err == nil {
			for k, v := range prices {
				own[k] = v
			}
		}
	}
	var out []api.PriceAdvice
	for _, ms := range all {
		for _, mk := range ms.Markets {
			if (model != "" && mk.Model != model) || (region != "" && mk.Region != region) {
				continue
			}
			a := api.PriceAdvice{Market: mk, RecommendedUSDC: mk.Recommended.String(), MedianListUSDC: mk.MedianListPrice.String(),
				MedianLeaseUSDC: mk.MedianLeasePrice.String(), LeasedGPUHours: fmt.Sprintf("%.1f", float64(mk.LeasedGPUSeconds)/3600),
				IssuedAt: ms.IssuedAt, WindowHours: ms.WindowSecs / 3600, CommissionBPS: ms.CommissionBPS, Coordinator: ms.Coordinator}
			if p, ok := own[mk.Model]; ok {
				a.YourPriceUSDC = p.String()
			}
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no market statistics for model %q in region %q", api.ErrNotFound, model, region)
	}
	return out, nil
}
