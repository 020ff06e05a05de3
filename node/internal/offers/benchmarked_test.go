package offers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// attestation signs p's benchmark attestation of L4s, one per kind ("ok", "slow": under
// its threshold, "unmeasured": no figure, as a real GPU whose kernels do not run), run
// against a challenge of the test coordinator issued at challenged.
func (w *world) attestation(p provider, challenged time.Time, kinds ...string) []byte {
	w.t.Helper()
	seal := func(kind protocol.Kind, v any, byCoordinator bool) []byte {
		key := p.key
		if byCoordinator {
			key = testCoordinatorKey
		}
		raw, err := protocol.Seal(kind, v, key)
		if err != nil {
			w.t.Fatal(err)
		}
		return raw
	}
	nonce := strings.Repeat("ab", 16)
	coord := testCoordinatorID.String()
	a := protocol.Attestation{Version: protocol.AttestationVersion, Provider: p.id.String(), Seq: uint64(challenged.Unix()),
		IssuedAt:      challenged.Add(time.Minute),
		Challenge:     seal(protocol.KindChallenge, protocol.Challenge{Version: 1, Coordinator: coord, Provider: p.id.String(), Nonce: nonce, IssuedAt: challenged}, true),
		DriverVersion: "535.129.03", CUDAVersion: "12.2", Storage: protocol.StorageBenchmark{SeqWriteMBps: 500},
		NetworkReceipt: seal(protocol.KindNetworkReceipt, protocol.NetworkReceipt{Version: 1, Coordinator: coord, Provider: p.id.String(), Nonce: nonce,
			MeasuredAt: challenged.Add(30 * time.Second), RTTMilli: 12, RTTSamples: 9, UpMbps: 400, DownMbps: 900, Bytes: 16 << 20, Minimum: protocol.ListingMinimum}, true)}
	for i, kind := range kinds {
		g := protocol.GPUBenchmark{UUID: "GPU-" + string(rune('a'+i)), Model: "L4-24GB", TensorTFLOPS: 100, MemBandwidth: 280}
		switch kind {
		case "slow":
			g.TensorTFLOPS = 50
		case "unmeasured":
			g.TensorTFLOPS, g.MemBandwidth = 0, 0
		}
		g.PerfScore = protocol.FirstModels().Score(g)
		g.Below = protocol.FirstModels().Shortfall(g)
		a.GPUs = append(a.GPUs, g)
	}
	return seal(protocol.KindAttestation, a, false)
}

// TestSearchPassesOverUnbenchmarkedOffers: a renter's search lists only offers a fresh
// benchmark attestation vouches for, for every GPU they offer. An offer without one, one
// offering more GPUs than its attestation certifies, and one whose attestation expired
// since it was received are passed over, unless the renter asks for them: then each says
// why. A GPU attested without figures (not measured) still counts.
func TestSearchPassesOverUnbenchmarkedOffers(t *testing.T) {
	w := newWorld(t)
	vouched, unmeasured, none, more, ageing := w.certified(), w.certified(), w.certified(), w.certified(), w.certified()
	now := w.clock.Now()
	hour := func(o *protocol.Offer) { o.ExpiresAt = o.IssuedAt.Add(time.Hour) }
	with := func(a []byte) func(o *protocol.Offer) { return func(o *protocol.Offer) { hour(o); o.Attestation = a } }
	for _, raw := range [][]byte{
		w.offer(vouched, 1, 1_000_000, with(w.attestation(vouched, now.Add(-time.Hour), "ok", "ok"))),
		w.offer(unmeasured, 1, 1_000_000, with(w.attestation(unmeasured, now.Add(-time.Hour), "ok", "unmeasured"))),
		w.offer(none, 1, 1_000_000, hour),
		w.offer(more, 1, 1_000_000, with(w.attestation(more, now.Add(-time.Hour), "ok", "slow"))),
		w.offer(ageing, 1, 1_000_000, with(w.attestation(ageing, now.Add(-protocol.MaxAttestationAge+time.Minute), "ok", "ok"))),
	} {
		if _, _, err := w.book.Accept(raw, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	w.clock.Advance(2 * time.Minute) // the ageing offer's attestation expires; the offers stay live
	search := func(f api.SearchFilter) map[string]string {
		rows, err := w.cat.Search(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, r := range rows {
			got[r.Provider] = r.Unbenchmarked
		}
		return got
	}
	if got := search(api.SearchFilter{Model: "L4-24GB"}); len(got) != 2 || got[vouched.id.String()] != "" || got[unmeasured.id.String()] != "" {
		t.Fatalf("a renter's search lists %v, want only the two benchmarked offers", got)
	}
	got := search(api.SearchFilter{Model: "L4-24GB", Unbenchmarked: true})
	for p, want := range map[string]string{
		vouched.id.String():    "",
		unmeasured.id.String(): "",
		none.id.String():       "no benchmark attestation",
		more.id.String():       "offers 2 x L4-24GB, its benchmark attestation certifies 1",
		ageing.id.String():     "its benchmark attestation expired at 2026-11-30T09:01:00Z",
	} {
		if reason, ok := got[p]; !ok || reason != want {
			t.Errorf("asked for unbenchmarked offers: %s listed %v with %q, want %q", p, ok, reason, want)
		}
	}
}
