package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
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

// ErrNotRunning is returned when the home's daemon is not running.
var ErrNotRunning = errors.New("node not running")

// NewClient finds the API of the node whose home is h.
func NewClient(h Home) (*Client, error) {
	b, err := os.ReadFile(h.Path(APIAddrFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s in %s (start it with `gpunex node run --home %s`)", ErrNotRunning, APIAddrFile, h.Dir, h.Dir)
	}
	if err != nil {
		return nil, err
	}
	tok, err := h.Token()
	if err != nil {
		return nil, err
	}
	return &Client{Base: strings.TrimSpace(string(b)), token: tok, hc: &http.Client{Timeout: 60 * time.Second}}, nil
}

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
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s", e.Error)
		}
		return fmt.Errorf("API %s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
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
func (c *Client) Applications(ctx context.Context, status string) ([]ApplicationView, error) {
	var v []ApplicationView
	return v, c.Do(ctx, http.MethodGet, "/v1/coordinator/applications?status="+url.QueryEscape(status), nil, &v)
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
