package money

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// A provider's earnings: the charges its coordinator made from its receipts, less the
// commission, grouped by period, GPU or model, with the payouts that paid them.

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
func (w *Wallet) Earnings(ctx context.Context, q api.EarningsQuery) (api.EarningsView, error) {
	if w.cfg.Role != config.RoleProvider {
		return api.EarningsView{}, fmt.Errorf("%w: earnings are a provider's", api.ErrWrongRole)
	}
	now := w.clock.Now()
	from, err := periodStart(q.Period, now)
	if err != nil {
		return api.EarningsView{}, api.Invalid(err)
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
		return api.EarningsView{}, api.Invalid(fmt.Errorf("by %q: use gpu or model", q.By))
	}
	a, unreachable, err := w.askEarnings(ctx, from, to)
	if err != nil {
		return api.EarningsView{}, err
	}
	v := api.EarningsView{From: from, To: to, By: q.By, Groups: []api.EarningsGroup{}, History: []api.EarningRow{}, Payouts: a.Payouts, Truncated: a.Truncated,
		Unreachable: unreachable}
	if v.Payouts == nil {
		v.Payouts = []api.PayoutRow{}
	}
	for i, p := range v.Payouts {
		if sig, err := chain.ParseSignature(p.Transaction); err == nil && p.Paid && p.Method == protocol.PayoutUSDC {
			v.Payouts[i].Explorer = chain.ExplorerURL(sig, w.cfg.Wallet.RPC)
		}
	}
	v.PaidUSDC = a.Paid.String()
	w.groupEarnings(&v, a.Rows)
	v.Total, v.TotalUSDC = int64(a.Net), a.Net.String()
	v.ChargedUSDC, v.CommissionUSDC = a.Charge.String(), a.Commission.String()
	v.Pending, v.PendingUSDC = int64(a.Pending), a.Pending.String()
	return v, nil
}

// askEarnings asks every trusted coordinator for this provider's earnings of jobs that
// ended within [from, to] and adds up the answers: each keeps the earnings of the jobs whose
// holds it signed. The first must answer; the others that do not are named in unreachable.
func (w *Wallet) askEarnings(ctx context.Context, from, to time.Time) (a *protocol.EarningsAnswer, unreachable []string, err error) {
	ids, err := w.cfg.TrustedCoordinators()
	if err != nil || len(ids) == 0 {
		return nil, nil, errors.New("no coordinator in trust.coordinators")
	}
	a = &protocol.EarningsAnswer{}
	// In parallel, 15 s each: a coordinator that is down costs the wait once.
	answers := make([]protocol.WalletResponse, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, c := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			answers[i], errs[i] = w.walletCallTo(cctx, c, protocol.WalletRequest{Op: "earnings", From: from, To: to})
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
				return nil, nil, fmt.Errorf("coordinator %s: %w", c, err)
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
	return a, unreachable, nil
}

// groupEarnings fills the view's history (newest first) and its groups, by model or by
// GPU, from the earning rows.
func (w *Wallet) groupEarnings(v *api.EarningsView, rows []protocol.EarningRow) {
	gpusOf := map[string][]string{}
	if jobs, err := w.ledger.Jobs.Jobs(); err == nil {
		for _, j := range jobs {
			if j.Side == "provider" {
				gpusOf[j.ID] = j.GPUs
			}
		}
	}
	groups := map[string]*api.EarningsGroup{}
	add := func(key string, gpuSeconds int64, net protocol.MicroUSDC, job bool) {
		g := groups[key]
		if g == nil {
			g = &api.EarningsGroup{Key: key}
			groups[key] = g
		}
		g.GPUSeconds += gpuSeconds
		g.Net += int64(net)
		if job {
			g.Jobs++
		}
	}
	for _, row := range rows {
		e, isPaid := row.Earning, row.Paid
		v.History = append(v.History, api.EarningRow{Job: e.Job, EndedAt: e.EndedAt, Model: e.Model, GPUs: e.GPUs, Seconds: e.Seconds,
			ChargeUSDC: e.Charge.String(), CommissionUSDC: e.Commission.String(), NetUSDC: e.Net.String(), Net: int64(e.Net),
			Batch: e.Batch, Paid: isPaid})
		if v.By == "model" {
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
}

// Bounds of a provider's earnings answer.
var (
	MaxEarningRows = 20000
	maxPayoutRows  = 1000
)

// earningsAnswers answer the providers' earnings requests from the coordinator's book.
type earningsAnswers struct {
	ledger Stores
}

// EarningsOf answers a provider's earnings request for jobs that ended within [from, to]
// (zero bounds are open).
func (s *earningsAnswers) EarningsOf(provider string, from, to time.Time) (*protocol.EarningsAnswer, error) {
	l := s.ledger
	bs, err := l.Payouts.Batches()
	if err != nil {
		return nil, err
	}
	a := &protocol.EarningsAnswer{Rows: []protocol.EarningRow{}, Payouts: []api.PayoutRow{}}
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
			a.Payouts = append(a.Payouts, api.PayoutRow{Batch: b.Batch, IssuedAt: b.IssuedAt, State: b.State, Method: p.Method,
				Destination: p.Destination, AmountUSDC: p.Amount.String(), Amount: int64(p.Amount), Receipts: len(p.Receipts),
				Paid: p.Paid, Transaction: p.Transaction})
		}
	}
	sort.SliceStable(a.Payouts, func(i, k int) bool { return a.Payouts[i].IssuedAt.After(a.Payouts[k].IssuedAt) })
	a.Payouts = a.Payouts[:min(len(a.Payouts), maxPayoutRows)]
	earnings, err := l.Payouts.Earnings(provider)
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
		a.Rows = append(a.Rows, protocol.EarningRow{Earning: e, Paid: isPaid})
	}
	if len(a.Rows) > MaxEarningRows {
		a.Rows, a.Truncated = a.Rows[len(a.Rows)-MaxEarningRows:], true
	}
	return a, nil
}
