package devnet

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// The soak's checks: the money invariants, read through the nodes' APIs and on chain, and
// the nodes' resources.

// breaks records an invariant break once (the same break found again is not repeated).
func (s *soak) breaks(check, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := check + ": " + what
	if s.broken[key] {
		return
	}
	s.broken[key] = true
	s.report.Breaks = append(s.report.Breaks, key)
	s.say("soak: BREAK %s", key)
}

// check runs every check on the nodes that are up. Those that a fault in flight can make
// untrue for a moment (a deposit sent but not yet credited, a payout sent but not yet
// recorded) run only at the end (final), after every fault is undone and the jobs ended.
func (s *soak) check(ctx context.Context, final bool) {
	s.mu.Lock()
	s.report.Checks++
	s.mu.Unlock()
	var deposited, paid protocol.MicroUSDC
	allUp := true
	for _, r := range s.renters {
		d, ok := s.checkRenter(ctx, r, final)
		deposited += d
		allUp = allUp && ok
	}
	for _, p := range s.provs {
		pd, ok := s.checkProvider(ctx, p, final)
		paid += pd
		allUp = allUp && ok
	}
	if final && allUp {
		if t, err := s.treasury(ctx); err != nil {
			s.breaks("treasury", err.Error())
		} else if t != deposited-paid {
			s.breaks("treasury", fmt.Sprintf("the treasury holds %s USDC on chain, deposits less payouts make %s", protocol.MicroUSDC(t), deposited-paid))
		}
	}
	s.sample(ctx)
}

// checkRenter checks a renter's account at the coordinator: its books balance, no hold
// leaks, no job charged more than its countersigned usage allows; at the end, its wallet
// on chain. It returns what the renter deposited, and false when it could not tell.
func (s *soak) checkRenter(ctx context.Context, r *devnetProc, final bool) (protocol.MicroUSDC, bool) {
	cl := s.client(r)
	b, err := cl.Balance(ctx, "")
	if err != nil {
		if final {
			s.breaks("renter books", fmt.Sprintf("%s: no balance at the end: %v", r.Name, err))
		}
		return 0, false
	}
	dep, charged := microUSDC(b.DepositedUSDC), microUSDC(b.ChargedUSDC)
	if dep != b.Available+b.Held+charged {
		s.breaks("renter books", fmt.Sprintf("%s: deposited %s != available %s + held %s + charged %s", r.Name, dep, b.Available, b.Held, charged))
	}
	jobs, err := cl.Jobs(ctx)
	if err != nil {
		return dep, false
	}
	byID := map[string]protocol.JobStatus{}
	for _, j := range jobs {
		byID[j.ID] = j.JobStatus
	}
	for _, h := range b.Holds {
		amount, charge := microUSDC(h.AmountUSDC), protocol.MicroUSDC(0)
		if h.ChargeUSDC != "" {
			charge = microUSDC(h.ChargeUSDC)
		}
		switch {
		case charge > amount:
			s.breaks("holds", fmt.Sprintf("job %s charged %s above its hold of %s", h.Job, charge, amount))
		case h.State == "held" && time.Now().After(h.ExpiresAt.Add(2*time.Minute+maxSkew)):
			// A coordinator whose clock is behind releases a hold that much later.
			s.breaks("holds", fmt.Sprintf("job %s's hold of %s still held %s past its expiry", h.Job, amount, 2*time.Minute+maxSkew))
		case final && (h.State == "pending" || h.State == "disputed"):
			s.breaks("holds", fmt.Sprintf("job %s's hold still %s after the run settled", h.Job, h.State))
		}
		if s.checkDecided(h, charge) {
			continue
		}
		if j, ok := byID[h.Job]; ok && h.State == "charged" {
			allowed := protocol.Cost(j.Price, j.GPUs, j.MeteredSeconds+60)
			if j.Countersign {
				allowed = max(allowed, j.Cost)
			}
			if charge > allowed {
				s.breaks("usage", fmt.Sprintf("job %s charged %s, its countersigned usage allows %s", h.Job, charge, allowed))
			}
		}
	}
	if final {
		h := config.Home{Dir: r.Home}
		cfg, err := h.Config()
		if err == nil {
			var k chain.PrivateKey
			if k, err = chain.LoadKeypair(h.Path(cfg.Wallet.Keypair)); err == nil {
				var have uint64
				if have, err = s.money.c.TokenBalance(ctx, k.PublicKey(), s.money.mint); err == nil && protocol.MicroUSDC(have) != devnetRenterUSDC-dep {
					s.breaks("renter wallet", fmt.Sprintf("%s: %s USDC on chain, %s minted less %s deposited", r.Name, protocol.MicroUSDC(have), devnetRenterUSDC, dep))
				}
			}
		}
		if err != nil {
			s.breaks("renter wallet", fmt.Sprintf("%s: %v", r.Name, err))
		}
	}
	return dep, true
}

// checkProvider checks that a provider is charged once per job and, at the end, that its
// wallet holds on chain what the coordinator's ledger says it paid: more is a payment made
// twice, less a payment recorded and never made. It returns what it was paid.
func (s *soak) checkProvider(ctx context.Context, p *devnetProc, final bool) (protocol.MicroUSDC, bool) {
	e, err := s.client(p).Earnings(ctx, url.Values{})
	if err != nil {
		if final {
			s.breaks("provider earnings", fmt.Sprintf("%s: no earnings at the end: %v", p.Name, err))
		}
		return 0, false
	}
	seen := map[string]bool{}
	for _, row := range e.History {
		if seen[row.Job] {
			s.breaks("earnings", fmt.Sprintf("%s earned job %s twice", p.Name, row.Job))
		}
		seen[row.Job] = true
	}
	paid := microUSDC(e.PaidUSDC)
	if !final {
		return paid, true
	}
	cfg, err := config.Home{Dir: p.Home}.Config()
	if err != nil {
		s.breaks("provider wallet", err.Error())
		return paid, false
	}
	addr, err := chain.ParsePublicKey(cfg.Payout.SolanaAddress)
	if err != nil {
		s.breaks("provider wallet", err.Error())
		return paid, false
	}
	have, err := s.money.c.TokenBalance(ctx, addr, s.money.mint)
	switch {
	case err != nil && paid != 0:
		s.breaks("provider wallet", fmt.Sprintf("%s: %v", p.Name, err))
	case protocol.MicroUSDC(have) > paid:
		s.breaks("double payment", fmt.Sprintf("%s holds %s USDC on chain, paid %s by the ledger", p.Name, protocol.MicroUSDC(have), paid))
	case protocol.MicroUSDC(have) < paid:
		s.breaks("payment not made", fmt.Sprintf("%s holds %s USDC on chain, paid %s by the ledger", p.Name, protocol.MicroUSDC(have), paid))
	}
	return paid, true
}

// treasury is the coordinator's USDC on chain.
func (s *soak) treasury(ctx context.Context) (protocol.MicroUSDC, error) {
	h := config.Home{Dir: s.coordinatorProc.Home}
	cfg, err := h.Config()
	if err != nil {
		return 0, err
	}
	k, err := chain.LoadKeypair(h.Path(cfg.Settlement.TreasuryKeypair))
	if err != nil {
		return 0, err
	}
	have, err := s.money.c.TokenBalance(ctx, k.PublicKey(), s.money.mint)
	return protocol.MicroUSDC(have), err
}

// resourceSeries is one node's samples since its last start (a restart begins anew).
type resourceSeries struct {
	pid                     int
	at                      []float64 // seconds since the series began
	goroutines, fds, rssKiB []float64
	began                   time.Time
	samples, restarts       int
}

// ResourceTrend is one node's resources over the last stretch it ran without a restart:
// first and last sample, and the least-squares slope per hour.
type ResourceTrend struct {
	Node                                         string
	Samples, Restarts                            int
	Goroutines, FDs, RSSKiB                      [2]float64
	GoroutinesPerHour, FDsPerHour, RSSKiBPerHour float64
}

// sample reads each running node's goroutines (its metrics), open descriptors and
// resident memory (/proc).
func (s *soak) sample(ctx context.Context) {
	s.procMu.Lock()
	type up struct {
		name, base string
		pid        int
	}
	var nodes []up
	for _, p := range s.procs {
		if !p.Offline {
			nodes = append(nodes, up{p.Name, s.client(p).Base, p.PID})
		}
	}
	s.procMu.Unlock()
	for _, n := range nodes {
		g, err := goroutines(ctx, n.base)
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", n.pid))
		if err != nil {
			continue
		}
		rss := statusKiB(n.pid, "VmRSS:")
		s.mu.Lock()
		ser := s.trend[n.name]
		if ser == nil || ser.pid != n.pid {
			restarts := 0
			if ser != nil {
				restarts = ser.restarts + 1
			}
			ser = &resourceSeries{pid: n.pid, began: time.Now(), restarts: restarts}
			s.trend[n.name] = ser
		}
		ser.at = append(ser.at, time.Since(ser.began).Seconds())
		ser.goroutines, ser.fds, ser.rssKiB = append(ser.goroutines, g), append(ser.fds, float64(len(fds))), append(ser.rssKiB, rss)
		s.mu.Unlock()
	}
}

// goroutines reads go_goroutines from a node's /metrics.
func goroutines(ctx context.Context, base string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no go_goroutines in %s/metrics", base)
}

// statusKiB reads a "Name: N kB" line of /proc/PID/status.
func statusKiB(pid int, name string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			f, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return f
		}
	}
	return 0
}

// trends sums up each node's last series.
func (s *soak) trends() []ResourceTrend {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ResourceTrend
	for name, ser := range s.trend {
		n := len(ser.at)
		if n == 0 {
			continue
		}
		out = append(out, ResourceTrend{Node: name, Samples: n, Restarts: ser.restarts,
			Goroutines: [2]float64{ser.goroutines[0], ser.goroutines[n-1]}, FDs: [2]float64{ser.fds[0], ser.fds[n-1]}, RSSKiB: [2]float64{ser.rssKiB[0], ser.rssKiB[n-1]},
			GoroutinesPerHour: slope(ser.at, ser.goroutines) * 3600, FDsPerHour: slope(ser.at, ser.fds) * 3600, RSSKiBPerHour: slope(ser.at, ser.rssKiB) * 3600})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// slope is the least-squares slope of y over x (0 with fewer than 3 points).
func slope(x, y []float64) float64 {
	n := float64(len(x))
	if len(x) < 3 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// printTable prints the soak's table: faults applied, jobs, money checks, resources.
func (s *soak) printTable() {
	r := s.report
	s.say("soak table (seed %d, %s, %d providers, %d renters)", r.Seed, s.o.Duration, s.o.Providers, s.o.Renters)
	s.say("  %-28s %s", "fault", "applied")
	for _, k := range FaultKinds {
		if why := r.NotApplied[k]; why != "" {
			s.say("  %-28s not applied: %s", k, why)
			continue
		}
		s.say("  %-28s %d", k, r.Applied[k])
	}
	s.say("  %-28s %s", "jobs", "count")
	var keys []string
	for k := range r.Jobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.say("  %-28s %d", k, r.Jobs[k])
	}
	s.say("  deposits %d, payout batches %d, disputes decided %d, checks %d, dropped transactions %d, packets dropped by partitions %d",
		r.Deposits, r.Batches, r.Disputes, r.Checks, s.rpc.dropped.Load(), s.part.dropped.Load())
	s.say("  invariant breaks: %d", len(r.Breaks))
	for _, b := range r.Breaks {
		s.say("    %s", b)
	}
	s.say("  %-12s %8s %8s %14s %14s %18s", "node", "samples", "restarts", "goroutines", "fds", "rss KiB")
	for _, t := range r.Resources {
		s.say("  %-12s %8d %8d %6.0f→%-4.0f%+5.0f/h %6.0f→%-4.0f%+5.0f/h %8.0f→%-8.0f%+6.0f/h", t.Node, t.Samples, t.Restarts,
			t.Goroutines[0], t.Goroutines[1], t.GoroutinesPerHour, t.FDs[0], t.FDs[1], t.FDsPerHour, t.RSSKiB[0], t.RSSKiB[1], t.RSSKiBPerHour)
	}
}
