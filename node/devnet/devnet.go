package devnet

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	d, err := newDevnet(o)
	if err != nil {
		return err
	}
	defer d.stop()
	if err := d.startServices(ctx); err != nil {
		return err
	}
	if err := d.startNodes(ctx); err != nil {
		return err
	}
	if d.certified, err = devnetOnboard(ctx, d.coordinator, d.procs, d.say); err != nil {
		return err
	}
	if err := d.waitForOffers(ctx); err != nil {
		return err
	}
	if err := d.runDemo(ctx); err != nil {
		return err
	}
	if err := d.writeFile(); err != nil {
		return err
	}
	d.sayReady(ctx)
	return d.runOutage(ctx)
}

// devnet is one run of the devnet: its options, and what it started, stopped by stop.
type devnet struct {
	o        Options
	dir      string
	jsonPath string // devnet.json
	outage   string // the provider taken offline, "" for none
	say      func(format string, a ...any)
	listen   []string

	procs     []*devnetProc
	ctrd      *sandbox.Daemon // nil when jobs cannot run here
	ctrdAddr  string
	solanaLog *os.File
	money     *devnetChain

	coordinatorProc, renterProc *devnetProc
	coordinator, renter         *api.Client
	certified                   map[string]bool // the providers approved, by peer ID
	demo                        string          // the offer the demo job ran on, "" without jobs
}

// newDevnet checks the options and prepares the devnet's folder.
func newDevnet(o Options) (*devnet, error) {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if o.OutageAfter <= 0 {
		o.OutageAfter = OutageAfter
	}
	if o.OutageFor <= 0 {
		o.OutageFor = OutageFor
	}
	outage, err := devnetOutageName(o)
	if err != nil {
		return nil, err
	}
	d := &devnet{o: o, dir: dir, jsonPath: filepath.Join(dir, "devnet.json"), outage: outage,
		listen: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}}
	d.say = func(format string, a ...any) { fmt.Fprintf(o.Out, format+"\n", a...) }
	os.Remove(d.jsonPath)
	return d, nil
}

// stop stops everything the devnet started: the nodes, then containerd (after the
// providers, so that they stop their jobs themselves) and the Solana runtime.
func (d *devnet) stop() {
	if d.solanaLog != nil {
		d.solanaLog.Close()
	}
	os.Remove(d.jsonPath)
	stopAll(d.procs, d.say)
	if d.ctrd != nil {
		d.ctrd.Stop()
	}
	if d.money != nil {
		d.money.rt.Stop()
	}
}

// startServices starts what the nodes use: a containerd of the devnet's own for jobs, when
// one can run here, and a local Solana runtime with a test USDC mint (docs/settlement.md).
func (d *devnet) startServices(ctx context.Context) error {
	if c, err := sandbox.StartContainerd(ctx, filepath.Join(d.dir, "containerd")); err != nil {
		d.say("jobs disabled in this devnet: %v", err)
	} else {
		d.ctrd = c
		d.ctrdAddr = c.Address()
		d.say("started containerd       %s", d.ctrdAddr)
	}
	var err error
	if d.solanaLog, err = os.Create(filepath.Join(d.dir, "solana.log")); err != nil {
		return err
	}
	if d.money, err = startDevnetChain(ctx, d.solanaLog); err != nil {
		return fmt.Errorf("the local Solana runtime did not start (run make deps): %w", err)
	}
	d.say("started Solana runtime   %s (test USDC mint %s)", d.money.rt.URL, d.money.mint)
	return nil
}

// startNodes starts the coordinator, then the providers and the renter bootstrapping from
// it.
func (d *devnet) startNodes(ctx context.Context) error {
	// Frequent probes and a short half-life: scores move within a minute.
	// Every node is on this machine: its loopback, shared by them all, is no measure of a
	// provider's link, so the devnet's coordinator holds none to Enterprise's 800 Mbit/s.
	coord, err := d.start(ctx, "coordinator", config.InitOptions{Role: config.RoleCoordinator, ProbeInterval: ProbeInterval, HalfLife: HalfLife, EnterpriseLinkMbps: 1})
	if err != nil {
		return err
	}
	d.coordinatorProc = coord
	d.coordinator, _ = api.NewClient(config.Home{Dir: coord.Home})
	st, err := d.coordinator.Status(ctx)
	if err != nil {
		return err
	}
	boot := st.Addrs
	for i := 1; i <= d.o.Providers; i++ {
		g := devnetGPUs[(i-1)%len(devnetGPUs)]
		g.Simulated = true
		gpus := []config.GPUConfig{g}
		if i == 1 {
			// Two throttled GPUs at 45% of their datasheet: the benchmarks delist them and
			// the provider is told why (gpunex notifications).
			gpus = append(gpus, config.GPUConfig{Model: "L4-24GB", Count: 2, VRAMGB: 24, PriceUSDC: "0.40", Simulated: true, PerfFactor: 0.45})
		}
		if _, err := d.start(ctx, fmt.Sprintf("provider-%d", i), config.InitOptions{
			Role: config.RoleProvider, Bootstrap: boot, Region: devnetRegions[(i-1)%len(devnetRegions)], GPUs: gpus,
			ContainerdAddress: d.ctrdAddr,
		}); err != nil {
			return err
		}
	}
	// The renter countersigns usage every 2 s, so that the demo job is metered as it runs.
	if d.renterProc, err = d.start(ctx, "renter-1", config.InitOptions{Role: config.RoleRenter, Bootstrap: boot, CheckpointInterval: 2 * time.Second}); err != nil {
		return err
	}
	d.renter, _ = api.NewClient(config.Home{Dir: d.renterProc.Home})
	return nil
}

// waitForOffers waits, 90 s at most, until the renter sees an offer of every certified
// provider.
func (d *devnet) waitForOffers(ctx context.Context) error {
	d.say("waiting for the renter to see every certified provider's offer…")
	deadline := time.Now().Add(90 * time.Second)
	for {
		rows, err := d.renter.Search(ctx, url.Values{})
		seen := map[string]bool{}
		for _, r := range rows {
			if d.certified[r.Provider] {
				seen[r.Provider] = true
			}
		}
		if err == nil && len(seen) == len(d.certified) {
			d.say("the renter sees %d offers from %d providers", len(rows), len(seen))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the renter sees %d of %d providers after 90 s (logs in %s/*/node.log)", len(seen), len(d.certified), d.dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if err := checkAlive(d.procs); err != nil {
			return err
		}
	}
}

// runDemo has the renter deposit funds and, where jobs can run, run a job whose charge the
// coordinator pays out in a batch an auditor checks.
func (d *devnet) runDemo(ctx context.Context) error {
	if err := devnetDepositFunds(ctx, d.renter, d.say); err != nil {
		return err
	}
	if d.ctrdAddr == "" {
		return nil
	}
	var err error
	if d.demo, err = devnetJob(ctx, d.renter, d.dir, d.say); err != nil {
		return fmt.Errorf("the demo job failed: %w", err)
	}
	return devnetSettle(ctx, d.coordinator, d.renter, d.money.rt.URL, d.dir, d.say)
}

// writeFile writes devnet.json as the nodes stand now.
func (d *devnet) writeFile() error {
	f := File{SolanaRPC: d.money.rt.URL, USDCMint: d.money.mint.String(), Cluster: d.money.rt.GenesisHash}
	for _, p := range d.procs {
		f.Nodes = append(f.Nodes, p.Node)
	}
	return writeJSONFile(d.jsonPath, f)
}

// sayReady prints that the devnet is ready: each node's dashboard link and commands to try.
func (d *devnet) sayReady(ctx context.Context) {
	say, renter, provider1 := d.say, d.renterProc.Home, filepath.Join(d.dir, "provider-1")
	say("devnet ready: %s", d.jsonPath)
	say("dashboards (each link opens once, within 5 minutes; a new one: gpunex dashboard --home HOME):")
	for _, p := range d.procs {
		cl, err := api.NewClient(config.Home{Dir: p.Home})
		if err != nil {
			continue
		}
		if link, err := cl.DashboardLink(ctx); err == nil {
			say("     %-12s %s", p.Name, link.URL)
		}
	}
	say("try: gpunex offers search --home %s", renter)
	say("     gpunex offer set-price --home %s --model %s --usdc 1.99", provider1, devnetGPUs[0].Model)
	if d.demo != "" {
		say("     gpunex job run --home %s --offer %s --gpus 1 --max-hours 0.1 --image-archive %s -- sh -c 'echo hello; ls /output'",
			renter, d.demo, filepath.Join(d.dir, "busybox.tar"))
	}
	say("     gpunex wallet balance --home %s; gpunex earnings --home %s; gpunex price recommend --home %s",
		renter, provider1, provider1)
	say("     gpunex coordinator payouts list --home %s", d.coordinatorProc.Home)
}

// runOutage runs until ctx ends, watching the nodes; on the way, it takes the outage's
// provider offline (SIGKILL, as in a power cut) once OutageAfter has passed, and restarts it
// on its home OutageFor later.
func (d *devnet) runOutage(ctx context.Context) error {
	o, say := d.o, d.say
	var out *devnetProc
	for _, p := range d.procs {
		if p.Name == d.outage {
			out = p
		}
	}
	switch {
	case o.Outage == "" || o.Outage == OutageAuto:
		if out == nil {
			say("no outage: it needs two certified providers to compare (--providers 2, or 4 or more)")
		}
	case out != nil && !d.certified[out.PeerID]:
		say("%s is not certified: the coordinator does not probe it and it has no score to lose", out.Name)
	}
	var outageAt, backAt <-chan time.Time
	if out != nil {
		outageAt = time.After(o.OutageAfter)
		say("in %s, %s goes offline for %s (killed, as in a power cut, then restarted on the same home):", devnetSeconds(o.OutageAfter), out.Name, devnetSeconds(o.OutageFor))
		say("     watch its reliability score and its place in search drop, then recover:")
		say("     gpunex score --home %s; gpunex offers search --explain --home %s", d.renterProc.Home, d.renterProc.Home)
	}
	say("Ctrl-C stops every node.")
	for {
		select {
		case <-ctx.Done():
			say("stopping the devnet…")
			return nil
		case <-outageAt:
			standing := devnetStanding(ctx, d.renter, out.PeerID)
			// SIGKILL, as in a power cut: the offer is not withdrawn and stays listed
			// until it expires, while the coordinator's probes fail.
			out.cmd.Process.Kill()
			err := <-out.done
			out.done <- err
			out.Offline = true
			config.Home{Dir: out.Home}.RemoveAPIAddr()
			if err := d.writeFile(); err != nil {
				return err
			}
			say("%s goes offline for %s to show its reliability score dropping (it had %s)", out.Name, devnetSeconds(o.OutageFor), standing)
			backAt = time.After(o.OutageFor)
		case <-backAt:
			say("%s comes back (%s)…", out.Name, devnetStanding(ctx, d.renter, out.PeerID))
			if err := d.launch(ctx, out, true); err != nil {
				if ctx.Err() != nil {
					say("stopping the devnet…")
					return nil
				}
				return err
			}
			if err := d.writeFile(); err != nil {
				return err
			}
			say("%s is back, same home and peer ID, API %s: its score climbs again as it answers the probes", out.Name, out.API)
		case <-time.After(time.Second):
			if err := checkAlive(d.procs); err != nil {
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
