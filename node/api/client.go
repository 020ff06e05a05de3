// Package api is the local HTTP API of a node as its clients see it: the request and
// response types, and the Client the CLI and the devnet use. It links nothing of the daemon.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// Client talks to a running node's local API. The CLI uses nothing else.
type Client struct {
	Base  string // http://127.0.0.1:port
	token string
	hc    *http.Client
}

// Home is where a node's API is found: config.Home is one.
type Home interface {
	// APIEndpoint returns the API's base URL (http://127.0.0.1:port) and its token.
	APIEndpoint() (base, token string, err error)
}

// NewClient finds the API of the node whose home is h.
func NewClient(h Home) (*Client, error) {
	base, tok, err := h.APIEndpoint()
	if err != nil {
		return nil, err
	}
	return &Client{Base: base, token: tok, hc: &http.Client{Timeout: 60 * time.Second}}, nil
}

// ErrNotRunning is returned when the daemon does not answer.
var ErrNotRunning = errors.New("node not running")

// Do sends a request and decodes a JSON answer into out (when out is not nil).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v (is `gpunex node run` still running?)", ErrNotRunning, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return answerError(method, path, resp, data)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// answerError is the error an answer other than 200 carries: the server's message, with
// its kind back from the status.
func answerError(method, path string, resp *http.Response, data []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		switch resp.StatusCode {
		case http.StatusBadRequest:
			return kindError{ErrInvalid, errors.New(e.Error)}
		case http.StatusNotFound:
			return kindError{ErrNotFound, errors.New(e.Error)}
		case http.StatusConflict:
			return kindError{ErrConflict, errors.New(e.Error)}
		case http.StatusTooManyRequests:
			return kindError{ErrRateLimited, errors.New(e.Error)}
		}
		return errors.New(e.Error)
	}
	return fmt.Errorf("API %s %s: %s", method, path, resp.Status)
}

// Status returns the node's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.Do(ctx, http.MethodGet, "/v1/status", nil, &s)
}

// Search runs an offer search on the node.
func (c *Client) Search(ctx context.Context, q url.Values) ([]OfferRow, error) {
	var rows []OfferRow
	return rows, c.Do(ctx, http.MethodGet, "/v1/offers?"+q.Encode(), nil, &rows)
}

// OfferRecord fetches the signed record of an offer.
func (c *Client) OfferRecord(ctx context.Context, id string) (OfferRecordView, error) {
	var v OfferRecordView
	return v, c.Do(ctx, http.MethodGet, "/v1/offers/record?id="+url.QueryEscape(id), nil, &v)
}

// OwnOffer fetches a provider's current offer.
func (c *Client) OwnOffer(ctx context.Context) (OfferRecordView, error) {
	var v OfferRecordView
	return v, c.Do(ctx, http.MethodGet, "/v1/provider/offer", nil, &v)
}

// SetPrice sets a provider's price for a model.
func (c *Client) SetPrice(ctx context.Context, model, usdc string) (OfferRecordView, error) {
	var v OfferRecordView
	return v, c.Do(ctx, http.MethodPost, "/v1/provider/price", SetPriceRequest{Model: model, USDC: usdc}, &v)
}

// Apply submits a provider's application.
func (c *Client) Apply(ctx context.Context, form any) (OwnApplicationView, error) {
	var v OwnApplicationView
	return v, c.Do(ctx, http.MethodPost, "/v1/apply", form, &v)
}

// ApplyStatus returns the provider's application as it stands.
func (c *Client) ApplyStatus(ctx context.Context) (OwnApplicationView, error) {
	var v OwnApplicationView
	return v, c.Do(ctx, http.MethodGet, "/v1/apply", nil, &v)
}

// Answer replies to the coordinator's question.
func (c *Client) Answer(ctx context.Context, message string) (OwnApplicationView, error) {
	var v OwnApplicationView
	return v, c.Do(ctx, http.MethodPost, "/v1/apply/answer", AnswerRequest{Message: message}, &v)
}

// Notifications lists the node's notifications.
func (c *Client) Notifications(ctx context.Context) ([]NotificationView, error) {
	var v []NotificationView
	return v, c.Do(ctx, http.MethodGet, "/v1/notifications", nil, &v)
}

// Applications lists the coordinator's queue ("" for every status).
func (c *Client) Applications(ctx context.Context, status, sort string) ([]ApplicationView, error) {
	var v []ApplicationView
	return v, c.Do(ctx, http.MethodGet, "/v1/coordinator/applications?status="+url.QueryEscape(status)+"&sort="+url.QueryEscape(sort), nil, &v)
}

// Application shows one application with its audit trail.
func (c *Client) Application(ctx context.Context, id string) (ApplicationView, error) {
	var v ApplicationView
	return v, c.Do(ctx, http.MethodGet, "/v1/coordinator/applications/"+url.PathEscape(id), nil, &v)
}

// Decide records a reviewer's decision.
func (c *Client) Decide(ctx context.Context, id string, d Decision) (ApplicationView, error) {
	var v ApplicationView
	return v, c.Do(ctx, http.MethodPost, "/v1/coordinator/applications/"+url.PathEscape(id)+"/decision", d, &v)
}

// Revoke revokes a provider's certificates.
func (c *Client) Revoke(ctx context.Context, req RevokeRequest) (RevokeResult, error) {
	var v RevokeResult
	return v, c.Do(ctx, http.MethodPost, "/v1/coordinator/revoke", req, &v)
}

// ProposeJob negotiates and starts a job on a provider.
func (c *Client) ProposeJob(ctx context.Context, req JobRequest) (JobView, error) {
	var v JobView
	return v, c.Do(ctx, http.MethodPost, "/v1/jobs", req, &v)
}

// Jobs lists the node's jobs.
func (c *Client) Jobs(ctx context.Context) ([]JobView, error) {
	var v []JobView
	return v, c.Do(ctx, http.MethodGet, "/v1/jobs", nil, &v)
}

// Job returns one job.
func (c *Client) Job(ctx context.Context, id string) (JobView, error) {
	var v JobView
	return v, c.Do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &v)
}

// CancelJob asks the provider to stop a job.
func (c *Client) CancelJob(ctx context.Context, id string) (JobView, error) {
	var v JobView
	return v, c.Do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, &v)
}

// JobLogs copies a job's output to w, following it until the job ends when follow is set.
func (c *Client) JobLogs(ctx context.Context, id string, follow bool, w io.Writer) error {
	return c.stream(ctx, "/v1/jobs/"+url.PathEscape(id)+"/logs?follow="+strconv.FormatBool(follow), w)
}

// FetchOutput copies the tar of a job's /output to w.
func (c *Client) FetchOutput(ctx context.Context, id string, w io.Writer) error {
	return c.stream(ctx, "/v1/jobs/"+url.PathEscape(id)+"/output", w)
}

// stream copies a streamed answer to w, without the client's overall timeout.
func (c *Client) stream(ctx context.Context, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v (is `gpunex node run` still running?)", ErrNotRunning, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("API GET %s: %s", path, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// Bench returns the provider's latest benchmark attestation.
func (c *Client) Bench(ctx context.Context) (BenchView, error) {
	var v BenchView
	return v, c.Do(ctx, http.MethodGet, "/v1/bench", nil, &v)
}

// BenchRun runs the benchmarks, calling progress for each step, and returns the new
// attestation.
func (c *Client) BenchRun(ctx context.Context, progress func(step, steps int, what string)) (BenchView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+"/v1/bench/run", nil)
	if err != nil {
		return BenchView{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return BenchView{}, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var line struct {
			Step   int        `json:"step"`
			Steps  int        `json:"steps"`
			What   string     `json:"what"`
			Error  string     `json:"error"`
			Result *BenchView `json:"result"`
		}
		if err := dec.Decode(&line); err != nil {
			return BenchView{}, fmt.Errorf("benchmark run: %w", err)
		}
		switch {
		case line.Error != "":
			return BenchView{}, errors.New(line.Error)
		case line.Result != nil:
			return *line.Result, nil
		case line.Steps > 0:
			progress(line.Step, line.Steps, line.What)
		}
	}
}

// Challenge asks a provider, through this coordinator, to run its benchmarks now. The run
// may take minutes: the client waits up to 11.
func (c *Client) Challenge(ctx context.Context, provider string) (BenchView, error) {
	var v BenchView
	long := *c
	long.hc = &http.Client{Timeout: 11 * time.Minute}
	return v, long.Do(ctx, http.MethodPost, "/v1/coordinator/challenge", map[string]string{"provider": provider}, &v)
}

// Scores returns the score records the node holds (one provider's when provider is set).
func (c *Client) Scores(ctx context.Context, provider string) ([]protocol.ScoreRecord, error) {
	var v []protocol.ScoreRecord
	return v, c.Do(ctx, http.MethodGet, "/v1/scores?provider="+url.QueryEscape(provider), nil, &v)
}

// Peer says how the node is connected to a peer.
func (c *Client) Peer(ctx context.Context, id string) (PeerView, error) {
	var v PeerView
	return v, c.Do(ctx, http.MethodGet, "/v1/peers/"+url.PathEscape(id), nil, &v)
}

// Clock measures the node's clock against its coordinator's.
func (c *Client) Clock(ctx context.Context) (ClockView, error) {
	var v ClockView
	return v, c.Do(ctx, http.MethodGet, "/v1/clock", nil, &v)
}

// Availability returns the provider's weekly availability.
func (c *Client) Availability(ctx context.Context) (AvailabilityView, error) {
	var v AvailabilityView
	return v, c.Do(ctx, http.MethodGet, "/v1/provider/availability", nil, &v)
}

// SetAvailability sets the provider's weekly availability; it applies at once.
func (c *Client) SetAvailability(ctx context.Context, a Availability) (AvailabilityView, error) {
	var v AvailabilityView
	return v, c.Do(ctx, http.MethodPut, "/v1/provider/availability", a, &v)
}

// ResetAvailability goes back to the availability of the config.
func (c *Client) ResetAvailability(ctx context.Context) (AvailabilityView, error) {
	var v AvailabilityView
	return v, c.Do(ctx, http.MethodDelete, "/v1/provider/availability", nil, &v)
}

// Maintenance lists the provider's planned maintenance and the windows it announces.
func (c *Client) Maintenance(ctx context.Context) (MaintenanceView, error) {
	var v MaintenanceView
	return v, c.Do(ctx, http.MethodGet, "/v1/provider/maintenance", nil, &v)
}

// AddMaintenance adds a window or a recurring rule.
func (c *Client) AddMaintenance(ctx context.Context, m Maintenance) (Maintenance, error) {
	var v Maintenance
	return v, c.Do(ctx, http.MethodPost, "/v1/provider/maintenance", m, &v)
}

// RemoveMaintenance removes a window or rule.
func (c *Client) RemoveMaintenance(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/provider/maintenance/"+url.PathEscape(id), nil, nil)
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
// coordinator names the coordinator's treasury ("": the home coordinator's).
func (c *Client) Deposit(ctx context.Context, usdc, coordinator string) (DepositView, error) {
	var v DepositView
	return v, c.long().Do(ctx, http.MethodPost, "/v1/wallet/deposit", map[string]string{"usdc": usdc, "coordinator": coordinator}, &v)
}

// ClaimDeposits has the coordinator credit deposits not credited yet.
func (c *Client) ClaimDeposits(ctx context.Context, signature, coordinator string) ([]DepositView, error) {
	var v []DepositView
	return v, c.long().Do(ctx, http.MethodPost, "/v1/wallet/claim", map[string]string{"signature": signature, "coordinator": coordinator}, &v)
}

// Balance returns the node's balance at a coordinator ("": the home coordinator).
func (c *Client) Balance(ctx context.Context, coordinator string) (BalanceView, error) {
	var v BalanceView
	return v, c.Do(ctx, http.MethodGet, "/v1/wallet/balance?"+url.Values{"coordinator": {coordinator}}.Encode(), nil, &v)
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

// ReplanPayouts takes providers' unpaid payouts (all when none is named) out of a batch
// that cannot settle, settles the rest, and leaves their receipts to the next batch.
func (c *Client) ReplanPayouts(ctx context.Context, id string, providers []string) (BatchView, error) {
	var v BatchView
	return v, c.Do(ctx, http.MethodPost, "/v1/payouts/"+url.PathEscape(id)+"/replan", map[string][]string{"providers": providers}, &v)
}

// Gossip returns a peer's gossip score as the node keeps it.
func (c *Client) Gossip(ctx context.Context, peer string) (GossipView, error) {
	var v GossipView
	return v, c.Do(ctx, http.MethodGet, "/v1/gossip/"+url.PathEscape(peer), nil, &v)
}

// Disputes lists a coordinator's disputes, open ones unless all is set.
func (c *Client) Disputes(ctx context.Context, all bool) ([]DisputeView, error) {
	var v []DisputeView
	path := "/v1/disputes"
	if all {
		path += "?all=1"
	}
	return v, c.Do(ctx, http.MethodGet, path, nil, &v)
}

// Dispute returns one dispute.
func (c *Client) Dispute(ctx context.Context, job string) (DisputeView, error) {
	var v DisputeView
	return v, c.Do(ctx, http.MethodGet, "/v1/disputes/"+url.PathEscape(job), nil, &v)
}

// ResolveDispute decides a dispute.
func (c *Client) ResolveDispute(ctx context.Context, job string, req ResolveRequest) (DisputeView, error) {
	var v DisputeView
	return v, c.Do(ctx, http.MethodPost, "/v1/disputes/"+url.PathEscape(job)+"/resolve", req, &v)
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
func (c *Client) ReleaseHold(ctx context.Context, job, coordinator string) (BalanceView, error) {
	var v BalanceView
	return v, c.Do(ctx, http.MethodPost, "/v1/wallet/release", map[string]string{"job": job, "coordinator": coordinator}, &v)
}

// Models returns the model catalogue the node uses.
func (c *Client) Models(ctx context.Context) (ModelsView, error) {
	var v ModelsView
	return v, c.Do(ctx, http.MethodGet, "/v1/models", nil, &v)
}

// EditModels changes a coordinator's model catalogue, which it signs and gossips; it
// returns the new catalogue.
func (c *Client) EditModels(ctx context.Context, e ModelEdit) (ModelsView, error) {
	var v ModelsView
	return v, c.Do(ctx, http.MethodPost, "/v1/coordinator/models", e, &v)
}
