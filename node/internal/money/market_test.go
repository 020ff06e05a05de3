package money

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// Market statistics and the price recommendation (docs/settlement.md, section 8).

// marketDesk is a coordinator whose book lists H100s in eu-west (three GPUs, at 2.00 and
// 3.00) and L4s in us-east (four at 0.50), with three H100 jobs of 30 minutes on 2 GPUs
// charged at 3.60 and one whose receipt is still pending.
func marketDesk(t *testing.T) *jobDesk {
	t.Helper()
	d := newJobDesk(t)
	other, east := newParty(), newParty()
	d.offers.certify(d.provider.id, "eu-west", protocol.OfferGPUs{Model: "H100-80GB", Count: 2, PricePerGPUHour: 2_000_000})
	d.offers.certify(other.id, "eu-west", protocol.OfferGPUs{Model: "H100-80GB", Count: 1, PricePerGPUHour: 3_000_000})
	d.offers.certify(east.id, "us-east", protocol.OfferGPUs{Model: "L4-24GB", Count: 4, PricePerGPUHour: 500_000})
	for range 3 {
		j := d.job(t, 1800, 1790)
		j.countersignReceipt(t)
		d.net.report(t, d.provHost, j.report())
	}
	pending := d.job(t, 1800, 600)
	d.net.report(t, d.provHost, pending.report())
	return d
}

// TestMarketStatistics: per model and region, the supply listed, the leases charged in
// the window, the utilisation and the recommended price: the median lease price with 3
// leases or more, else the median listed price, moved from -15% (idle) to +15% (full).
func TestMarketStatistics(t *testing.T) {
	d := marketDesk(t)
	st, err := d.market.compute(d.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Markets) != 2 || st.CommissionBPS != 1000 || st.WindowSecs != 7*24*3600 || !st.ExpiresAt.Equal(d.clock.Now().Add(3*time.Hour)) {
		t.Fatalf("statistics: %+v", st)
	}
	h100, l4 := st.Markets[0], st.Markets[1]
	if h100.Model != "H100-80GB" || h100.Region != "eu-west" || h100.ListedGPUs != 3 || h100.ListedProviders != 2 || h100.MedianListPrice != 2_000_000 ||
		h100.Leases != 3 || h100.LeasedGPUSeconds != 3*2*1800 || h100.MedianLeasePrice != testPrice || h100.Utilisation != 5 {
		t.Fatalf("H100 in eu-west: %+v", h100)
	}
	// 3.60 x (850 + 3 x 5 / 10) / 1000
	if h100.Recommended != 3_063_600 || h100.Basis != "median of recent lease prices" {
		t.Fatalf("H100 recommendation: %s (%s)", h100.Recommended, h100.Basis)
	}
	// No lease: the median listed price, idle: 0.50 x 0.85
	if l4.Model != "L4-24GB" || l4.Region != "us-east" || l4.Leases != 0 || l4.Recommended != 425_000 {
		t.Fatalf("L4 in us-east: %+v", l4)
	}
	// Leases older than the window are not counted.
	d.clock.Advance(8 * 24 * time.Hour)
	if st, _ := d.market.compute(d.clock.Now()); st.Markets[0].Leases != 0 {
		t.Fatalf("%d leases counted past the window", st.Markets[0].Leases)
	}
}

// TestMarketPublished: the coordinator signs and publishes its statistics; every node
// that trusts it keeps the newest and advises from it, with a provider's own price beside;
// an older or untrusted record is refused.
func TestMarketPublished(t *testing.T) {
	d := marketDesk(t)
	d.market.publish(context.Background())
	if len(d.topic.published) != 1 {
		t.Fatalf("%d records published", len(d.topic.published))
	}
	first := d.topic.published[0]

	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	l.Provider.SetPrice("H100-80GB", 2_500_000)
	cfg := config.Defaults(config.RoleProvider) // in eu-west
	provider := NewMarket(Deps{Clock: d.clock, Metrics: d.metrics, Ledger: storesOf(l), Config: cfg}, []peer.ID{d.id})
	if _, err := provider.RecommendPrice("", ""); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("advice before any statistics: %v", err)
	}
	if v := provider.Validate(context.Background(), d.id, first); v != p2p.VerdictOf(nil) {
		t.Fatalf("the coordinator's record: %v", v)
	}
	adv, err := provider.RecommendPrice("h100-80gb", "")
	if err != nil || len(adv) != 1 || adv[0].Region != "eu-west" || adv[0].RecommendedUSDC != "3.0636" || adv[0].YourPriceUSDC != "2.50" ||
		adv[0].LeasedGPUHours != "3.0" || adv[0].Coordinator != d.id.String() {
		t.Fatalf("advice: %+v %v", adv, err)
	}
	if _, err := provider.RecommendPrice("L4-24GB", ""); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a provider in eu-west is advised on us-east by default: %v", err)
	}
	if all, _ := renterMarket(t, d, first).RecommendPrice("", ""); len(all) != 2 {
		t.Fatalf("a renter sees %d markets, want both regions", len(all))
	}

	d.clock.Advance(time.Minute)
	d.market.publish(context.Background())
	newer := d.topic.published[1]
	if v := provider.Validate(context.Background(), d.id, newer); v != p2p.VerdictOf(nil) {
		t.Fatalf("the newer record: %v", v)
	}
	if v := provider.Validate(context.Background(), d.id, first); v == p2p.VerdictOf(nil) {
		t.Fatal("an older record replaced the newer")
	}
	stranger := newCoordinator(t)
	stranger.market.publish(context.Background())
	if v := provider.Validate(context.Background(), stranger.id, stranger.topic.published[0]); v == p2p.VerdictOf(nil) {
		t.Fatal("an untrusted coordinator's statistics were kept")
	}
}

// renterMarket is a renter's market book that took the record.
func renterMarket(t *testing.T, d *jobDesk, raw []byte) *Market {
	t.Helper()
	m := NewMarket(Deps{Clock: d.clock, Metrics: d.metrics, Ledger: storesOf(d.ledger), Config: config.Defaults(config.RoleRenter)}, []peer.ID{d.id})
	if err := m.take(raw, "test"); err != nil {
		t.Fatal(err)
	}
	return m
}
