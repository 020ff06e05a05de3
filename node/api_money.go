package node

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpunex/gpunex/node/internal/money"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Money routes of the local API (docs/api.md): wallet, earnings, market advice, payouts.

func (a *APIServer) routeMoney(mux *http.ServeMux) {
	a.route(mux, "GET /v1/wallet/info", func(r *http.Request) (any, error) {
		return a.n.wallet.Info(r.Context(), r.URL.Query().Get("coordinator"))
	})
	a.route(mux, "POST /v1/wallet/init", func(r *http.Request) (any, error) {
		addr, err := a.n.wallet.InitWallet()
		if err != nil {
			return nil, api.Invalid(err)
		}
		return map[string]string{"address": addr}, nil
	})
	a.route(mux, "POST /v1/wallet/deposit", func(r *http.Request) (any, error) {
		var req struct {
			USDC        string `json:"usdc"`
			Coordinator string `json:"coordinator"`
		}
		if err := decodeBody(r, 1024, &req); err != nil {
			return nil, err
		}
		amount, err := protocol.ParseUSDC(req.USDC)
		if err != nil {
			return nil, api.Invalid(err)
		}
		return a.n.wallet.Deposit(r.Context(), amount, req.Coordinator)
	})
	a.route(mux, "POST /v1/wallet/claim", func(r *http.Request) (any, error) {
		var req struct {
			Signature   string `json:"signature"`
			Coordinator string `json:"coordinator"`
		}
		if err := decodeBody(r, 1024, &req); err != nil {
			return nil, err
		}
		return a.n.wallet.ClaimDeposits(r.Context(), req.Signature, req.Coordinator)
	})
	a.route(mux, "POST /v1/wallet/release", func(r *http.Request) (any, error) {
		var req struct {
			Job         string `json:"job"`
			Coordinator string `json:"coordinator"`
		}
		if err := decodeBody(r, 1024, &req); err != nil {
			return nil, err
		}
		if !protocol.ValidJobID(req.Job) {
			return nil, api.Invalid(errors.New("job ID: 16 lower-case hex digits"))
		}
		return a.n.wallet.ReleaseHold(r.Context(), req.Job, req.Coordinator)
	})
	a.route(mux, "GET /v1/wallet/balance", func(r *http.Request) (any, error) {
		return a.n.wallet.Balance(r.Context(), r.URL.Query().Get("coordinator"))
	})
	a.route(mux, "GET /v1/earnings", func(r *http.Request) (any, error) {
		q := r.URL.Query()
		eq := api.EarningsQuery{Period: q.Get("period"), By: q.Get("by")}
		for _, f := range []struct {
			name string
			to   *time.Time
		}{{"from", &eq.From}, {"to", &eq.To}} {
			if v := q.Get(f.name); v != "" {
				t, err := parseDay(v)
				if err != nil {
					return nil, api.Invalid(fmt.Errorf("%s: %w", f.name, err))
				}
				*f.to = t
			}
		}
		return a.n.wallet.Earnings(r.Context(), eq)
	})
	a.route(mux, "GET /v1/market", func(r *http.Request) (any, error) {
		return a.n.market.RecommendPrice(r.URL.Query().Get("model"), r.URL.Query().Get("region"))
	})
	a.route(mux, "POST /v1/payouts/{id}/replan", func(r *http.Request) (any, error) {
		s, err := a.settlement("payouts are run by a coordinator")
		if err != nil {
			return nil, err
		}
		var req struct {
			Providers []string `json:"providers"`
		}
		if err := decodeBody(r, 64<<10, &req); err != nil {
			return nil, err
		}
		return s.Replan(r.Context(), r.PathValue("id"), req.Providers)
	})
	a.route(mux, "GET /v1/disputes", func(r *http.Request) (any, error) {
		s, err := a.settlement("disputes are decided by a coordinator")
		if err != nil {
			return nil, err
		}
		return s.Disputes(r.URL.Query().Get("all") != "")
	})
	a.route(mux, "GET /v1/disputes/{job}", func(r *http.Request) (any, error) {
		s, err := a.settlement("disputes are decided by a coordinator")
		if err != nil {
			return nil, err
		}
		return s.Dispute(r.PathValue("job"))
	})
	a.route(mux, "POST /v1/disputes/{job}/resolve", func(r *http.Request) (any, error) {
		s, err := a.settlement("disputes are decided by a coordinator")
		if err != nil {
			return nil, err
		}
		var req api.ResolveRequest
		if err := decodeBody(r, 4096, &req); err != nil {
			return nil, err
		}
		return s.ResolveDispute(r.PathValue("job"), req)
	})
	a.route(mux, "POST /v1/payouts/run", func(r *http.Request) (any, error) {
		var o api.PayoutRunOptions
		if err := decodeBody(r, 1024, &o); err != nil {
			return nil, err
		}
		s, err := a.settlement("payouts are run by a coordinator")
		if err != nil {
			return nil, err
		}
		return s.RunPayouts(r.Context(), o)
	})
	a.route(mux, "GET /v1/payouts", func(r *http.Request) (any, error) {
		s, err := a.settlement("payout batches are kept by a coordinator")
		if err != nil {
			return nil, err
		}
		return s.Batches()
	})
	a.route(mux, "GET /v1/payouts/{id}", func(r *http.Request) (any, error) {
		s, err := a.settlement("payout batches are kept by a coordinator")
		if err != nil {
			return nil, err
		}
		v, raw, err := s.Batch(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return api.BatchRecordView{BatchView: v, Record: raw}, nil
	})
	a.route(mux, "GET /v1/payouts/{id}/bundle", func(r *http.Request) (any, error) {
		b, known, err := a.n.wallet.PayoutBundle(r.Context(), r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return api.BundleView{Bundle: b, Known: known}, nil
	})
	a.route(mux, "POST /v1/payouts/{id}/confirm", func(r *http.Request) (any, error) {
		var req struct {
			Reference string   `json:"reference"`
			Providers []string `json:"providers"`
		}
		if err := decodeBody(r, 64<<10, &req); err != nil {
			return nil, err
		}
		if req.Reference == "" {
			return nil, api.Invalid(errors.New("give the bank's reference of the transfers"))
		}
		s, err := a.settlement("payouts are run by a coordinator")
		if err != nil {
			return nil, err
		}
		return s.ConfirmBankPayouts(r.PathValue("id"), req.Reference, req.Providers)
	})
	a.route(mux, "GET /v1/payouts/{id}/bank", func(r *http.Request) (any, error) {
		s, err := a.settlement("payout batches are kept by a coordinator")
		if err != nil {
			return nil, err
		}
		data, _, err := s.BankExport(r.PathValue("id"), r.URL.Query().Get("format"))
		if err != nil {
			return nil, err
		}
		return map[string]string{"file": string(data)}, nil
	})
}

// settlement returns the coordinator's settlement, or ErrWrongRole saying that what was
// asked is a coordinator's.
func (a *APIServer) settlement(what string) (*money.Settlement, error) {
	if a.n.settlement == nil {
		return nil, fmt.Errorf("%w: %s", api.ErrWrongRole, what)
	}
	return a.n.settlement, nil
}

// parseDay reads a date (2006-01-02) or an RFC 3339 time.
func parseDay(s string) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}
