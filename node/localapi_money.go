package node

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Money routes of the local API (docs/api.md): wallet, earnings, market advice, payouts.

func (a *APIServer) moneyRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/wallet/info", answer: a.walletInfo},
		{pattern: "POST /v1/wallet/init", answer: a.initWallet},
		{pattern: "POST /v1/wallet/deposit", answer: a.deposit},
		{pattern: "POST /v1/wallet/claim", answer: a.claimDeposits},
		{pattern: "POST /v1/wallet/release", answer: a.releaseHold},
		{pattern: "GET /v1/wallet/balance", answer: a.balance},
		{pattern: "GET /v1/earnings", answer: a.earnings},
		{pattern: "GET /v1/market", answer: a.recommendPrice},
		{pattern: "POST /v1/payouts/{id}/replan", answer: a.replanPayout},
		{pattern: "GET /v1/disputes", answer: a.disputes},
		{pattern: "GET /v1/disputes/{job}", answer: a.dispute},
		{pattern: "POST /v1/disputes/{job}/resolve", answer: a.resolveDispute},
		{pattern: "POST /v1/payouts/run", answer: a.runPayouts},
		{pattern: "GET /v1/payouts", answer: a.payoutBatches},
		{pattern: "GET /v1/payouts/{id}", answer: a.payoutBatch},
		{pattern: "GET /v1/payouts/{id}/bundle", answer: a.payoutBundle},
		{pattern: "POST /v1/payouts/{id}/confirm", answer: a.confirmBankPayouts},
		{pattern: "GET /v1/payouts/{id}/bank", answer: a.bankExport},
	}
}

func (a *APIServer) walletInfo(r *http.Request) (any, error) {
	return a.n.wallet.Info(r.Context(), r.URL.Query().Get("coordinator"))
}

func (a *APIServer) initWallet(r *http.Request) (any, error) {
	addr, err := a.n.wallet.InitWallet()
	if err != nil {
		return nil, api.Invalid(err)
	}
	return map[string]string{"address": addr}, nil
}

func (a *APIServer) deposit(r *http.Request) (any, error) {
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
}

func (a *APIServer) claimDeposits(r *http.Request) (any, error) {
	var req struct {
		Signature   string `json:"signature"`
		Coordinator string `json:"coordinator"`
	}
	if err := decodeBody(r, 1024, &req); err != nil {
		return nil, err
	}
	return a.n.wallet.ClaimDeposits(r.Context(), req.Signature, req.Coordinator)
}

func (a *APIServer) releaseHold(r *http.Request) (any, error) {
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
}

func (a *APIServer) balance(r *http.Request) (any, error) {
	return a.n.wallet.Balance(r.Context(), r.URL.Query().Get("coordinator"))
}

func (a *APIServer) earnings(r *http.Request) (any, error) {
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
}

func (a *APIServer) recommendPrice(r *http.Request) (any, error) {
	return a.n.market.RecommendPrice(r.URL.Query().Get("model"), r.URL.Query().Get("region"))
}

func (a *APIServer) replanPayout(r *http.Request) (any, error) {
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
}

func (a *APIServer) disputes(r *http.Request) (any, error) {
	s, err := a.settlement("disputes are decided by a coordinator")
	if err != nil {
		return nil, err
	}
	return s.Disputes(r.URL.Query().Get("all") != "")
}

func (a *APIServer) dispute(r *http.Request) (any, error) {
	s, err := a.settlement("disputes are decided by a coordinator")
	if err != nil {
		return nil, err
	}
	return s.Dispute(r.PathValue("job"))
}

func (a *APIServer) resolveDispute(r *http.Request) (any, error) {
	s, err := a.settlement("disputes are decided by a coordinator")
	if err != nil {
		return nil, err
	}
	var req api.ResolveRequest
	if err := decodeBody(r, 4096, &req); err != nil {
		return nil, err
	}
	return s.ResolveDispute(r.PathValue("job"), req)
}

func (a *APIServer) runPayouts(r *http.Request) (any, error) {
	var o api.PayoutRunOptions
	if err := decodeBody(r, 1024, &o); err != nil {
		return nil, err
	}
	s, err := a.settlement("payouts are run by a coordinator")
	if err != nil {
		return nil, err
	}
	return s.RunPayouts(r.Context(), o)
}

func (a *APIServer) payoutBatches(r *http.Request) (any, error) {
	s, err := a.settlement("payout batches are kept by a coordinator")
	if err != nil {
		return nil, err
	}
	return s.Batches()
}

func (a *APIServer) payoutBatch(r *http.Request) (any, error) {
	s, err := a.settlement("payout batches are kept by a coordinator")
	if err != nil {
		return nil, err
	}
	v, raw, err := s.Batch(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return api.BatchRecordView{BatchView: v, Record: raw}, nil
}

func (a *APIServer) payoutBundle(r *http.Request) (any, error) {
	b, known, err := a.n.wallet.PayoutBundle(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return api.BundleView{Bundle: b, Known: known}, nil
}

func (a *APIServer) confirmBankPayouts(r *http.Request) (any, error) {
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
}

func (a *APIServer) bankExport(r *http.Request) (any, error) {
	s, err := a.settlement("payout batches are kept by a coordinator")
	if err != nil {
		return nil, err
	}
	data, _, err := s.BankExport(r.PathValue("id"), r.URL.Query().Get("format"))
	if err != nil {
		return nil, err
	}
	return map[string]string{"file": string(data)}, nil
}
