package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/offers"
	"github.com/gpunex/gpunex/protocol"
)

// Offer routes of the local API (docs/api.md): searching the offers, one offer's signed
// record, and a provider's own offer and prices.

func (a *APIServer) offerRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/offers", answer: a.search},
		{pattern: "GET /v1/offers/record", answer: a.offerRecord},
		{pattern: "GET /v1/provider/offer", answer: a.ownOffer},
		{pattern: "POST /v1/provider/price", answer: a.setPrice},
	}
}

func (a *APIServer) search(r *http.Request) (any, error) {
	q := r.URL.Query()
	f := api.SearchFilter{Model: q.Get("model"), Region: q.Get("region"), Sort: q.Get("sort"), Tier: q.Get("tier"), Coordinator: q.Get("coordinator")}
	switch f.Tier {
	case "", protocol.TierCommunity, protocol.TierEnterprise:
	default:
		return nil, api.Invalid(fmt.Errorf("tier %q: %s or %s", f.Tier, protocol.TierCommunity, protocol.TierEnterprise))
	}
	if f.Coordinator != "" {
		id, err := peer.Decode(f.Coordinator)
		if err != nil {
			return nil, api.Invalid(fmt.Errorf("coordinator %q: not a peer ID", f.Coordinator))
		}
		f.Coordinator = id.String()
	}
	switch q.Get("egress") {
	case "", "false", "0":
	case "true", "1":
		f.Egress = true
	default:
		return nil, api.Invalid(fmt.Errorf("egress %q: true or false", q.Get("egress")))
	}
	switch q.Get("unbenchmarked") {
	case "", "false", "0":
	case "true", "1":
		f.Unbenchmarked = true
	default:
		return nil, api.Invalid(fmt.Errorf("unbenchmarked %q: true or false", q.Get("unbenchmarked")))
	}
	switch f.Sort {
	case "", "merit", "placement", "price", "score", "perf":
	default:
		return nil, api.Invalid(fmt.Errorf("sort %q: merit, placement, price, score or perf", f.Sort))
	}
	if s := q.Get("max_price"); s != "" {
		p, err := protocol.ParseUSDC(s)
		if err != nil {
			return nil, api.Invalid(fmt.Errorf("max_price: %w", err))
		}
		f.MaxPrice = p
	}
	if s := q.Get("min_gpus"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return nil, api.Invalid(fmt.Errorf("min_gpus %q: expected a non-negative integer", s))
		}
		f.MinGPUs = v
	}
	rows, err := a.n.catalogue.Search(r.Context(), f)
	if rows == nil {
		rows = []api.OfferRow{}
	}
	return rows, err
}

func (a *APIServer) offerRecord(r *http.Request) (any, error) {
	id := r.URL.Query().Get("id")
	if _, _, err := protocol.ParseOfferID(id); err != nil {
		return nil, api.Invalid(err)
	}
	so, err := a.n.catalogue.OfferRecord(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return api.OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}

func (a *APIServer) ownOffer(r *http.Request) (any, error) {
	if err := a.providerOnly(); err != nil {
		return nil, err
	}
	so := a.n.publisher.Current()
	if so == nil {
		return nil, fmt.Errorf("%w: no offer published yet", api.ErrNotFound)
	}
	return api.OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}

func (a *APIServer) setPrice(r *http.Request) (any, error) {
	if err := a.providerOnly(); err != nil {
		return nil, err
	}
	// Unlike decodeBody, unknown fields are let through here, as they always were.
	var req api.SetPriceRequest
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 4096)).Decode(&req); err != nil {
		return nil, api.Invalid(fmt.Errorf("request body: %w", err))
	}
	price, err := protocol.ParseUSDC(req.USDC)
	if err != nil {
		return nil, api.Invalid(err)
	}
	so, err := a.n.publisher.SetPrice(r.Context(), req.Model, price)
	if errors.Is(err, offers.ErrUnknownModel) || errors.Is(err, offers.ErrBadPrice) {
		return nil, api.Invalid(err)
	}
	if err != nil {
		return nil, err
	}
	return api.OfferRecordView{Provider: so.Signer.String(), Offer: &so.Offer, Raw: so.Raw}, nil
}
