package jobs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// placementMarket is a renter and three providers of one L4 each, ranked in this order by
// the renter's search: the first refuses this renter, the second does not answer jobs,
// the third takes them. The renter's own offer (it provides too) ranks first.
type placementMarket struct {
	rn                *renter
	refuses, mute, ok *provider
}

func newPlacementMarket(t *testing.T) *placementMarket {
	t.Helper()
	net := newTestNet(t)
	_, coord := newKey(t)
	rnPeer := net.peer(t)
	mk := func(serve bool, edit ...func(*Deps)) *provider {
		pv := newProvider(t, net.peer(t), []bench.SimulatedGPU{{Model: "L4-24GB"}}, edit...)
		if serve {
			pv.serve()
		}
		return pv
	}
	pm := &placementMarket{
		refuses: mk(true, func(d *Deps) { d.Jobs.BlockedRenters = []string{rnPeer.ID.String()} }),
		mute:    mk(false),
		ok:      mk(true),
	}
	pm.rn = newRenter(t, rnPeer, pm.ok.clk)
	own := &protocol.SignedOffer{Signer: rnPeer.ID, Offer: protocol.Offer{ExpiresAt: t0.Add(time.Hour), GPUs: []protocol.OfferGPUs{{Model: "L4-24GB", Count: 1}}}}
	for _, so := range []*protocol.SignedOffer{own, pm.refuses.pub.offer, pm.mute.pub.offer, pm.ok.pub.offer} {
		pm.rn.knows(so, coord)
	}
	net.connect(t)
	return pm
}

func (pm *placementMarket) request() api.JobRequest {
	return api.JobRequest{Model: "l4-24gb ", GPUs: 1, MaxSeconds: 60, Image: "registry.example.org/job:1"}
}

func outcomes(pl *api.Placement) []string {
	var out []string
	for _, a := range pl.Attempts {
		out = append(out, a.Outcome)
	}
	return out
}

// TestPlacementPassesOverOffers: a job asked for by model goes to the best offer that
// takes it: one that refuses and one that does not answer pass it on, the renter's own
// offer is never proposed, and the answer says who took it and what happened before.
func TestPlacementPassesOverOffers(t *testing.T) {
	pm := newPlacementMarket(t)
	v, err := pm.rn.ProposeJob(context.Background(), pm.request())
	if err != nil {
		t.Fatal(err)
	}
	pl := v.Placement
	switch {
	case v.Peer != pm.ok.peer.ID.String() || pm.ok.RunningJobs() != 1:
		t.Fatalf("the job went to %s", v.Peer)
	case pl == nil || !slices.Equal(outcomes(pl), []string{"refused", "unreachable", "accepted"}):
		t.Fatalf("attempts %v", outcomes(pl))
	case pl.Matched != 3 || pl.Tries != api.DefaultTries || pl.Search != "model L4-24GB, 1 GPU(s) or more":
		t.Fatalf("placement %d matched of %q, %d tries", pl.Matched, pl.Search, pl.Tries)
	case !strings.Contains(pl.Attempts[0].Error, "is blocked by this provider") || pl.Attempts[1].Provider != pm.mute.peer.ID.String():
		t.Fatalf("what the passed-over offers did: %+v", pl.Attempts[:2])
	case !strings.HasPrefix(pl.Chosen, pm.ok.peer.ID.String()+" took the job: ranked 3rd of 3") || !strings.HasSuffix(pl.Chosen, "2 offer(s) ranked above it did not take it"):
		t.Fatalf("chosen: %q", pl.Chosen)
	}
	f := pm.rn.offers.searches[0]
	if f.Model != "L4-24GB" || f.MinGPUs != 1 || f.Sort != "merit" {
		t.Fatalf("searched %+v", f)
	}
}

// TestPlacementStops: placement gives up after req.Tries offers (a conflict naming each
// attempt), and at once on a job leased that did not start (it may have run); a request
// that does not hold or matches no offer is refused before anyone is asked.
func TestPlacementStops(t *testing.T) {
	pm := newPlacementMarket(t)
	req := pm.request()
	req.Tries = 2
	_, err := pm.rn.ProposeJob(context.Background(), req)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "no provider took the job: 3 offer(s) match model L4-24GB, 1 GPU(s) or more; tried 2 (at most 2)") ||
		!strings.Contains(err.Error(), pm.refuses.peer.ID.String()+"/L4-24GB (1st) refused") {
		t.Fatalf("two tries: %v", err)
	}
	if jobs, _ := pm.ok.ledger.Jobs(); len(jobs) != 0 {
		t.Fatal("an offer past the tries was proposed the job")
	}

	pm.refuses.cfg.BlockedRenters = nil
	pm.refuses.rt.startErr = errors.New("containerd gone")
	_, err = pm.rn.ProposeJob(context.Background(), pm.request())
	if err == nil || !strings.Contains(err.Error(), "(1st) failed") || !strings.Contains(err.Error(), "containerd gone") {
		t.Fatalf("a job leased that did not start: %v", err)
	}
	if jobs, _ := pm.ok.ledger.Jobs(); len(jobs) != 0 {
		t.Fatal("a job that may have run was proposed again elsewhere")
	}

	searches := len(pm.rn.offers.searches)
	for name, edit := range map[string]func(*api.JobRequest){
		"tries above the most":  func(r *api.JobRequest) { r.Tries = api.MaxTries + 1 },
		"a tier that is none":   func(r *api.JobRequest) { r.Tier = "gold" },
		"a maximum price":       func(r *api.JobRequest) { r.MaxPrice = "one dollar" },
		"a job of no duration":  func(r *api.JobRequest) { r.MaxSeconds = 0 },
		"an unreadable archive": func(r *api.JobRequest) { r.Image, r.ImageArchive = "", "/nonexistent/image.tar" },
	} {
		r := pm.request()
		edit(&r)
		if _, err := pm.rn.ProposeJob(context.Background(), r); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%s: %v, want an invalid request", name, err)
		}
	}
	if len(pm.rn.offers.searches) != searches {
		t.Fatal("a request that does not hold was searched for")
	}
	r := pm.request()
	r.Model = "H100-80GB"
	if _, err := pm.rn.ProposeJob(context.Background(), r); !errors.Is(err, api.ErrNotFound) || !strings.Contains(err.Error(), "no live, certified offer matches model H100-80GB") {
		t.Fatalf("no offer of the model: %v", err)
	}
}

// TestPlacementSkipsStaleOffers: an offer the search listed but that is no longer live
// when its turn comes is passed over without being proposed.
func TestPlacementSkipsStaleOffers(t *testing.T) {
	pm := newPlacementMarket(t)
	pm.rn.offers.byPeer[pm.refuses.peer.ID].Offer.ExpiresAt = t0
	delete(pm.rn.offers.byPeer, pm.mute.peer.ID)
	v, err := pm.rn.ProposeJob(context.Background(), pm.request())
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(v.Placement); !slices.Equal(got, []string{"unreachable", "unreachable", "accepted"}) ||
		v.Placement.Attempts[0].Error != "its offer is no longer live" {
		t.Fatalf("attempts %+v", v.Placement.Attempts)
	}
	if jobs, _ := pm.refuses.ledger.Jobs(); len(jobs) != 0 {
		t.Fatal("an expired offer's provider was proposed the job")
	}
}

// TestPlacementPassesOverAStartThatNeverComes: a provider that leases the job and does not
// start it (its pull never ends) holds the request only until the renter's start
// deadline: the renter cancels the job there, which then never starts, gets its hold back
// at once, and the next offer runs the job.
func TestPlacementPassesOverAStartThatNeverComes(t *testing.T) {
	net := newTestNet(t)
	coordKey, coord := newKey(t)
	trust := func(d *Deps) { d.Trusted = []peer.ID{coord} }
	stalls := newProvider(t, net.peer(t), []bench.SimulatedGPU{{Model: "L4-24GB"}}, trust)
	ok := newProvider(t, net.peer(t), []bench.SimulatedGPU{{Model: "L4-24GB"}}, trust)
	stalls.rt.pullGate = make(chan struct{})
	stalls.serve()
	ok.serve()
	rn := newRenter(t, net.peer(t), ok.clk)
	rn.escrow.coordinator = coordKey
	rn.knows(stalls.pub.offer, coord)
	rn.knows(ok.pub.offer, coord)
	net.connect(t)

	type result struct {
		v   api.JobView
		err error
	}
	done := make(chan result, 1)
	waits, fire := make(chan time.Duration, 2), make(chan time.Time)
	var timers atomic.Int32
	rn.startTimer = func(d time.Duration) <-chan time.Time {
		waits <- d
		if timers.Add(1) == 1 { // the first offer's deadline passes; the second starts at once
			return fire
		}
		return nil
	}
	go func() {
		v, err := rn.ProposeJob(context.Background(), api.JobRequest{Model: "L4-24GB", GPUs: 1, MaxSeconds: 600, Image: "registry.example.org/job:1"})
		done <- result{v, err}
	}()
	if d := <-waits; d != 7*time.Minute {
		t.Fatalf("the renter waits %s for a registry image's start, want 2 minutes and 5 for the pull", d)
	}
	eventually(t, "the job leased at the stalling provider", func() bool { j, _ := stalls.ledger.Jobs(); return len(j) == 1 })
	close(fire) // the deadline passes
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the renter still waits for a start past its deadline")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	pl := res.v.Placement
	if res.v.Peer != ok.peer.ID.String() || !slices.Equal(outcomes(pl), []string{"not started", "accepted"}) ||
		!strings.Contains(pl.Attempts[0].Error, "the provider did not start the job in time") {
		t.Fatalf("the job went to %s after %+v", res.v.Peer, pl.Attempts)
	}
	stalled, _ := stalls.ledger.Jobs()
	if len(stalled) != 1 || stalled[0].State != ledger.JobFailed || stalled[0].Error != "cancelled by the renter before it started" {
		t.Fatalf("the stalling provider's job after the renter's cancel: %+v", stalled)
	}
	rn.escrow.mu.Lock()
	released := slices.Clone(rn.escrow.released)
	rn.escrow.mu.Unlock()
	if !slices.Equal(released, []string{stalled[0].ID}) {
		t.Fatalf("holds given back before the next offer: %v, want the stalled job's", released)
	}
	close(stalls.rt.pullGate) // the pull ends after all: the cancelled job does not start
	eventually(t, "the cancelled job's GPU free again", func() bool { return stalls.RunningJobs() == 0 })
	if _, started := stalls.rt.spec(stalled[0].ID); started {
		t.Fatal("the provider started a job its renter cancelled before the start")
	}
	if a := stalls.ReleaseAnswer(stalled[0].ID); !a.Release {
		t.Fatalf("the provider keeps the hold of a job cancelled before its start: %+v", a)
	}
}

// TestPlacementPassesOverUnbenchmarkedOffers: an offer no fresh benchmark attestation
// vouches for is never proposed a job placed by model; when nothing else matches, the
// answer says which offers were passed over and why.
func TestPlacementPassesOverUnbenchmarkedOffers(t *testing.T) {
	pm := newPlacementMarket(t)
	for i := range pm.rn.offers.rows {
		pm.rn.offers.rows[i].Unbenchmarked = "no benchmark attestation"
	}
	_, err := pm.rn.ProposeJob(context.Background(), pm.request())
	if !errors.Is(err, api.ErrNotFound) || !strings.Contains(err.Error(), "3 offer(s) passed over without a fresh benchmark attestation: "+
		pm.refuses.peer.ID.String()+"/L4-24GB: no benchmark attestation;") {
		t.Fatalf("a placement among unbenchmarked offers only: %v", err)
	}
	for _, pv := range []*provider{pm.refuses, pm.ok} {
		if jobs, _ := pv.ledger.Jobs(); len(jobs) != 0 {
			t.Fatal("an unbenchmarked offer was proposed the job")
		}
	}
}
