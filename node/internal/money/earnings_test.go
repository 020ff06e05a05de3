package money

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// A provider's earnings (docs/settlement.md, section 9): the coordinator's answer, and the
// provider's view by period, model or GPU.

// TestEarningsOf: the coordinator answers a provider's earnings of the jobs that ended in
// the period asked, and, whatever the period, what is pending and what was paid, with the
// batches that paid it. Another provider's earnings are not in it.
func TestEarningsOf(t *testing.T) {
	c := newCoordinator(t)
	p := c.usdcProvider(t, protocol.PayoutWeekly)
	c.earn(t, p.party, 1_000_000) // Monday 7
	c.clock.Advance(48 * time.Hour)
	c.earn(t, p.party, 2_000_000) // Wednesday 9
	v, err := c.RunPayouts(context.Background(), runNow)
	if err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(48 * time.Hour)
	c.earn(t, p.party, 3_000_000) // Friday 11, pending
	c.earn(t, newParty(), 5_000_000)

	a, err := c.EarningsOf(p.id.String(), start.Add(24*time.Hour), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Net != 1_800_000+2_700_000 || a.Charge != 5_000_000 || a.Commission != 500_000 || len(a.Rows) != 2 {
		t.Fatalf("from Tuesday: net %d, charge %d, commission %d, %d rows", a.Net, a.Charge, a.Commission, len(a.Rows))
	}
	if a.Pending != 2_700_000 || a.Paid != 2_700_000 {
		t.Fatalf("pending %d, paid %d", a.Pending, a.Paid)
	}
	if !a.Rows[0].Paid || a.Rows[1].Paid {
		t.Fatalf("rows: %+v", a.Rows)
	}
	if len(a.Payouts) != 1 || a.Payouts[0].Batch != v.BatchID || !a.Payouts[0].Paid || a.Payouts[0].Amount != 2_700_000 || a.Payouts[0].Transaction != v.Transactions[0] {
		t.Fatalf("payouts: %+v", a.Payouts)
	}
	if a, _ := c.EarningsOf(p.id.String(), time.Time{}, start.Add(time.Hour)); a.Net != 900_000 || a.Pending != 2_700_000 {
		t.Fatalf("until Monday 13:00: net %d, pending %d", a.Net, a.Pending)
	}

	rows := MaxEarningRows
	t.Cleanup(func() { MaxEarningRows = rows })
	MaxEarningRows = 1
	a, _ = c.EarningsOf(p.id.String(), time.Time{}, time.Time{})
	if !a.Truncated || len(a.Rows) != 1 || a.Rows[0].Net != 2_700_000 || a.Net != 5_400_000 {
		t.Fatalf("truncated: %+v", a)
	}
}

// providerWallet is the wallet of a provider whose trusted coordinator is c itself (served
// in-process), plus the unreachable coordinators given.
func providerWallet(t *testing.T, c *coordinator, unreachable ...peer.ID) *Wallet {
	t.Helper()
	cfg := config.Defaults(config.RoleProvider)
	cfg.Wallet.RPC = "https://api.devnet.solana.com"
	cfg.Trust.Coordinators = []string{c.id.String()}
	n := c.serve(t)
	for _, u := range unreachable {
		cfg.Trust.Coordinators = append(cfg.Trust.Coordinators, u.String())
		n.coord.Peerstore().AddAddr(u, ma.StringCast("/ip4/10.9.9.9/tcp/4001"), time.Hour)
	}
	return NewWallet(Deps{Base: subsystem.Base{Peer: &p2p.Peer{ID: c.id, Key: c.key, Host: n.coord}, Clock: c.clock, Log: quiet(), Metrics: c.metrics}, Ledger: storesOf(c.ledger),
		Config: cfg}, c.Settlement)
}

// TestProviderEarnings: a provider sees its earnings of the current week or month, or of
// dates it gives, by model or by GPU (a job's earning split evenly over the GPUs it held,
// the remainder to the first, so that the parts add up), pending and paid, newest first;
// a coordinator that does not answer is named, not counted.
func TestProviderEarnings(t *testing.T) {
	c := newCoordinator(t)
	c.settings(t, c.party, protocol.PayoutSettings{Method: protocol.PayoutUSDC, Schedule: protocol.PayoutWeekly, SolanaAddress: c.treasury.PublicKey().String()})
	c.earn(t, c.party, 4_000_000) // last week
	c.clock.Advance(7 * 24 * time.Hour)
	two := c.earn(t, c.party, 1_000_000) // net 900,000 on 2 GPUs
	c.clock.Advance(time.Minute)
	three := c.earn(t, c.party, 1_000_001) // net 900,001 on 3 GPUs
	c.clock.Advance(time.Minute)
	unknown := c.earn(t, c.party, 1_000_000) // a job this node does not know
	c.ledger.Jobs.PutJob(ledger.Job{ID: two, Side: "provider", GPUs: []string{"GPU-a", "GPU-b"}})
	c.ledger.Jobs.PutJob(ledger.Job{ID: three, Side: "provider", GPUs: []string{"GPU-a", "GPU-b", "GPU-c"}})
	_, down := recordtest.NewKey()
	w := providerWallet(t, c, down)

	v, err := w.Earnings(context.Background(), api.EarningsQuery{Period: "week", By: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	monday := time.Date(2026, 12, 14, 0, 0, 0, 0, time.UTC)
	if !v.From.Equal(monday) || v.Total != 2_700_001 || v.PendingUSDC != "6.300001" || v.Pending != 6_300_001 || len(v.History) != 3 {
		t.Fatalf("this week: from %s, total %d, pending %s, %d jobs", v.From, v.Total, v.PendingUSDC, len(v.History))
	}
	want := map[string]int64{"GPU-a": 450_000 + 300_001, "GPU-b": 450_000 + 300_000, "GPU-c": 300_000, "unknown GPU (H100-80GB)": 900_000}
	var sum int64
	for _, g := range v.Groups {
		if want[g.Key] != g.Net {
			t.Errorf("group %s earned %d, want %d", g.Key, g.Net, want[g.Key])
		}
		sum += g.Net
	}
	if len(v.Groups) != 4 || sum != v.Total {
		t.Fatalf("%d groups adding up to %d of %d", len(v.Groups), sum, v.Total)
	}
	if v.History[0].Job != unknown || v.History[2].Job != two {
		t.Fatalf("history not newest first: %+v", v.History)
	}
	if len(v.Unreachable) != 1 || !strings.Contains(v.Unreachable[0], down.String()) {
		t.Fatalf("unreachable: %v", v.Unreachable)
	}

	byModel, err := w.Earnings(context.Background(), api.EarningsQuery{Period: "month"})
	if err != nil || byModel.By != "model" || len(byModel.Groups) != 1 || byModel.Groups[0].Jobs != 4 || byModel.Groups[0].GPUSeconds != 4*3600 || byModel.Total != 6_300_001 {
		t.Fatalf("this month by model: %+v %v", byModel.Groups, err)
	}

	if _, err := c.RunPayouts(context.Background(), runNow); err != nil {
		t.Fatal(err)
	}
	paid, err := w.Earnings(context.Background(), api.EarningsQuery{From: monday})
	if err != nil || paid.PaidUSDC != "6.300001" || paid.Pending != 0 || len(paid.Payouts) != 1 || !strings.Contains(paid.Payouts[0].Explorer, "cluster=devnet") {
		t.Fatalf("after the payout: %+v %v", paid, err)
	}
	for _, h := range paid.History {
		if !h.Paid {
			t.Fatalf("job %s not shown paid", h.Job)
		}
	}

	for _, q := range []api.EarningsQuery{{Period: "year"}, {By: "renter"}} {
		if _, err := w.Earnings(context.Background(), q); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%+v: %v", q, err)
		}
	}
	renter := NewWallet(Deps{Base: subsystem.Base{Peer: &p2p.Peer{ID: c.id, Key: c.key}, Clock: c.clock, Log: quiet(), Metrics: c.metrics}, Ledger: storesOf(c.ledger),
		Config: config.Defaults(config.RoleRenter)}, nil)
	if _, err := renter.Earnings(context.Background(), api.EarningsQuery{}); !errors.Is(err, api.ErrWrongRole) {
		t.Fatalf("a renter's earnings: %v", err)
	}
}

// TestPeriodStart: a week starts on Monday 00:00 UTC, a month on its first day.
func TestPeriodStart(t *testing.T) {
	sunday := time.Date(2026, 12, 14, 0, 30, 0, 0, time.FixedZone("CET", 3600)) // Monday 00:30 in Paris is Sunday in UTC
	for _, tc := range []struct {
		period string
		now    time.Time
		want   time.Time
	}{
		{"week", start, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)},
		{"week", sunday, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)},
		{"month", start, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"", start, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
	} {
		if got, err := periodStart(tc.period, tc.now); err != nil || !got.Equal(tc.want) {
			t.Errorf("periodStart(%q, %s) = %s %v, want %s", tc.period, tc.now, got, err, tc.want)
		}
	}
}
