package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// place runs a job asked for by model (no provider, no offer named): it searches the offers
// of that model matching the request (region, tier, egress, maximum price, at least as
// many GPUs), best merit first as `gpunex offers search` orders them, and proposes the job
// to each in turn until one takes it, req.Tries of them at most. A provider that refuses or
// does not answer passes the job to the next offer; the renter's own mistakes (a request
// that does not hold, an image archive it cannot read), a job that was leased but did not
// start, and a request given up by its caller stop at once. The started job's view says
// which offer took it, why it ranked there, and why those tried before did not.
func (r *Renter) place(ctx context.Context, req api.JobRequest) (api.JobView, error) {
	tries := req.Tries
	switch {
	case tries == 0:
		tries = api.DefaultTries
	case tries < 1 || tries > api.MaxTries:
		return api.JobView{}, api.Invalid(fmt.Errorf("tries %d: from 1 to %d", req.Tries, api.MaxTries))
	}
	f := api.SearchFilter{Model: protocol.NormalizeModel(req.Model), Region: protocol.NormalizeRegion(req.Region), Tier: req.Tier,
		Egress: req.Egress, MinGPUs: req.GPUs, Sort: "merit"}
	switch f.Tier {
	case "", protocol.TierCommunity, protocol.TierEnterprise:
	default:
		return api.JobView{}, api.Invalid(fmt.Errorf("tier %q: %s or %s", f.Tier, protocol.TierCommunity, protocol.TierEnterprise))
	}
	price := protocol.MicroUSDC(1) // any valid price, to check the request before the search
	if req.MaxPrice != "" {
		var err error
		if f.MaxPrice, err = protocol.ParseUSDC(req.MaxPrice); err != nil {
			return api.JobView{}, api.Invalid(fmt.Errorf("max price: %w", err))
		}
		price = f.MaxPrice
	}
	img, err := openArchive(req.ImageArchive)
	if err != nil {
		return api.JobView{}, err
	}
	defer img.Close()
	release, err := r.openInputs(req) // data in: hashed once for every offer (inputsend.go)
	if err != nil {
		return api.JobView{}, err
	}
	defer release()
	// The proposal as every provider will get it, checked once before any is asked.
	if _, err := r.seal(r.proposal(req, r.peer.ID, f.Model, price, img)); err != nil {
		return api.JobView{}, err
	}
	rows, err := r.offers.Search(ctx, f)
	if err != nil {
		return api.JobView{}, err
	}
	pl := &api.Placement{Search: searchText(f), Tries: tries}
	var candidates []api.OfferRow
	for _, row := range rows {
		if row.Provider != r.peer.ID.String() { // this node's own offer, when it provides
			candidates = append(candidates, row)
		}
	}
	pl.Matched = len(candidates)
	if len(candidates) == 0 {
		return api.JobView{}, fmt.Errorf("%w: no live, certified offer matches %s (gpunex offers search lists what is offered)", api.ErrNotFound, pl.Search)
	}
	for i, row := range candidates[:min(tries, len(candidates))] {
		a := attempt(row, i+1, len(candidates))
		var so *protocol.SignedOffer
		if id, err := peer.Decode(row.Provider); err == nil {
			so, _ = r.offers.Get(id)
		}
		if so == nil || !live(so, r.clock.Now()) {
			a.Outcome, a.Error = "unreachable", "its offer is no longer live"
			pl.Attempts = append(pl.Attempts, a)
			continue
		}
		v, leased, err := r.propose(ctx, req, so, row.Model, img)
		if err == nil {
			a.Outcome = "accepted"
			pl.Attempts = append(pl.Attempts, a)
			pl.Chosen = fmt.Sprintf("%s took the job: %s", row.Provider, a.Why)
			if n := len(pl.Attempts) - 1; n > 0 {
				pl.Chosen += fmt.Sprintf("; %d offer(s) ranked above it did not take it", n)
			}
			v.Placement = pl
			r.log.Info("job placed", "job", v.ID, "provider", row.Provider, "rank", a.Rank, "tried", len(pl.Attempts))
			return v, nil
		}
		a.Outcome, a.Error = "unreachable", err.Error()
		switch {
		case leased:
			a.Outcome = "failed"
		case errors.Is(err, ErrRefused):
			a.Outcome = "refused"
		}
		pl.Attempts = append(pl.Attempts, a)
		r.log.Info("job placement: offer passed over", "offer", row.ID, "rank", a.Rank, "outcome", a.Outcome, "err", err)
		if leased || ctx.Err() != nil || errors.Is(err, api.ErrInvalid) {
			return api.JobView{}, fmt.Errorf("%s: %w", attemptsText(pl), err)
		}
	}
	return api.JobView{}, api.Conflict(fmt.Errorf("no provider took the job: %s", attemptsText(pl)))
}

// attempt describes offer row, ranked rank of n, before it is proposed the job.
func attempt(row api.OfferRow, rank, n int) api.PlacementAttempt {
	t := row.Rank
	return api.PlacementAttempt{
		Rank: rank, Offer: row.ID, Provider: row.Provider, PriceUSDC: row.PriceUSDC, Score: t.Score, Tier: row.Tier,
		Region: row.Region, Merit: t.Merit,
		Why: fmt.Sprintf("ranked %s of %d by merit %.4f (score %d, perf %.2f, bonus %.2f, price %s USDC per GPU-hour = %.2f x the market), tier %s, region %s",
			api.Ordinal(rank), n, t.Merit, t.Score, t.Perf, t.Bonus, row.PriceUSDC, t.PriceVsMarket, row.Tier, row.Region),
	}
}

// attemptsText says what a placement searched and tried, for an error.
func attemptsText(pl *api.Placement) string {
	parts := make([]string, len(pl.Attempts))
	for i, a := range pl.Attempts {
		parts[i] = fmt.Sprintf("%s (%s) %s: %s", a.Offer, api.Ordinal(a.Rank), a.Outcome, a.Error)
	}
	return fmt.Sprintf("%d offer(s) match %s; tried %d (at most %d): %s", pl.Matched, pl.Search, len(pl.Attempts), pl.Tries, strings.Join(parts, "; "))
}

// searchText says in words what a placement searches for.
func searchText(f api.SearchFilter) string {
	parts := []string{"model " + f.Model}
	if f.Region != "" {
		parts = append(parts, "region "+f.Region)
	}
	if f.Tier != "" {
		parts = append(parts, "tier "+f.Tier)
	}
	if f.Egress {
		parts = append(parts, "with egress")
	}
	if f.MaxPrice > 0 {
		parts = append(parts, fmt.Sprintf("at most %s USDC per GPU-hour", f.MaxPrice))
	}
	return strings.Join(append(parts, fmt.Sprintf("%d GPU(s) or more", f.MinGPUs)), ", ")
}
