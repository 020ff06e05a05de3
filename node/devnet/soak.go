package devnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// The soak (docs/reliability.md, "The soak"): a devnet of real processes (a coordinator,
// providers, renters, the local Solana runtime behind a proxy that can slow, fail or drop
// its calls) running a steady stream of jobs, deposits and payout batches while a seeded
// fault schedule kills nodes and breaks the RPC; every CheckEvery and at the end it checks
// the money invariants (soak_checks.go) and prints a table.

// SoakOptions configure Soak.
type SoakOptions struct {
	Dir    string
	Binary string
	Out    io.Writer
	// Duration is how long jobs and faults run; then the faults stop, the jobs in flight
	// end, and the final checks run.
	Duration time.Duration
	// Seed draws the fault schedule and the jobs; the same seed gives the same schedule.
	Seed                uint64
	Providers, Renters  int
	CheckEvery          time.Duration
	FaultEvery, MaxDown time.Duration // the mean time between faults, the longest a fault lasts
}

// SoakReport is what a soak found.
type SoakReport struct {
	Seed     uint64
	Schedule []Fault
	Applied  map[string]int // faults applied, by kind
	// NotApplied says why a kind of fault could not be applied here (partitions without
	// iptables or root), by kind.
	NotApplied map[string]string
	Jobs       map[string]int // jobs by outcome: ended, failed, refused, lost (the harness lost track)
	Deposits   int
	Batches    int
	Checks     int
	// Disputes is how many disputes the soak's operator decided (soak_disputes.go).
	Disputes int
	// Breaks are the invariant breaks found, each once with the check that found it.
	Breaks    []string
	Resources []ResourceTrend
}

// soak is one run: the devnet, its proxy, what the workers count.
type soak struct {
	*devnet
	o       SoakOptions
	rpc     *rpcProxy
	renters []*devnetProc
	provs   []*devnetProc
	archive string
	mounts  []string                // the providers' homes, each a file system of its own
	ports   map[string][]listenPort // each node's libp2p ports, by name (keepPorts)
	part    *partitions

	procMu  sync.Mutex // a node's process while a fault restarts it
	mu      sync.Mutex
	report  SoakReport
	broken  map[string]bool
	trend   map[string]*resourceSeries
	decided map[string]decidedDispute // by job
}

// Soak runs the soak and returns its report; the error says why it could not run (a node
// that did not start, a devnet that never became ready), not an invariant break: those are
// in the report.
func Soak(ctx context.Context, o SoakOptions) (SoakReport, error) {
	if o.Providers < 1 || o.Renters < 1 || o.Duration <= 0 {
		return SoakReport{}, errors.New("a soak needs a provider, a renter and a duration")
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = time.Minute
	}
	if o.FaultEvery <= 0 {
		o.FaultEvery = 20 * time.Second
	}
	if o.MaxDown <= 0 {
		o.MaxDown = 15 * time.Second
	}
	d, err := newDevnet(Options{Dir: o.Dir, Providers: o.Providers, Binary: o.Binary, Out: o.Out, Outage: OutageNone})
	if err != nil {
		return SoakReport{}, err
	}
	s := &soak{devnet: d, o: o, broken: map[string]bool{}, trend: map[string]*resourceSeries{}, decided: map[string]decidedDispute{}, ports: map[string][]listenPort{}}
	s.part = setUpPartitions()
	defer func() {
		d.stop()
		s.unmountHomes()
		s.part.tearDown()
	}()
	s.report = SoakReport{Seed: o.Seed, Applied: map[string]int{}, NotApplied: map[string]string{}, Jobs: map[string]int{}}
	if s.part.unavailable != "" {
		s.report.NotApplied[FaultPartition] = s.part.unavailable
	}
	if err := s.setUp(ctx); err != nil {
		return s.report, err
	}
	defer s.rpc.Close()
	s.report.Schedule = drawSchedule(o, s.nodeNames())
	s.say("soak: seed %d, %s, %d faults scheduled (replay with the same seed):", o.Seed, o.Duration, len(s.report.Schedule))
	for _, f := range s.report.Schedule {
		s.say("  %s", f)
	}

	run, stop := context.WithTimeout(ctx, o.Duration)
	defer stop()
	var wg sync.WaitGroup
	for i, r := range s.renters {
		wg.Add(1)
		go func() { defer wg.Done(); s.jobs(run, r, rand.New(rand.NewPCG(o.Seed, uint64(i)))) }()
	}
	wg.Add(3)
	go func() { defer wg.Done(); s.payouts(run) }()
	go func() { defer wg.Done(); s.operator(run) }()
	go func() { defer wg.Done(); s.faults(run) }()
	tick := time.NewTicker(o.CheckEvery)
	defer tick.Stop()
	for run.Err() == nil {
		select {
		case <-run.Done():
		case <-tick.C:
			s.check(ctx, false)
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return s.report, ctx.Err()
	}
	s.say("soak: faults stopped; every node up, the jobs in flight end, a last payout batch…")
	if err := s.settle(ctx); err != nil {
		return s.report, err
	}
	s.check(ctx, true)
	s.report.Resources = s.trends()
	s.printTable()
	return s.report, nil
}

// setUp starts the services behind the RPC proxy and the nodes, approves every provider,
// waits for their offers and has every renter deposit.
func (s *soak) setUp(ctx context.Context) error {
	if err := s.startServices(ctx); err != nil {
		return err
	}
	if s.ctrdAddr == "" {
		return errors.New("the soak runs jobs: containerd must run here (run make deps as root)")
	}
	if err := s.mountHomes(); err != nil {
		return err
	}
	var err error
	if s.rpc, err = newRPCProxy(s.money.rt.URL); err != nil {
		return err
	}
	s.money.nodeRPC = s.rpc.URL
	coord, err := s.start(ctx, "coordinator", config.InitOptions{Role: config.RoleCoordinator, ProbeInterval: ProbeInterval, HalfLife: HalfLife, EnterpriseLinkMbps: 1})
	if err != nil {
		return err
	}
	s.coordinatorProc = coord
	if err := shortenDisputes(coord.Home); err != nil {
		return err
	}
	s.coordinator, _ = api.NewClient(config.Home{Dir: coord.Home})
	st, err := s.coordinator.Status(ctx)
	if err != nil {
		return err
	}
	for i := 1; i <= s.o.Providers; i++ {
		g := devnetGPUs[(i-1)%len(devnetGPUs)]
		g.Simulated = true
		p, err := s.start(ctx, fmt.Sprintf("provider-%d", i), config.InitOptions{Role: config.RoleProvider, Bootstrap: st.Addrs,
			Region: devnetRegions[(i-1)%len(devnetRegions)], GPUs: []config.GPUConfig{g}, ContainerdAddress: s.ctrdAddr})
		if err != nil {
			return err
		}
		s.provs = append(s.provs, p)
	}
	for i := 1; i <= s.o.Renters; i++ {
		r, err := s.start(ctx, fmt.Sprintf("renter-%d", i), config.InitOptions{Role: config.RoleRenter, Bootstrap: st.Addrs, CheckpointInterval: 2 * time.Second})
		if err != nil {
			return err
		}
		s.renters = append(s.renters, r)
	}
	for _, p := range s.procs {
		if err := s.keepPorts(ctx, p); err != nil {
			return err
		}
	}
	s.renterProc, s.renter = s.renters[0], s.client(s.renters[0])
	if s.certified, err = devnetOnboardAll(ctx, s.coordinator, s.procs, s.say); err != nil {
		return err
	}
	if err := s.waitForOffers(ctx); err != nil {
		return err
	}
	for _, r := range s.renters {
		if err := devnetDepositFunds(ctx, s.client(r), s.say); err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		s.report.Deposits++
	}
	s.archive = filepath.Join(s.dir, "busybox.tar")
	f, err := os.Create(s.archive)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = sandbox.BusyboxImage(f, "gpunex.devnet/busybox:1")
	return err
}

// keepPorts writes the ports a node listens on into its config, so that a restart after
// kill -9 listens where its peers knew it, as a node with fixed ports does in production:
// the devnet's nodes pick free ports at their first start. The partitions cut these ports.
func (s *soak) keepPorts(ctx context.Context, p *devnetProc) error {
	st, err := s.client(p).Status(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	h := config.Home{Dir: p.Home}
	cfg, err := h.Config()
	if err != nil {
		return err
	}
	cfg.P2P.Listen = nil
	for _, a := range st.Addrs {
		if i := strings.Index(a, "/p2p/"); i > 0 {
			a = a[:i]
		}
		if strings.HasPrefix(a, "/ip4/127.0.0.1/") {
			cfg.P2P.Listen = append(cfg.P2P.Listen, a)
		}
	}
	if len(cfg.P2P.Listen) == 0 {
		return fmt.Errorf("%s listens on no loopback address: %v", p.Name, st.Addrs)
	}
	s.ports[p.Name] = listenPorts(cfg.P2P.Listen)
	return h.WriteConfig(cfg)
}

// shortenDisputes gives the soak's coordinator a 30-second dispute window, so that the
// receipts of the run are charged before its end rather than a day later.
func shortenDisputes(home string) error {
	h := config.Home{Dir: home}
	cfg, err := h.Config()
	if err != nil {
		return err
	}
	cfg.Settlement.DisputeWindow = config.Duration{Duration: 30 * time.Second}
	return h.WriteConfig(cfg)
}

// client is a node's API client as its home says now (a restarted node listens anew).
func (s *soak) client(p *devnetProc) *api.Client {
	cl, err := api.NewClient(config.Home{Dir: p.Home})
	if err != nil {
		cl, _ = api.NewClient(downNode{}) // down: every call fails
	}
	return cl
}

// downNode is the API of a node that is down: nothing listens there.
type downNode struct{}

func (downNode) APIEndpoint() (string, string, error) { return "http://127.0.0.1:1", "", nil }

func (s *soak) nodeNames() []string {
	var names []string
	for _, p := range s.procs {
		names = append(names, p.Name)
	}
	return names
}

func (s *soak) count(m map[string]int, key string) {
	s.mu.Lock()
	m[key]++
	s.mu.Unlock()
}

// jobs has one renter run jobs one after another on offers it picks at random: each sleeps
// 1 to 20 s and writes a file to /output, within a 60-second lease. A refused proposal, a
// renter or provider killed under it, a lost answer: each is counted and the next job
// starts; the checks, not this loop, say whether money was lost.
func (s *soak) jobs(ctx context.Context, r *devnetProc, rng *rand.Rand) {
	for ctx.Err() == nil {
		cl := s.client(r)
		rows, err := cl.Search(ctx, url.Values{})
		if err != nil || len(rows) == 0 {
			sleepCtx(ctx, 2*time.Second)
			continue
		}
		row := rows[rng.IntN(len(rows))]
		secs := 1 + rng.IntN(20)
		v, err := cl.ProposeJob(ctx, api.JobRequest{Offer: row.ID, GPUs: 1, MaxSeconds: 60, ImageArchive: s.archive,
			Args: []string{"sh", "-c", fmt.Sprintf("sleep %d; echo done > /output/result.txt", secs)}})
		if err != nil {
			s.count(s.report.Jobs, "refused or failed to start")
			sleepCtx(ctx, time.Second)
			continue
		}
		s.count(s.report.Jobs, s.waitJob(ctx, r, v.ID))
	}
}

// waitJob follows a job until it ends, through restarts of its renter; it returns the
// outcome to count.
func (s *soak) waitJob(ctx context.Context, r *devnetProc, id string) string {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if v, err := s.client(r).Job(context.WithoutCancel(ctx), id); err == nil {
			switch v.State {
			case "ended":
				if v.ExitCode == 0 {
					return "ended"
				}
				return "ended with an error"
			case "failed", "refused", "cancelled":
				return v.State
			}
		}
		sleepCtx(context.WithoutCancel(ctx), time.Second)
	}
	return "still running after 3 min"
}

// payouts has the coordinator run a payout batch every 30 s.
func (s *soak) payouts(ctx context.Context) {
	for sleepCtx(ctx, 30*time.Second) {
		if _, err := s.client(s.coordinatorProc).RunPayouts(ctx, api.PayoutRunOptions{Now: true}); err == nil {
			s.mu.Lock()
			s.report.Batches++
			s.mu.Unlock()
		}
	}
}

// settle brings every node back, waits for the jobs in flight to end and their receipts
// to be charged (the dispute window is 30 s) or their disputes decided, and runs the last
// payout batch.
func (s *soak) settle(ctx context.Context) error {
	s.rpc.SetMode(rpcNormal)
	s.procMu.Lock()
	for _, p := range s.procs {
		if p.Offline {
			if err := s.launch(ctx, p, true); err != nil {
				s.procMu.Unlock()
				return err
			}
		}
	}
	s.procMu.Unlock()
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		s.decideDisputes(ctx)
		if s.quiet(ctx) {
			break
		}
		sleepCtx(ctx, 2*time.Second)
	}
	for i := 0; i < 3; i++ {
		if _, err := s.client(s.coordinatorProc).RunPayouts(ctx, api.PayoutRunOptions{Now: true}); err == nil {
			s.report.Batches++
			break
		}
		sleepCtx(ctx, 5*time.Second)
	}
	sleepCtx(ctx, 5*time.Second)
	return ctx.Err()
}

// quiet says whether every renter's holds are settled: none held for a running job, none
// pending inside its dispute window.
func (s *soak) quiet(ctx context.Context) bool {
	for _, r := range s.renters {
		b, err := s.client(r).Balance(ctx, "")
		if err != nil {
			return false
		}
		for _, h := range b.Holds {
			if h.State == "held" && time.Now().Before(h.ExpiresAt) || h.State == "pending" || h.State == "disputed" {
				return false
			}
		}
	}
	return true
}

// sleepCtx sleeps d unless ctx ends first; it says whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// microUSDC reads a USDC amount of a view; unreadable reads as -1, which breaks any sum.
func microUSDC(s string) protocol.MicroUSDC {
	v, err := protocol.ParseUSDC(s)
	if err != nil {
		return -1
	}
	return v
}
