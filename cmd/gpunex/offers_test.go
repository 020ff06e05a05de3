package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpunex/gpunex/node/api"
)

// TestOffersSearchUnbenchmarked: `gpunex offers search --unbenchmarked` asks the node for the
// offers no fresh benchmark attestation vouches for and prints why each is one; without it,
// an empty result says such offers were left out.
func TestOffersSearchUnbenchmarked(t *testing.T) {
	q, err := offerSearch{model: "H100-80GB", unbenchmarked: true}.query()
	if err != nil || q.Get("unbenchmarked") != "true" {
		t.Fatalf("query %v: %v", q, err)
	}
	if q, _ := (offerSearch{}).query(); q.Has("unbenchmarked") {
		t.Fatalf("a plain search asks for unbenchmarked offers: %v", q)
	}
	rows := []api.OfferRow{
		{ID: "12D3KooWA/H100-80GB", Model: "H100-80GB", GPUs: 8},
		{ID: "12D3KooWB/H100-80GB", Model: "H100-80GB", GPUs: 8, Unbenchmarked: "offers 8 x H100-80GB, its benchmark attestation certifies 6"},
	}
	var out bytes.Buffer
	if err := printOffers(&out, rows, false, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "unbenchmarked 12D3KooWB/H100-80GB: offers 8 x H100-80GB, its benchmark attestation certifies 6\n") ||
		strings.Contains(out.String(), "unbenchmarked 12D3KooWA") {
		t.Fatalf("output:\n%s", out.String())
	}
	out.Reset()
	printOffers(&out, nil, false, false)
	if !strings.Contains(out.String(), "--unbenchmarked lists them") {
		t.Fatalf("an empty search: %q", out.String())
	}
}
