package devnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/sandbox"
)

// Options configure Run.
type Options struct {
	Dir       string
	Providers int
	Binary    string    // the gpunex binary the nodes run
	Out       io.Writer // progress and summary
	// Outage names the provider the devnet kills once it is ready and restarts later, to
	// show its reliability score dropping and recovering: "provider-K", "none", or ""
	// (OutageAuto) for provider-1 when at least two providers are certified.
	Outage string
	// OutageAfter is the time from "devnet ready" to the outage; OutageFor how long the
	// provider stays offline.
	OutageAfter, OutageFor time.Duration
}

// Devnet outage choices besides a provider's name, and the default timings.
const (
	OutageAuto  = "auto"
	OutageNone  = "none"
	OutageAfter = 30 * time.Second
	OutageFor   = 60 * time.Second
)

// The devnet coordinator's reliability settings: a probe round every 2 s on average (1 to
// 3 s) and a 1-minute half-life (the least config.toml accepts), so that a provider offline
// for a minute loses about 25 points, and the weight of its misses halves every minute after
// it returns, however long the devnet has run (docs/reliability.md, "The devnet's outage").
const (
	ProbeInterval = 2 * time.Second
	HalfLife      = time.Minute
)

// Node describes one node in devnet.json.
type Node struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	Home   string `json:"home"`
	PeerID string `json:"peer_id"`
	API    string `json:"api"`
	PID    int    `json:"pid"`
	// Offline is true while the devnet's outage keeps this node down.
	Offline bool `json:"offline,omitempty"`
}

// File is the content of devnet.json.
type File struct {
	Nodes []Node `json:"nodes"`
	// SolanaRPC is the devnet's local Solana runtime; USDCMint its test USDC mint and
	// Cluster its genesis hash.
	SolanaRPC string `json:"solana_rpc"`
	USDCMint  string `json:"usdc_mint"`
	Cluster   string `json:"cluster"`
}

// The devnet's provider mix: models with their VRAM and a typical price, and regions.
var devnetGPUs = []config.GPUConfig{
	{Model: "H100-80GB", Count: 8, VRAMGB: 80, PriceUSDC: "2.10"},
	{Model: "A100-80GB", Count: 4, VRAMGB: 80, PriceUSDC: "1.40"},
	{Model: "L40S-48GB", Count: 4, VRAMGB: 48, PriceUSDC: "0.95"},
	{Model: "L4-24GB", Count: 2, VRAMGB: 24, PriceUSDC: "0.45"},
	{Model: "RTX4090-24GB", Count: 2, VRAMGB: 24, PriceUSDC: "0.55"},
}

var devnetRegions = []string{"eu-west", "us-east", "ap-south"}

type devnetProc struct {
	Node
	cmd  *exec.Cmd
	done chan error // receives cmd.Wait's result; whoever takes it puts it back
}

// Run starts a coordinator, the providers and a renter as separate processes of the
// gpunex binary, waits until the renter sees every provider's offer, writes devnet.json,
// and runs until ctx ends; then it stops every node and waits for each to exit.
func Run(ctx context.Context, o Options) (err error) {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if o.OutageAfter <= 0 {
		o.OutageAfter = OutageAfter
	}
	if o.OutageFor <= 0 {
		o.OutageFor = OutageFor
	}
	outage, err := devnetOutageName(o)
	if err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(o.Out, format+"\n", a...) }
	listen := []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
	jsonPath := filepath.Join(dir, "devnet.json")
	os.Remove(jsonPath)

	var procs []*devnetProc
	var ctrd *sandbox.Daemon
	var money *devnetChain
	defer func() {
		os.Remove(jsonPath)
		stopAll(procs, say)
		if ctrd != nil {
			ctrd.Stop() // after the providers, so that they stop their jobs themselves
		}
		if money != nil {
			money.rt.Stop()
		}
	}()

	// launch runs a node on its home and waits for its API; a restart appends to node.log.
	launch := func(p *devnetProc, restart bool) error {
		h := config.Home{Dir: p.Home}
		h.RemoveAPIAddr()
		flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
		if restart {
			flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
		}
		logf, err := os.OpenFile(h.Path("node.log"), flags, 0o644)
		if err != nil {
			return err
		}
		defer logf.Close()
		cmd := exec.Command(o.Binary, "node", "run", "--home", h.Dir)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = procAttr()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		p.cmd, p.done, p.PID, p.Offline = cmd, done, cmd.Process.Pid, false
		if !restart {
			procs = append(procs, p)
		}
		cl, st, err := waitAPI(ctx, h, p)
		if err != nil {
			return fmt.Errorf("%s did not start (see %s): %w", p.Name, h.Path("node.log"), err)
		}
		p.API, p.PeerID = cl.Base, st.PeerID
		return nil
	}
	start := func(name string, opts config.InitOptions) (*devnetProc, error) {
		h := config.Home{Dir: filepath.Join(dir, name)}
		opts.Listen = listen
		if name == outage {
			// Over TCP only, to the coordinator as well: once the provider is killed, the
			// kernel closes its connection and refuses new ones at once, so that each probe
			// round counts a miss. A QUIC connection or dial to a dead peer would hang until
			// the probe's 10 s timeout (and a live-looking connection for up to its idle
			// timeout), leaving one miss per 12 s and holding up every round.
			opts.Listen = listen[:1]
			var tcp []string
			for _, a := range opts.Bootstrap {
				if strings.Contains(a, "/tcp/") {
					tcp = append(tcp, a)
				}
			}
			opts.Bootstrap = tcp
		}
		opts.OfferTTL, opts.Republish = "2m", "30s"
		opts.Force = true // a devnet starts fresh every time
		opts.Version = api.Version
		opts.BenchStorageMB, opts.BenchNetworkMB = 16, 4
		if err := os.RemoveAll(h.Path(config.DataDir)); err != nil {
			return nil, err
		}
		if _, _, err := config.Init(h.Dir, opts); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := money.configure(ctx, h); err != nil {
			return nil, fmt.Errorf("%s: money settings: %w", name, err)
		}
		p := &devnetProc{Node: Node{Name: name, Role: opts.Role, Home: h.Dir}}
		if err := launch(p, false); err != nil {
			return nil, err
		}
		say("started %-12s %s  %s", name, p.PeerID, p.API)
		return p, nil
	}

	// Jobs run in a containerd of the devnet's own, when one can run here.
	ctrdAddr := ""
	if d, err := sandbox.StartContainerd(ctx, filepath.Join(dir, "containerd")); err != nil {
		say("jobs disabled in this devnet: %v", err)
	} else {
		ctrd = d
		ctrdAddr = d.Address()
		say("started containerd       %s", ctrdAddr)
	}

	// Money: a local Solana runtime with a test USDC mint (docs/settlement.md).
	solanaLog, err := os.Create(filepath.Join(dir, "solana.log"))
	if err != nil {
		return err
	}
	defer solanaLog.Close()
	if money, err = startDevnetChain(ctx, solanaLog); err != nil {
		return fmt.Errorf("the local Solana runtime did not start (run make deps): %w", err)
	}
	say("started Solana runtime   %s (test USDC mint %s)", money.rt.URL, money.mint)

	// Frequent probes and a short half-life: scores move within a minute.
	// Every node is on this machine: its loopback, shared by them all, is no measure of a
	// provider's link, so the devnet's coordinator holds none to Enterprise's 800 Mbit/s.
	coord, err := start("coordinator", config.InitOptions{Role: config.RoleCoordinator, ProbeInterval: ProbeInterval, HalfLife: HalfLife, EnterpriseLinkMbps: 1})
	if err != nil {
		return err
	}
	cl, _ := api.NewClient(config.Home{Dir: coord.Home})
	st, err := cl.Status(ctx)
	if err != nil {
		return err
	}
	boot := st.Addrs
	for i := 1; i <= o.Providers; i++ {
		g := devnetGPUs[(i-1)%len(devnetGPUs)]
		g.Simulated = true
		gpus := []config.GPUConfig{g}
		if i == 1 {
			// Two throttled GPUs at 45% of their datasheet: the benchmarks delist them and
			// the provider is told why (gpunex notifications).
			gpus = append(gpus, config.GPUConfig{Model: "L4-24GB", Count: 2, VRAMGB: 24, PriceUSDC: "0.40", Simulated: true, PerfFactor: 0.45})
		}
		if _, err := start(fmt.Sprintf("provider-%d", i), config.InitOptions{
			Role: config.RoleProvider, Bootstrap: boot, Region: devnetRegions[(i-1)%len(devnetRegions)], GPUs: gpus,
			ContainerdAddress: ctrdAddr,
		}); err != nil {
			return err
		}
	}
	// The renter countersigns usage every 2 s, so that the demo job is metered as it runs.
	renter, err := start("renter-1", config.InitOptions{Role: config.RoleRenter, Bootstrap: boot, CheckpointInterval: 2 * time.Second})
	if err != nil {
		return err
	}

	want, err := devnetOnboard(ctx, cl, procs, say)
	if err != nil {
		return err
	}
	say("waiting for the renter to see every certified provider's offer…")
	rcl, _ := api.NewClient(config.Home{Dir: renter.Home})
	deadline := time.Now().Add(90 * time.Second)
	for {
		rows, err := rcl.Search(ctx, url.Values{})
		seen := map[string]bool{}
		for _, r := range rows {
			if want[r.Provider] {
				seen[r.Provider] = true
			}
		}
		if err == nil && len(seen) == len(want) {
			say("the renter sees %d offers from %d providers", len(rows), len(seen))
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the renter sees %d of %d providers after 90 s (logs in %s/*/node.log)", len(seen), len(want), dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if err := checkAlive(procs); err != nil {
			return err
		}
	}
	if err := devnetDepositFunds(ctx, rcl, say); err != nil {
		return err
	}
	demo := ""
	if ctrdAddr != "" {
		if demo, err = devnetJob(ctx, rcl, dir, say); err != nil {
			return fmt.Errorf("the demo job failed: %w", err)
		}
		if err := devnetSettle(ctx, cl, rcl, money.rt.URL, dir, say); err != nil {
			return err
		}
	}
	writeFile := func() error {
		f := File{SolanaRPC: money.rt.URL, USDCMint: money.mint.String(), Cluster: money.rt.GenesisHash}
		for _, p := range procs {
			f.Nodes = append(f.Nodes, p.Node)
		}
		return writeJSONFile(jsonPath, f)
	}
	if err := writeFile(); err != nil {
		return err
	}
	say("devnet ready: %s", jsonPath)
	say("dashboards (each link opens once, within 5 minutes; a new one: gpunex dashboard --home HOME):")
	for _, p := range procs {
		cl, err := api.NewClient(config.Home{Dir: p.Home})
		if err != nil {
			continue
		}
		if link, err := cl.DashboardLink(ctx); err == nil {
			say("     %-12s %s", p.Name, link.URL)
		}
	}
	say("try: gpunex offers search --home %s", renter.Home)
	say("     gpunex offer set-price --home %s --model %s --usdc 1.99", filepath.Join(dir, "provider-1"), devnetGPUs[0].Model)
	if demo != "" {
		say("     gpunex job run --home %s --offer %s --gpus 1 --max-hours 0.1 --image-archive %s -- sh -c 'echo hello; ls /output'",
			renter.Home, demo, filepath.Join(dir, "busybox.tar"))
	}
	say("     gpunex wallet balance --home %s; gpunex earnings --home %s; gpunex price recommend --home %s",
		renter.Home, filepath.Join(dir, "provider-1"), filepath.Join(dir, "provider-1"))
	say("     gpunex coordinator payouts list --home %s", coord.Home)
	var out *devnetProc
	for _, p := range procs {
		if p.Name == outage {
			out = p
		}
	}
	switch {
	case o.Outage == "" || o.Outage == OutageAuto:
		if out == nil {
			say("no outage: it needs two certified providers to compare (--providers 2, or 4 or more)")
		}
	case out != nil && !want[out.PeerID]:
		say("%s is not certified: the coordinator does not probe it and it has no score to lose", out.Name)
	}
	var outageAt, backAt <-chan time.Time
	if out != nil {
		outageAt = time.After(o.OutageAfter)
		say("in %s, %s goes offline for %s (killed, as in a power cut, then restarted on the same home):", devnetSeconds(o.OutageAfter), out.Name, devnetSeconds(o.OutageFor))
		say("     watch its reliability score and its place in search drop, then recover:")
		say("     gpunex score --home %s; gpunex offers search --explain --home %s", renter.Home, renter.Home)
	}
	say("Ctrl-C stops every node.")
	for {
		select {
		case <-ctx.Done():
			say("stopping the devnet…")
			return nil
		case <-outageAt:
			standing := devnetStanding(ctx, rcl, out.PeerID)
			// SIGKILL, as in a power cut: the offer is not withdrawn and stays listed
			// until it expires, while the coordinator's probes fail.
			out.cmd.Process.Kill()
			err := <-out.done
			out.done <- err
			out.Offline = true
			config.Home{Dir: out.Home}.RemoveAPIAddr()
			if err := writeFile(); err != nil {
				return err
			}
			say("%s goes offline for %s to show its reliability score dropping (it had %s)", out.Name, devnetSeconds(o.OutageFor), standing)
			backAt = time.After(o.OutageFor)
		case <-backAt:
			say("%s comes back (%s)…", out.Name, devnetStanding(ctx, rcl, out.PeerID))
			if err := launch(out, true); err != nil {
				if ctx.Err() != nil {
					say("stopping the devnet…")
					return nil
				}
				return err
			}
			if err := writeFile(); err != nil {
				return err
			}
			say("%s is back, same home and peer ID, API %s: its score climbs again as it answers the probes", out.Name, out.API)
		case <-time.After(time.Second):
			if err := checkAlive(procs); err != nil {
				return err
			}
		}
	}
}

// devnetOutageName returns the name of the provider the devnet takes offline, or "" for
// none. Auto picks provider-1 (Enterprise, with the H100s: the best-placed offer) when at
// least two providers are certified (devnetOnboard: all of them below three providers,
// all but the last two from three on), so that it has a comparable provider to fall behind.
func devnetOutageName(o Options) (string, error) {
	switch o.Outage {
	case OutageNone:
		return "", nil
	case "", OutageAuto:
		certified := o.Providers
		if certified >= 3 {
			certified -= 2
		}
		if certified < 2 {
			return "", nil
		}
		return "provider-1", nil
	}
	if k, ok := strings.CutPrefix(o.Outage, "provider-"); ok {
		if n, err := strconv.Atoi(k); err == nil && n >= 1 && n <= o.Providers && k == strconv.Itoa(n) {
			return o.Outage, nil
		}
		return "", fmt.Errorf("--outage %s: no such provider (provider-1 to provider-%d)", o.Outage, o.Providers)
	}
	return "", fmt.Errorf("--outage %s: a provider's name (provider-1 to provider-%d), auto or none", o.Outage, o.Providers)
}

// devnetStanding describes a provider's score and search position as the renter sees them,
// e.g. "score 93, ranked 1st of 2 offers".
func devnetStanding(ctx context.Context, renter *api.Client, provider string) string {
	var parts []string
	if s, err := renter.Scores(ctx, provider); err == nil && len(s) > 0 {
		parts = append(parts, fmt.Sprintf("score %d", s[0].Score))
	}
	if rows, err := renter.Search(ctx, url.Values{}); err == nil {
		for i, r := range rows {
			if r.Provider == provider {
				parts = append(parts, fmt.Sprintf("ranked %s of %d offers", api.Ordinal(i+1), len(rows)))
				break
			}
		}
	}
	if len(parts) == 0 {
		return "no score or offer seen yet"
	}
	return strings.Join(parts, ", ")
}

// devnetSeconds prints a duration as seconds: "60s" rather than "1m0s".
func devnetSeconds(d time.Duration) string { return fmt.Sprintf("%gs", d.Seconds()) }

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

// devnetOnboard has every provider apply with a generated application, then decides as a
// reviewer would: with three providers or more, the last is rejected and the one before it
// left pending, so that the queue shows every state; the others are approved with the tier
// the rule proposes. It returns the approved providers.
func devnetOnboard(ctx context.Context, coord *api.Client, procs []*devnetProc, say func(string, ...any)) (map[string]bool, error) {
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
		case len(provs) >= 3 && i == len(provs)-1:
			d = api.Decision{Action: "reject", Actor: "devnet", Message: "an example rejection: GPUs unreachable from the coordinator's probes"}
		case len(provs) >= 3 && i == len(provs)-2:
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

// waitAPI waits until the node's API answers.
func waitAPI(ctx context.Context, h config.Home, p *devnetProc) (*api.Client, api.Status, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return nil, api.Status{}, fmt.Errorf("exited: %v", err)
		case <-ctx.Done():
			return nil, api.Status{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		cl, err := api.NewClient(h)
		if err != nil {
			continue
		}
		st, err := cl.Status(ctx)
		if err == nil {
			return cl, st, nil
		}
	}
	return nil, api.Status{}, errors.New("API not up after 30 s")
}

func checkAlive(procs []*devnetProc) error {
	for _, p := range procs {
		if p.Offline {
			continue
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited unexpectedly (%v); see %s", p.Name, err, filepath.Join(p.Home, "node.log"))
		default:
		}
	}
	return nil
}

// stopAll sends SIGTERM to every node (renter and providers first, coordinator last) and
// waits for each; a node still running after 10 s is killed. A node taken offline has
// exited already: its done channel holds its exit.
func stopAll(procs []*devnetProc, say func(string, ...any)) {
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			say("%s did not stop in time: killing it", p.Name)
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(b, '\n'), 0o644)
}
