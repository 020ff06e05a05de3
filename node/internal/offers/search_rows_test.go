package offers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/protocol"
)

// TestPlacementBonus: the examples of docs/protocols/onboarding.md, section 13: Enterprise
// gets 10%, each whole 30-day month of commitment left 0.25%, up to 24 months.
func TestPlacementBonus(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		tier   string
		months int
		price  protocol.MicroUSDC
		bp     int64
		place  protocol.MicroUSDC
	}{
		{protocol.TierEnterprise, 24, 2_100_000, 1600, 1_764_000},
		{protocol.TierCommunity, 6, 1_400_000, 150, 1_379_000},
		{protocol.TierEnterprise, 36, 1_000_000, 1600, 840_000},
		{protocol.TierCommunity, 0, 1_000_000, 0, 1_000_000},
		{protocol.TierCommunity, -3, 1_000_000, 0, 1_000_000}, // commitment over
	} {
		end := now.Add(time.Duration(c.months)*30*24*time.Hour + time.Hour)
		bp := PlacementBonusBP(c.tier, end, now)
		if bp != c.bp || c.price*protocol.MicroUSDC(10000-bp)/10000 != c.place {
			t.Errorf("%s, %d months: bonus %d bp; want %d (placement %s)", c.tier, c.months, bp, c.bp, c.place)
		}
	}
}

// certifiedOffer is a verified offer as the book holds it: certified by coord at tier, with
// commitment months left, for the GPUs given.
func certifiedOffer(p, coord peer.ID, tier string, months int, region string, gpus ...protocol.OfferGPUs) *protocol.SignedOffer {
	issued := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	return &protocol.SignedOffer{Signer: p,
		Offer: protocol.Offer{Provider: p.String(), Seq: 1, IssuedAt: issued, ExpiresAt: issued.Add(time.Hour), Region: region, GPUs: gpus},
		Cert: &protocol.SignedCertificate{Signer: coord, Certificate: protocol.Certificate{Tier: tier,
			CommitmentEnd: issued.Add(time.Duration(months)*30*24*time.Hour + time.Hour)}}}
}

func ids(rows []api.OfferRow) string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Model+"@"+r.Region)
	}
	return strings.Join(out, " ")
}

// TestRowsFilter: a search row per model of an offer, kept when it matches every filter
// (model and region as a renter types them, price, GPU count, egress, tier, certifying
// coordinator); an offer delisted by its own attestation gives none; the benchmark summary
// leaves out the GPUs under a threshold.
func TestRowsFilter(t *testing.T) {
	_, p := recordtest.NewKey()
	_, coord := recordtest.NewKey()
	so := certifiedOffer(p, coord, protocol.TierEnterprise, 12, "eu-west",
		protocol.OfferGPUs{Model: "L4-24GB", Count: 4, PricePerGPUHour: 1_000_000},
		protocol.OfferGPUs{Model: "A100-80GB", Count: 1, PricePerGPUHour: 3_000_000})
	for _, c := range []struct {
		f    api.SearchFilter
		want string
	}{
		{api.SearchFilter{}, "L4-24GB@eu-west A100-80GB@eu-west"},
		{api.SearchFilter{Model: "l4-24gb"}, "L4-24GB@eu-west"},
		{api.SearchFilter{Region: "EU-West"}, "L4-24GB@eu-west A100-80GB@eu-west"},
		{api.SearchFilter{Region: "us-east"}, ""},
		{api.SearchFilter{MaxPrice: 2_000_000}, "L4-24GB@eu-west"},
		{api.SearchFilter{MinGPUs: 2}, "L4-24GB@eu-west"},
		{api.SearchFilter{Egress: true}, ""},
		{api.SearchFilter{Tier: protocol.TierCommunity}, ""},
		{api.SearchFilter{Tier: protocol.TierEnterprise, Coordinator: coord.String()}, "L4-24GB@eu-west A100-80GB@eu-west"},
		{api.SearchFilter{Coordinator: p.String()}, ""},
	} {
		if got := ids(Rows(c.f, so)); got != c.want {
			t.Errorf("%+v: %q; want %q", c.f, got, c.want)
		}
	}
	rows := Rows(api.SearchFilter{Model: "L4-24GB"}, so)
	if r := rows[0]; r.ID != p.String()+"/L4-24GB" || r.Tier != protocol.TierEnterprise || r.Coordinator != coord.String() ||
		r.PriceMicroUSDC != 1_000_000 || r.PlacementMicroUSDC != 870_000 { // 1000 + 12 x 25 bp
		t.Fatalf("the row: %+v", r)
	}
	so.Attest = &protocol.SignedAttestation{Attestation: protocol.Attestation{GPUs: []protocol.GPUBenchmark{
		{UUID: "a", Model: "L4-24GB", PerfScore: 90, FP32TFLOPS: 30},
		{UUID: "b", Model: "L4-24GB", PerfScore: 70, FP32TFLOPS: 20},
		{UUID: "c", Model: "L4-24GB", PerfScore: 10, FP32TFLOPS: 3, Below: "fp32 under 80%"},
	}}}
	if b := Rows(api.SearchFilter{Model: "L4-24GB"}, so)[0].Bench; b == nil || len(b.GPUs) != 2 || b.PerfScore != 80 || b.FP32TFLOPS != 25 {
		t.Fatalf("the benchmark summary: %+v", b)
	}
	so.Attest.HostBelow = "storage under the minimum"
	if rows := Rows(api.SearchFilter{}, so); len(rows) != 0 {
		t.Fatalf("a delisted host gave %d rows", len(rows))
	}
}

// TestRankMerit: a row's merit grows with its score and performance and falls with its price
// against the market's median for the same model and region, so that the default order puts
// the best value first.
func TestRankMerit(t *testing.T) {
	score := func(v int) *int { return &v }
	rows := []api.OfferRow{
		{ID: "cheap", Model: "L4-24GB", Region: "eu-west", PriceMicroUSDC: 800_000, PlacementMicroUSDC: 800_000, Score: score(95)},
		{ID: "median", Model: "L4-24GB", Region: "eu-west", PriceMicroUSDC: 1_000_000, PlacementMicroUSDC: 1_000_000, Score: score(95)},
		{ID: "dear", Model: "L4-24GB", Region: "eu-west", PriceMicroUSDC: 2_000_000, PlacementMicroUSDC: 2_000_000, Score: score(95)},
		{ID: "unreliable", Model: "L4-24GB", Region: "eu-west", PriceMicroUSDC: 1_000_000, PlacementMicroUSDC: 1_000_000, Score: score(50)},
		{ID: "alone", Model: "H100-80GB", Region: "eu-west", PriceMicroUSDC: 9_000_000, PlacementMicroUSDC: 9_000_000},
	}
	Rank(rows)
	if r := rows[1].Rank; r.PriceVsMarket != 1 || r.Merit != 0.722 { // 0.95² x 0.8
		t.Fatalf("the median row: %+v", r)
	}
	if r := rows[4].Rank; r.PriceVsMarket != 1 || r.Score != 90 || r.Merit != 0.648 { // no score: the prior, 0.9² x 0.8
		t.Fatalf("a row alone in its market, unscored: %+v", r)
	}
	SortRows(api.SearchFilter{}, rows)
	var order []string
	for _, r := range rows {
		order = append(order, r.ID)
	}
	if got := strings.Join(order, " "); got != "cheap median alone dear unreliable" {
		t.Fatalf("by merit: %s", got)
	}
}

// scoreBook gives each provider's score by one coordinator.
type scoreBook map[peer.ID]*protocol.SignedScore

func (s scoreBook) Score(p, by peer.ID) *protocol.SignedScore {
	if sc := s[p]; sc != nil && sc.Signer == by {
		return sc
	}
	return nil
}

func (s scoreBook) Records(providers []string) [][]byte {
	var out [][]byte
	for p, sc := range s {
		if len(providers) == 0 || slices.Contains(providers, p.String()) {
			out = append(out, sc.Raw)
		}
	}
	return out
}

func (s scoreBook) Take([]byte, string) error { return errors.New("a fixed score book takes nothing") }

// TestSearchFromTheBook: a node alone (no DHT peers) searches the offers its book holds:
// live ones only, filtered, each row with the score of the coordinator that certified it,
// best merit first; an offer's record is found by its ID.
func TestSearchFromTheBook(t *testing.T) {
	w := newWorld(t)
	a, b, gone := w.certified(), w.certified(), w.certified()
	_, stranger := recordtest.NewKey()
	w.cat.scores = scoreBook{
		a.id: {Signer: testCoordinatorID, ScoreRecord: protocol.ScoreRecord{Score: 97}},
		b.id: {Signer: stranger, ScoreRecord: protocol.ScoreRecord{Score: 99}}, // not the certifying coordinator's
	}
	for _, raw := range [][]byte{
		w.offer(a, 1, 1_200_000, nil),
		w.offer(b, 1, 1_000_000, func(o *protocol.Offer) { o.Region = "us-east" }),
		w.offer(gone, 1, 1_000_000, func(o *protocol.Offer) { o.Withdrawn, o.GPUs = "outside availability window", nil }),
	} {
		if _, _, err := w.book.Accept(raw, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	// These offers carry no benchmark attestation: only a search that asks for such offers
	// lists them (TestSearchPassesOverUnbenchmarkedOffers).
	rows, err := w.cat.Search(context.Background(), api.SearchFilter{Model: "L4-24GB", Unbenchmarked: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Provider != a.id.String() || rows[0].Score == nil || *rows[0].Score != 97 || rows[1].Score != nil {
		t.Fatalf("search rows: %+v", rows)
	}
	if rows, _ := w.cat.Search(context.Background(), api.SearchFilter{Region: "us-east", Unbenchmarked: true}); len(rows) != 1 || rows[0].Provider != b.id.String() {
		t.Fatalf("rows in us-east: %+v", rows)
	}
	so, err := w.cat.OfferRecord(context.Background(), protocol.OfferID(a.id, "l4-24gb"))
	if err != nil || so.Signer != a.id {
		t.Fatalf("the record of a's offer: %v", err)
	}
	if _, err := w.cat.OfferRecord(context.Background(), protocol.OfferID(a.id, "H100-80GB")); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a model the provider does not offer: %v", err)
	}
	if so, err := w.cat.OfferRecord(context.Background(), protocol.OfferID(gone.id, "L4-24GB")); err != nil || so.Offer.Withdrawn == "" {
		t.Fatalf("a withdrawn offer's record shows why: %v", err)
	}
}
