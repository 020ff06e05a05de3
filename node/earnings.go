package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	sol "github.com/gagliardetto/solana-go"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/protocol"
)

// A provider's earnings: the charges its coordinator made from its receipts, less the
// commission, grouped by period, GPU or model, with the payouts that paid them.

// EarningsQuery selects what `gpunex earnings` shows.
type EarningsQuery struct {
	Period string    `json:"period"` // week or month: the current one
	From   time.Time `json:"from,omitzero"`
	To     time.Time `json:"to,omitzero"`
	By     string    `json:"by"` // gpu or model
}

// EarningRow is one paid-for job.
type EarningRow struct {
	Job            string    `json:"job"`
	EndedAt        time.Time `json:"ended_at"`
	Model          string    `json:"model"`
	GPUs           int       `json:"gpus"`
	Seconds        int64     `json:"seconds"`
	ChargeUSDC     string    `json:"charge_usdc"`
	CommissionUSDC string    `json:"commission_usdc"`
	NetUSDC        string    `json:"net_usdc"`
	Net            int64     `json:"net_micro_usdc"`
	Batch          string    `json:"batch,omitempty"`
	Paid           bool      `json:"paid"`
}

// EarningsGroup sums earnings per GPU or per model.
type EarningsGroup struct {
	Key        string `json:"key"`
	Jobs       int    `json:"jobs"`
	GPUSeconds int64  `json:"gpu_seconds"`
	NetUSDC    string `json:"net_usdc"`
	Net        int64  `json:"net_micro_usdc"`
}

// PayoutRow is one payout to this provider.
type PayoutRow struct {
	Batch       string    `json:"batch"`
	IssuedAt    time.Time `json:"issued_at"`
	State       string    `json:"state"`
	Method      string    `json:"method"`
	Destination string    `json:"destination"`
	AmountUSDC  string    `json:"amount_usdc"`
	Amount      int64     `json:"amount_micro_usdc"`
	Receipts    int       `json:"receipts"`
	Paid        bool      `json:"paid"`
	Transaction string    `json:"transaction,omitempty"`
	Explorer    string    `json:"explorer,omitempty"`
}

// EarningsView is what `gpunex earnings` prints.
type EarningsView struct {
	From           time.Time       `json:"from"`
	To             time.Time       `json:"to"`
	TotalUSDC      string          `json:"total_usdc"` // net earned in the period
	Total          int64           `json:"total_micro_usdc"`
	ChargedUSDC    string          `json:"charged_usdc"`
	CommissionUSDC string          `json:"commission_usdc"`
	PendingUSDC    string          `json:"pending_usdc"` // earned, not paid yet (any period)
	Pending        int64           `json:"pending_micro_usdc"`
	PaidUSDC       string          `json:"paid_usdc"` // paid out, all time
	By             string          `json:"by"`
	Groups         []EarningsGroup `json:"groups"`
	History        []EarningRow    `json:"history"`
	Payouts        []PayoutRow     `json:"payouts"`
	// Truncated says History lists only the latest jobs of the period (the totals cover
	// them all; Groups only those listed): narrow the period to see the rest.
	Truncated bool `json:"truncated,omitempty"`
	// Unreachable names the trusted coordinators other than the first that did not answer:
	// their earnings are missing from every figure.
	Unreachable []string `json:"unreachable,omitempty"`
}

// periodStart is the start of the current week (Monday) or month, in UTC.
func periodStart(period string, now time.Time) (time.Time, error) {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case "", "month":
		return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC), nil
	case "week":
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7)), nil
	}
	return time.Time{}, fmt.Errorf("period %q: use week or month", period)
}

// Earnings asks the coordinator for this provider's charges and payouts and sums them.
func (n *Node) Earnings(ctx context.Context, q EarningsQuery) (EarningsView, error) {
	if n.cfg.Role != RoleProvider {
		return EarningsView{}, fmt.Errorf("%w: earnings are a provider's", ErrWrongRole)
	}
	now := n.clock.Now()
	from, err := periodStart(q.Period, now)
	if err != nil {
		return EarningsView{}, badRequest(err)
	}
	to := now.UTC()
	if !q.From.IsZero() {
		from = q.From
	}
	if !q.To.IsZero() {
		to = q.To
	}
	if q.By == "" {
		q.By = "model"
	}
	if q.By != "model" && q.By != "gpu" {
		return EarningsView{}, badRequest(fmt.Errorf("by %q: use gpu or model", q.By))
	}
	// Each trusted coordinator keeps the earnings of the jobs whose holds it signed: all of
	// them are asked; the first must answer.
	ids, err := n.cfg.TrustedCoordinators()
	if err != nil || len(ids) == 0 {
		return EarningsView{}, errors.New("no coordinator in trust.coordinators")
	}
	a := &earningsAnswer{}
	var unreachable []string
	// In parallel, 15 s each: a coordinator that is down costs the wait once.
	answers := make([]walletResponse, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, c := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			answers[i], errs[i] = n.walletCallTo(cctx, c, walletRequest{Op: "earnings", From: from, To: to})
		}()
	}
	wg.Wait()
	for i, c := range ids {
		resp, err := answers[i], errs[i]
		if err == nil && resp.Earnings == nil {
			err = errors.New("its answer holds no earnings")
		}
		if err != nil {
			if i == 0 {
				return EarningsView{}, fmt.Errorf("coordinator %s: %w", c, err)
			}
			unreachable = append(unreachable, fmt.Sprintf("coordinator %s: %v", c, err))
			continue
		}
		e := resp.Earnings
		a.Rows, a.Payouts = append(a.Rows, e.Rows...), append(a.Payouts, e.Payouts...)
		a.Truncated = a.Truncated || e.Truncated
		a.Net, a.Charge, a.Commission = a.Net+e.Net, a.Charge+e.Charge, a.Commission+e.Commission
		a.Pending, a.Paid = a.Pending+e.Pending, a.Paid+e.Paid
	}
	sort.SliceStable(a.Rows, func(i, k int) bool { return a.Rows[i].EndedAt.Before(a.Rows[k].EndedAt) })
	sort.SliceStable(a.Payouts, func(i, k int) bool { return a.Payouts[i].IssuedAt.After(a.Payouts[k].IssuedAt) })
	v := EarningsView{From: from, To: to, By: q.By, Groups: []EarningsGroup{}, History: []EarningRow{}, Payouts: a.Payouts, Truncated: a.Truncated,
		Unreachable: unreachable}
	if v.Payouts == nil {
		v.Payouts = []PayoutRow{}
	}
	for i, p := range v.Payouts {
		if sig, err := sol.SignatureFromBase58(p.Transaction); err == nil && p.Paid && p.Method == protocol.PayoutUSDC {
			v.Payouts[i].Explorer = chain.ExplorerURL(sig, n.cfg.Wallet.RPC)
		}
	}
	v.PaidUSDC = a.Paid.String()
	gpusOf := map[string][]string{}
	if jobs, err := n.ledger.Jobs(); err == nil {
		for _, j := range jobs {
			if j.Side == "provider" {
				gpusOf[j.ID] = j.GPUs
			}
		}
	}
	groups := map[string]*EarningsGroup{}
	add := func(key string, gpuSeconds int64, net protocol.MicroUSDC, job bool) {
		g := groups[key]
		if g == nil {
			g = &EarningsGroup{Key: key}
			groups[key] = g
		}
		g.GPUSeconds += gpuSeconds
		g.Net += int64(net)
		if job {
			g.Jobs++
		}
	}
	for _, row := range a.Rows {
		e, isPaid := row.Earning, row.Paid
		v.History = append(v.History, EarningRow{Job: e.Job, EndedAt: e.EndedAt, Model: e.Model, GPUs: e.GPUs, Seconds: e.Seconds,
			ChargeUSDC: e.Charge.String(), CommissionUSDC: e.Commission.String(), NetUSDC: e.Net.String(), Net: int64(e.Net),
			Batch: e.Batch, Paid: isPaid})
		if q.By == "model" {
			add(e.Model, int64(e.GPUs)*e.Seconds, e.Net, true)
			continue
		}
		// Per GPU: the job's net split evenly over the GPUs it held, the remainder of the
		// division going to the first, so the parts add up to the whole.
		uuids := gpusOf[e.Job]
		if len(uuids) == 0 {
			add("unknown GPU ("+e.Model+")", int64(e.GPUs)*e.Seconds, e.Net, true)
			continue
		}
		share := e.Net / protocol.MicroUSDC(len(uuids))
		for i, u := range uuids {
			part := share
			if i == 0 {
				part += e.Net - share*protocol.MicroUSDC(len(uuids))
			}
			add(u, e.Seconds, part, true)
		}
	}
	for _, g := range groups {
		g.NetUSDC = protocol.MicroUSDC(g.Net).String()
		v.Groups = append(v.Groups, *g)
	}
	sort.Slice(v.Groups, func(i, k int) bool { return v.Groups[i].Key < v.Groups[k].Key })
	slices.Reverse(v.History)
	v.Total, v.TotalUSDC = int64(a.Net), a.Net.String()
	v.ChargedUSDC, v.CommissionUSDC = a.Charge.String(), a.Commission.String()
	v.Pending, v.PendingUSDC = int64(a.Pending), a.Pending.String()
	return v, nil
}

// Bounds of a provider's earnings answer.
var (
	maxEarningRows = 20000
	maxPayoutRows  = 1000
)

// earningsAnswer is the coordinator's answer to a provider's earnings request.
type earningsAnswer struct {
	// Rows are the earnings of jobs that ended within the period, oldest first: the
	// latest maxEarningRows of them (Truncated then says some were left out).
	Rows      []earningRow `json:"rows"`
	Truncated bool         `json:"truncated,omitempty"`
	// Net, Charge and Commission sum every earning of the period, listed or not.
	Net        protocol.MicroUSDC `json:"net_micro_usdc"`
	Charge     protocol.MicroUSDC `json:"charge_micro_usdc"`
	Commission protocol.MicroUSDC `json:"commission_micro_usdc"`
	// Pending is every earning not paid yet, and Paid every payout made, whatever the
	// period.
	Pending protocol.MicroUSDC `json:"pending_micro_usdc"`
	Paid    protocol.MicroUSDC `json:"paid_micro_usdc"`
	// Payouts are the provider's payouts, newest first (at most maxPayoutRows).
	Payouts []PayoutRow `json:"payouts"`
}

type earningRow struct {
	ledger.Earning
	Paid bool `json:"paid"`
}

// earningsOf answers a provider's earnings request for jobs that ended within [from, to]
// (zero bounds are open).
func (s *settlement) earningsOf(provider string, from, to time.Time) (*earningsAnswer, error) {
	l := s.n.ledger
	bs, err := l.Batches()
	if err != nil {
		return nil, err
	}
	a := &earningsAnswer{Rows: []earningRow{}, Payouts: []PayoutRow{}}
	paid := map[string]bool{}
	for _, b := range bs {
		if len(b.Record) == 0 {
			continue
		}
		for _, p := range b.Payouts {
			if p.Provider != provider {
				continue
			}
			if p.Paid {
				a.Paid += p.Amount
				for _, r := range p.Receipts {
					paid[r] = true
				}
			}
			a.Payouts = append(a.Payouts, PayoutRow{Batch: b.Batch, IssuedAt: b.IssuedAt, State: b.State, Method: p.Method,
				Destination: p.Destination, AmountUSDC: p.Amount.String(), Amount: int64(p.Amount), Receipts: len(p.Receipts),
				Paid: p.Paid, Transaction: p.Transaction})
		}
	}
	sort.SliceStable(a.Payouts, func(i, k int) bool { return a.Payouts[i].IssuedAt.After(a.Payouts[k].IssuedAt) })
	a.Payouts = a.Payouts[:min(len(a.Payouts), maxPayoutRows)]
	earnings, err := l.Earnings(provider)
	if err != nil {
		return nil, err
	}
	for _, e := range earnings {
		isPaid := paid[e.Receipt]
		if !isPaid {
			a.Pending += e.Net
		}
		if (!from.IsZero() && e.EndedAt.Before(from)) || (!to.IsZero() && e.EndedAt.After(to)) {
			continue
		}
		a.Net += e.Net
		a.Charge += e.Charge
		a.Commission += e.Commission
		a.Rows = append(a.Rows, earningRow{Earning: e, Paid: isPaid})
	}
	if len(a.Rows) > maxEarningRows {
		a.Rows, a.Truncated = a.Rows[len(a.Rows)-maxEarningRows:], true
	}
	return a, nil
}
