package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// Money routes of the local API (docs/api.md): wallet, earnings, market advice, payouts.

func (a *APIServer) routeMoney(mux *http.ServeMux) {
	a.route(mux, "GET /v1/wallet/info", func(r *http.Request) (any, error) {
		resp, err := a.n.walletCall(r.Context(), walletRequest{Op: "info"})
		if err != nil {
			return nil, err
		}
		return resp.Info, nil
	})
	a.route(mux, "POST /v1/wallet/init", func(r *http.Request) (any, error) {
		addr, err := a.n.InitWallet()
		if err != nil {
			return nil, badRequest(err)
		}
		return map[string]string{"address": addr}, nil
	})
	a.route(mux, "POST /v1/wallet/deposit", func(r *http.Request) (any, error) {
		var req struct {
			USDC string `json:"usdc"`
		}
		if err := decodeBody(r, 1024, &req); err != nil {
			return nil, err
		}
		amount, err := protocol.ParseUSDC(req.USDC)
		if err != nil {
			return nil, badRequest(err)
		}
		return a.n.Deposit(r.Context(), amount)
	})
	a.route(mux, "POST /v1/wallet/claim", func(r *http.Request) (any, error) {
		var req struct {
			Signature string `json:"signature"`
		}
		if err := decodeBody(r, 1024, &req); err != nil {
			return nil, err
		}
		return a.n.ClaimDeposits(r.Context(), req.Signature)
	})
	a.route(mux, "POST /v1/wallet/release", func(r *http.Request) (any, error) {
		var req struct {
			Job string `json:"job"`
		}
		if err := decodeBody(r, 1024, &req); err != nil {
			return nil, err
		}
		if !protocol.ValidJobID(req.Job) {
			return nil, badRequest(errors.New("job ID: 16 lower-case hex digits"))
		}
		return a.n.ReleaseHold(r.Context(), req.Job)
	})
	a.route(mux, "GET /v1/wallet/balance", func(r *http.Request) (any, error) { return a.n.Balance(r.Context()) })
	a.route(mux, "GET /v1/earnings", func(r *http.Request) (any, error) {
		q := r.URL.Query()
		eq := EarningsQuery{Period: q.Get("period"), By: q.Get("by")}
		for _, f := range []struct {
			name string
			to   *time.Time
		}{{"from", &eq.From}, {"to", &eq.To}} {
			if v := q.Get(f.name); v != "" {
				t, err := parseDay(v)
				if err != nil {
					return nil, badRequest(fmt.Errorf("%s: %w", f.name, err))
				}
				*f.to = t
			}
		}
		return a.n.Earnings(r.Context(), eq)
	})
	a.route(mux, "GET /v1/market", func(r *http.Request) (any, error) {
		return a.n.RecommendPrice(r.URL.Query().Get("model"), r.URL.Query().Get("region"))
	})
	a.route(mux, "POST /v1/payouts/run", func(r *http.Request) (any, error) {
		var o PayoutRunOptions
		if err := decodeBody(r, 1024, &o); err != nil {
			return nil, err
		}
		return a.n.RunPayouts(r.Context(), o)
	})
	a.route(mux, "GET /v1/payouts", func(r *http.Request) (any, error) { return a.n.Batches() })
	a.route(mux, "GET /v1/payouts/{id}", func(r *http.Request) (any, error) {
		v, raw, err := a.n.Batch(r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return BatchRecordView{BatchView: v, Record: raw}, nil
	})
	a.route(mux, "GET /v1/payouts/{id}/bundle", func(r *http.Request) (any, error) {
		b, known, err := a.n.PayoutBundle(r.Context(), r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return BundleView{Bundle: b, Known: known}, nil
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
			return nil, badRequest(errors.New("give the bank's reference of the transfers"))
		}
		return a.n.ConfirmBankPayouts(r.PathValue("id"), req.Reference, req.Providers)
	})
	a.route(mux, "GET /v1/payouts/{id}/bank", func(r *http.Request) (any, error) {
		data, _, err := a.n.BankExport(r.PathValue("id"), r.URL.Query().Get("format"))
		if err != nil {
			return nil, err
		}
		return map[string]string{"file": string(data)}, nil
	})
}

// parseDay reads a date (2006-01-02) or an RFC 3339 time.
func parseDay(s string) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}

// BatchRecordView is a batch with its latest signed record.
type BatchRecordView struct {
	BatchView
	Record []byte `json:"record"`
}

// BundleView is a batch's audit bundle with the other batches known.
type BundleView struct {
	Bundle *AuditBundle `json:"bundle"`
	Known  [][]byte     `json:"known"`
}

// long returns a client for calls that may take minutes (payout runs, deposits).
func (c *Client) long() *Client {
	cp := *c
	hc := *c.hc
	hc.Timeout = 30 * time.Minute
	cp.hc = &hc
	return &cp
}

// WalletInit creates the node's Solana wallet.
func (c *Client) WalletInit(ctx context.Context) (string, error) {
	var out map[string]string
	return out["address"], c.Do(ctx, http.MethodPost, "/v1/wallet/init", struct{}{}, &out)
}

// Deposit sends USDC to the coordinator's treasury.
func (c *Client) Deposit(ctx context.Context, usdc string) (DepositView, error) {
	var v DepositView
	return v, c.long().Do(ctx, http.MethodPost, "/v1/wallet/deposit", map[string]string{"usdc": usdc}, &v)
}

// ClaimDeposits has the coordinator credit deposits not credited yet.
func (c *Client) ClaimDeposits(ctx context.Context, signature string) ([]DepositView, error) {
	var v []DepositView
	return v, c.long().Do(ctx, http.MethodPost, "/v1/wallet/claim", map[string]string{"signature": signature}, &v)
}

// Balance returns the node's balance at the coordinator.
func (c *Client) Balance(ctx context.Context) (BalanceView, error) {
	var v BalanceView
	return v, c.Do(ctx, http.MethodGet, "/v1/wallet/balance", nil, &v)
}

// Earnings returns a provider's earnings.
func (c *Client) Earnings(ctx context.Context, q url.Values) (EarningsView, error) {
	var v EarningsView
	return v, c.Do(ctx, http.MethodGet, "/v1/earnings?"+q.Encode(), nil, &v)
}

// Market returns the latest market advice.
func (c *Client) Market(ctx context.Context, model, region string) ([]PriceAdvice, error) {
	var v []PriceAdvice
	q := url.Values{"model": {model}, "region": {region}}
	return v, c.Do(ctx, http.MethodGet, "/v1/market?"+q.Encode(), nil, &v)
}

// RunPayouts runs a payout batch on a coordinator.
func (c *Client) RunPayouts(ctx context.Context, o PayoutRunOptions) (BatchView, error) {
	var v BatchView
	return v, c.long().Do(ctx, http.MethodPost, "/v1/payouts/run", o, &v)
}

// Batches lists a coordinator's payout batches.
func (c *Client) Batches(ctx context.Context) ([]BatchView, error) {
	var v []BatchView
	return v, c.Do(ctx, http.MethodGet, "/v1/payouts", nil, &v)
}

// Batch returns one payout batch with its signed record.
func (c *Client) Batch(ctx context.Context, id string) (BatchRecordView, error) {
	var v BatchRecordView
	return v, c.Do(ctx, http.MethodGet, "/v1/payouts/"+url.PathEscape(id), nil, &v)
}

// Bundle returns a batch's audit bundle.
func (c *Client) Bundle(ctx context.Context, id string) (BundleView, error) {
	var v BundleView
	return v, c.long().Do(ctx, http.MethodGet, "/v1/payouts/"+url.PathEscape(id)+"/bundle", nil, &v)
}

// ConfirmBank marks a batch's bank payouts paid.
func (c *Client) ConfirmBank(ctx context.Context, id, reference string, providers []string) (BatchView, error) {
	var v BatchView
	return v, c.Do(ctx, http.MethodPost, "/v1/payouts/"+url.PathEscape(id)+"/confirm", map[string]any{"reference": reference, "providers": providers}, &v)
}

// BankExport returns a batch's bank-transfer file.
func (c *Client) BankExport(ctx context.Context, id, format string) (string, error) {
	var v map[string]string
	return v["file"], c.Do(ctx, http.MethodGet, "/v1/payouts/"+url.PathEscape(id)+"/bank?format="+url.QueryEscape(format), nil, &v)
}

// ReleaseHold asks for a job's hold back.
func (c *Client) ReleaseHold(ctx context.Context, job string) (BalanceView, error) {
	var v BalanceView
	return v, c.Do(ctx, http.MethodPost, "/v1/wallet/release", map[string]string{"job": job}, &v)
}
