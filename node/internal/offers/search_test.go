package offers

import (
	"testing"

	"github.com/gpunex/gpunex/node/api"
)

func TestSortRows(t *testing.T) {
	score := func(v int) *int { return &v }
	rows := []api.OfferRow{
		{ID: "a", PriceMicroUSDC: 2_000_000, PlacementMicroUSDC: 1_700_000, Score: score(95), Bench: &api.RowBench{PerfScore: 100}},
		{ID: "b", PriceMicroUSDC: 1_800_000, PlacementMicroUSDC: 1_800_000, Score: score(70)},
		{ID: "c", PriceMicroUSDC: 1_000_000, PlacementMicroUSDC: 1_000_000, Bench: &api.RowBench{PerfScore: 40}},
	}
	Rank(rows)
	for sortBy, want := range map[string]string{"placement": "cab", "price": "cba", "score": "abc", "perf": "acb", "": "acb"} {
		f := api.SearchFilter{Sort: sortBy}
		SortRows(f, rows)
		got := ""
		for _, r := range rows {
			got += r.ID
		}
		if got != want {
			t.Errorf("sort %q: %s; want %s", sortBy, got, want)
		}
	}
}
