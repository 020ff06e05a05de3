package devnet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/sandbox"
)

// What the devnet shows once its nodes run: the providers' applications and the
// coordinator's decisions, and a job the renter runs.

// devnetOnboard has every provider apply with a generated application, then decides as a
// reviewer would: with three providers or more, the last is rejected and the one before it
// left pending, so that the queue shows every state; the others are approved with the tier
// the rule proposes. It returns the approved providers.
func devnetOnboard(ctx context.Context, coord *api.Client, procs []*devnetProc, say func(string, ...any)) (map[string]bool, error) {
	return onboard(ctx, coord, procs, say, true)
}

// devnetOnboardAll is devnetOnboard approving every provider (the soak's).
func devnetOnboardAll(ctx context.Context, coord *api.Client, procs []*devnetProc, say func(string, ...any)) (map[string]bool, error) {
	return onboard(ctx, coord, procs, say, false)
}

// onboard has every provider apply and decides; with examples, one rejection and one
// application left pending from three providers on.
func onboard(ctx context.Context, coord *api.Client, procs []*devnetProc, say func(string, ...any), examples bool) (map[string]bool, error) {
	var provs []*devnetProc
	for _, p := range procs {
		if p.Role == config.RoleProvider {
			provs = append(provs, p)
		}
	}
	for i, p := range provs {
		h := config.Home{Dir: p.Home}
		cfg, err := h.Config()
		if err != nil {
			return nil, err
		}
		pcl, err := api.NewClient(h)
		if err != nil {
			return nil, err
		}
		if _, err := pcl.Apply(ctx, devnetApplication(i, cfg)); err != nil {
			return nil, fmt.Errorf("%s: apply: %w", p.Name, err)
		}
	}
	byProvider := map[string]api.ApplicationView{}
	deadline := time.Now().Add(60 * time.Second)
	for len(byProvider) < len(provs) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the coordinator received %d of %d applications after 60 s", len(byProvider), len(provs))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		apps, err := coord.Applications(ctx, "", "")
		if err != nil {
			return nil, err
		}
		for _, a := range apps {
			byProvider[a.Provider] = a
		}
	}
	approved := map[string]bool{}
	for i, p := range provs {
		a := byProvider[p.PeerID]
		d := api.Decision{Action: "approve", Actor: "devnet", Message: "approved by the devnet's rule"}
		switch {
		case examples && len(provs) >= 3 && i == len(provs)-1:
			d = api.Decision{Action: "reject", Actor: "devnet", Message: "an example rejection: GPUs unreachable from the coordinator's probes"}
		case examples && len(provs) >= 3 && i == len(provs)-2:
			say("%s: application %s left pending (gpunex coordinator applications list --home %s)", p.Name, a.ID, filepath.Join(filepath.Dir(p.Home), "coordinator"))
			continue
		}
		v, err := coord.Decide(ctx, a.ID, d)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", p.Name, d.Action, err)
		}
		if v.Status == "approved" {
			approved[p.PeerID] = true
		}
		say("%s: application %s %s", p.Name, a.ID, strings.TrimSpace(v.Status+" "+v.Tier))
	}
	return approved, nil
}

// devnetApplication fills in provider i's application: every other provider has a UPS,
// a two-year commitment and a symmetric 10 Gbps link (Enterprise), the others not
// (Community).
func devnetApplication(i int, cfg config.Config) map[string]any {
	enterprise := i%2 == 0
	up, months := 0.5, 6
	if enterprise {
		up, months = 10, 24
	}
	var gpus []map[string]any
	for _, g := range cfg.Provider.GPUs {
		gpus = append(gpus, map[string]any{
			"model": g.Model, "count": g.Count, "host_ram_gb": 512, "internet_up_gbps": up, "internet_down_gbps": 10,
			"availability": "24/7", "location": map[string]string{"city": "Devnet City", "country": "FR", "region": cfg.Provider.Region},
		})
	}
	return map[string]any{
		"name": fmt.Sprintf("Devnet Operator %d", i+1), "email": fmt.Sprintf("provider-%d@devnet.invalid", i+1),
		"gpus": gpus, "ups": enterprise, "commitment_months": months,
		"maintenance_notes": "2 hours on the first Sunday of each month",
	}
}

// devnetJob has the renter run a job on the first approved provider, with a busybox image
// built from the host's busybox-static, and prints its output as it streams. It returns the
// offer it ran on.
func devnetJob(ctx context.Context, renter *api.Client, dir string, say func(string, ...any)) (string, error) {
	archive := filepath.Join(dir, "busybox.tar")
	f, err := os.Create(archive)
	if err != nil {
		return "", err
	}
	_, err = sandbox.BusyboxImage(f, "gpunex.devnet/busybox:1")
	f.Close()
	if err != nil {
		say("no demo job: %v", err)
		return "", nil
	}
	rows, err := renter.Search(ctx, url.Values{})
	if err != nil || len(rows) == 0 {
		return "", fmt.Errorf("no offer to run the demo job on: %v", err)
	}
	// An offer found a moment ago may have changed since (the benchmarks delist provider-1's
	// throttled GPUs as the devnet starts): a refused proposal tries the next offer.
	var offer api.OfferRow
	var v api.JobView
	for i, row := range rows {
		offer = row
		say("the renter runs a job on %s (%s)…", offer.Provider, offer.Model)
		v, err = renter.ProposeJob(ctx, api.JobRequest{Offer: offer.ID, GPUs: 1, MaxSeconds: 120, ImageArchive: archive,
			Args: []string{"sh", "-c", "echo hello from a gpunex sandbox on $(hostname); echo allocated GPUs: $GPUNEX_VISIBLE_GPUS; echo done > /output/result.txt; sleep 6"}})
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "proposal refused") || i == min(len(rows), 3)-1 {
			return "", err
		}
		say("  refused (%v): trying the next offer", err)
	}
	w := &prefixWriter{w: devnetOut{say}, prefix: "  | "}
	if err := renter.JobLogs(ctx, v.ID, true, w); err != nil {
		return "", err
	}
	w.flush()
	if v, err = renter.Job(ctx, v.ID); err != nil {
		return "", err
	}
	say("job %s %s: %s, exit code %d, %d s, cost %s USDC (%d s metered by checkpoints both sides signed as it ran; receipt signed by both sides)",
		v.ID, v.State, v.ExitReason, v.ExitCode, v.Seconds, v.CostUSDC, v.MeteredSeconds)
	return offer.ID, nil
}

// devnetOut writes whole lines through say.
type devnetOut struct{ say func(string, ...any) }

func (d devnetOut) Write(p []byte) (int, error) {
	d.say("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// prefixWriter prefixes each line written through it.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		p.w.Write([]byte(p.prefix + string(p.buf[:i+1])))
		p.buf = p.buf[i+1:]
	}
}

func (p *prefixWriter) flush() {
	if len(p.buf) > 0 {
		p.w.Write([]byte(p.prefix + string(p.buf) + "\n"))
		p.buf = nil
	}
}
