package jobs

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// Publisher is the provider's offer as the job runner sees it (the offers subsystem's
// publisher).
type Publisher interface {
	// Current returns the offer as last published, nil before the first.
	Current() *protocol.SignedOffer
	// Open says whether the provider's availability schedule is open at now.
	Open(now time.Time) bool
}

// Attestations give the provider's latest benchmark attestation (the benchmark runner): a
// GPU it delists is leased to no job.
type Attestations interface {
	Latest() *protocol.SignedAttestation
}

// Reporter sends a provider's job, with its final receipt, to its coordinator (the money
// subsystem).
type Reporter interface {
	ReportJob(ctx context.Context, j ledger.Job)
}

// Deps are what a provider's job runner needs.
type Deps struct {
	// Peer gives the provider's ID and key (leases and receipts are signed with it).
	Peer    *p2p.Peer
	Ledger  *ledger.JobStore
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	Jobs    config.JobsConfig
	// Trusted are the coordinators whose escrow holds count and who may ask for a hold's
	// release.
	Trusted []peer.ID
	// Runtime is the sandbox jobs run in; nil when jobs cannot run here, and RuntimeErr
	// says why (proposals are then refused with it).
	Runtime    sandbox.Runtime
	RuntimeErr error
	// Dir holds the per-job folders (image archive, log, output); it is created if need be.
	Dir string
	// Probe opens the machine's GPU probe (NVML, or the simulated GPUs of the
	// configuration): the GPUs jobs get are the ones it finds.
	Probe func() (bench.Probe, error)
	// CleanGPU makes a real GPU fit for the next renter after a job: no process left on
	// it, its memory cleared (cleanGPU, through NVML and CUDA, by default).
	CleanGPU func(uuid string) error
	// Publisher is the provider's offer; nil refuses every proposal as outside the
	// availability window.
	Publisher Publisher
	Reports   Reporter
}

// Runner is the provider's side of jobs: it decides on proposals by its policy, reserves
// GPUs, receives images, runs jobs in the sandbox, watches them, and writes receipts.
type Runner struct {
	peer      *p2p.Peer
	ledger    *ledger.JobStore
	clock     clock.Clock
	log       *slog.Logger
	metrics   *metrics.Metrics
	cfg       config.JobsConfig
	trusted   []peer.ID
	publisher Publisher
	reports   Reporter
	// healthCheck probes the GPUs (UseHealthCheck); nil until the node sets it.
	healthCheck func()

	rt    sandbox.Runtime // nil when jobs cannot run here; rtErr says why
	rtErr error
	// detectErr says why the probe found no GPU at start; cleared when a later probe
	// finds one (under mu).
	detectErr error
	dir       string // per-job folders: image archive, log, output
	cleanGPU  func(uuid string) error

	mu      sync.Mutex
	attest  Attestations // nil until UseAttestations
	gpus    []gpuSlot
	lost    map[string]bool // UUIDs of slots the latest probe did not find healthy
	rate    *p2p.PeerRate
	nets    *p2p.NetworkBudget            // proposals per network (IPv4 address, IPv6 /64)
	cancels map[string]context.CancelFunc // running jobs' watchers
	images  map[string]string             // image references by archive SHA-256
	imports map[string]*sync.Mutex        // one import per archive at a time
	closed  bool
	wg      sync.WaitGroup
}

// gpuSlot is one GPU of the provider and the job holding it ("" when free).
type gpuSlot struct {
	model string
	gpu   sandbox.GPU
	job   string
	// ecc is the GPU's count of volatile uncorrected ECC errors at the latest probe (-1:
	// not available), eccAtLease that count when its job took it.
	ecc, eccAtLease int64
}

// NewRunner returns a provider's job runner with the GPUs the probe finds. The node then
// runs Reconcile, hands it the benchmark runner (UseAttestations) and registers its
// stream handlers.
func NewRunner(d Deps) (*Runner, error) {
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return nil, err
	}
	r := &Runner{peer: d.Peer, ledger: d.Ledger, clock: d.Clock, log: d.Log, metrics: d.Metrics, cfg: d.Jobs, trusted: d.Trusted,
		publisher: d.Publisher, reports: d.Reports, rt: d.Runtime, rtErr: d.RuntimeErr, dir: d.Dir, cleanGPU: d.CleanGPU,
		rate: p2p.NewPeerRate(d.Jobs.ProposalsPerMinute), nets: p2p.NewNetworkBudget(float64(4*d.Jobs.ProposalsPerMinute), float64(4*d.Jobs.ProposalsPerMinute), d.Trusted...), cancels: map[string]context.CancelFunc{}, images: map[string]string{}, imports: map[string]*sync.Mutex{}}
	if r.cleanGPU == nil {
		r.cleanGPU = func(uuid string) error { return cleanGPU(d.Probe, d.Log, uuid) }
	}
	// The GPUs jobs get are the ones the probe finds, with their real UUIDs and indexes
	// (simulated ones where the configuration declares them).
	gpus, err := detectGPUs(d.Probe)
	if err != nil {
		r.detectErr = fmt.Errorf("GPU detection: %w", err)
		r.log.Warn("no GPUs for jobs", "err", err)
	}
	for _, g := range gpus {
		if !usable(g) {
			if g.Health.Error == "" && g.UUID != "" {
				r.log.Warn("GPU left out of jobs: its device node is unknown (NVML gave no minor number)", "uuid", g.UUID)
			}
			continue
		}
		r.gpus = append(r.gpus, gpuSlot{model: g.Model, gpu: sandbox.GPU{Index: g.Index, UUID: g.UUID, Minor: g.DeviceMinor, Simulated: g.Simulated},
			ecc: g.Health.ECCUncorrected, eccAtLease: -1})
	}
	return r, nil
}

// detectGPUs lists the machine's GPUs through a probe.
func detectGPUs(open func() (bench.Probe, error)) ([]bench.GPUInfo, error) {
	p, err := open()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.GPUs()
}

// UseHealthCheck gives the runner the probe that checks the GPUs (and calls Probed), run
// when a job fails.
func (r *Runner) UseHealthCheck(check func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.healthCheck = check
}

// lostUnder checks the GPUs now and says which of the job's GPUs failed, "" when none: one
// lost (fallen off the bus, gone from the list), or one whose count of uncorrected ECC
// errors rose since the job took it (its memory failed: the errors NVML reports as XID
// 48, 63, 64, 94 or 95, which end the CUDA contexts on the GPU).
func (r *Runner) lostUnder(job string) string {
	r.mu.Lock()
	check := r.healthCheck
	r.mu.Unlock()
	if check == nil {
		return ""
	}
	check()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.gpus {
		if s.job == job && r.lost[s.gpu.UUID] {
			return fmt.Sprintf("%sGPU %s (%s) failed during the job", ReasonGPULost, s.gpu.UUID, s.model)
		}
		if s.job == job && s.eccAtLease >= 0 && s.ecc > s.eccAtLease {
			return fmt.Sprintf("%sGPU %s (%s) had %d uncorrected ECC errors during the job", ReasonGPULost, s.gpu.UUID, s.model, s.ecc-s.eccAtLease)
		}
	}
	return ""
}

// UseAttestations hands the runner the provider's benchmark runner, built after the job
// runner because it asks which GPUs are leased. Until then no GPU is delisted for jobs.
func (r *Runner) UseAttestations(a Attestations) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attest = a
}

// Reserve takes n free GPUs of a model for a job, or says how many are free.
func (r *Runner) Reserve(job, model string, n int) ([]sandbox.GPU, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delisted := map[string]bool{}
	if r.attest != nil {
		if a := r.attest.Latest(); a != nil {
			if a.HostBelow != "" {
				return nil, jobErr("this provider is delisted: %s", a.HostBelow)
			}
			for _, g := range a.GPUs {
				if g.Below != "" {
					delisted[g.UUID] = true
				}
			}
		}
	}
	var free, total []int
	for i, s := range r.gpus {
		if s.model == model && !delisted[s.gpu.UUID] && !r.lost[s.gpu.UUID] {
			total = append(total, i)
			if s.job == "" {
				free = append(free, i)
			}
		}
	}
	switch {
	case len(total) == 0:
		return nil, jobErr("this provider offers no %s", model)
	case n > len(total):
		return nil, jobErr("%d x %s asked, this provider has %d", n, model, len(total))
	case n > len(free):
		return nil, jobErr("capacity: %d of %d %s free right now", len(free), len(total), model)
	}
	var out []sandbox.GPU
	for _, i := range free[:n] {
		r.gpus[i].job, r.gpus[i].eccAtLease = job, r.gpus[i].ecc
		out = append(out, r.gpus[i].gpu)
	}
	return out, nil
}

// ReasonGPULost starts the end reason of a job whose GPU failed under it: a "lost" reason,
// the provider's fault (protocol.ProviderFault).
const ReasonGPULost = "lost: "

// Probed takes the latest list of the machine's GPUs: a GPU the probe no longer finds
// healthy (fallen off the bus, or gone from the list) is leased to no new job until a probe
// finds it again, a job running on it is stopped with a "lost" reason naming it, and a
// healthy GPU the runner did not have (lost when it started) gets a slot.
func (r *Runner) Probed(gpus []bench.GPUInfo) {
	healthy := map[string]bench.GPUInfo{}
	why := map[int]string{} // by index: the probe's error for a GPU it cannot use
	for _, g := range gpus {
		if usable(g) {
			healthy[g.UUID] = g
		} else if g.Health.Error != "" {
			why[g.Index] = g.Health.Error
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	have := map[string]bool{}
	r.lost = map[string]bool{}
	stop := map[string]string{} // running jobs on a lost GPU, and why
	for i, s := range r.gpus {
		have[s.gpu.UUID] = true
		if g, ok := healthy[s.gpu.UUID]; ok { // as it is now (after a driver reload, say)
			r.gpus[i].model, r.gpus[i].ecc = g.Model, g.Health.ECCUncorrected
			r.gpus[i].gpu.Index, r.gpus[i].gpu.Minor, r.gpus[i].gpu.Simulated = g.Index, g.DeviceMinor, g.Simulated
		} else {
			r.lost[s.gpu.UUID] = true
			if s.job != "" && stop[s.job] == "" {
				detail := why[s.gpu.Index]
				if detail == "" {
					detail = "gone from the driver's list"
				}
				stop[s.job] = fmt.Sprintf("%sGPU %s (%s) fell off the bus during the job: %s", ReasonGPULost, s.gpu.UUID, s.model, detail)
			}
		}
	}
	for job, reason := range stop {
		// The provider's fault (a "lost" reason): the renter is not charged, and the
		// coordinator counts it against the provider's job completion.
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.rt.Kill(ctx, job, reason); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				r.log.Warn("stopping a job whose GPU was lost failed", "job", job, "err", err)
			} else if err == nil {
				r.log.Warn("job stopped: its GPU was lost", "job", job, "why", reason)
			}
		}()
	}
	for _, g := range gpus {
		if _, ok := healthy[g.UUID]; ok && !have[g.UUID] {
			have[g.UUID] = true
			r.gpus = append(r.gpus, gpuSlot{model: g.Model, gpu: sandbox.GPU{Index: g.Index, UUID: g.UUID, Minor: g.DeviceMinor, Simulated: g.Simulated},
				ecc: g.Health.ECCUncorrected, eccAtLease: -1})
			r.log.Info("GPU available for jobs", "uuid", g.UUID, "model", g.Model)
		}
	}
	if len(healthy) > 0 {
		r.detectErr = nil
	}
}

// usable says whether a probed GPU can run jobs: healthy, and for a real GPU with a known
// device node.
func usable(g bench.GPUInfo) bool {
	return g.Health.Error == "" && g.UUID != "" && (g.Simulated || g.DeviceMinor >= 0)
}

// Release frees a job's GPUs.
func (r *Runner) Release(job string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.gpus {
		if r.gpus[i].job == job {
			r.gpus[i].job = ""
		}
	}
}

// cleaningPrefix marks a GPU slot held while it is cleaned after the job it names.
const cleaningPrefix = "cleaning after "

// releaseAfterCleaning frees a job's GPUs: simulated ones at once, real ones once the job
// is removed (removed is closed) and r.cleanGPU has found no process on them and cleared
// their memory. A GPU that cannot be cleaned stays held and is tried again every minute:
// the next renter never gets what the last one left.
func (r *Runner) releaseAfterCleaning(job string, removed <-chan struct{}) {
	r.mu.Lock()
	var dirty []string
	for i := range r.gpus {
		if r.gpus[i].job != job {
			continue
		}
		if r.gpus[i].gpu.Simulated {
			r.gpus[i].job = ""
			continue
		}
		r.gpus[i].job = cleaningPrefix + job
		dirty = append(dirty, r.gpus[i].gpu.UUID)
	}
	r.mu.Unlock()
	for _, uuid := range dirty {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			<-removed
			r.clean(uuid, cleaningPrefix+job)
		}()
	}
}

// clean runs r.cleanGPU on a GPU until it succeeds (or the runner closes), then frees it.
func (r *Runner) clean(uuid, holder string) {
	for {
		err := r.cleanGPU(uuid)
		if err == nil {
			r.Release(holder)
			return
		}
		r.log.Warn("GPU not leased again until it is clean: trying again in a minute", "gpu", uuid, "after", strings.TrimPrefix(holder, cleaningPrefix), "err", err)
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return
		}
		<-r.clock.After(time.Minute)
	}
}

// cleanGPU checks through NVML that no process holds a real GPU any more (a job's
// processes all end with its container; one still there is outside any job) and clears
// the memory the last job could have left (bench.ClearGPUMemory). A simulated GPU has
// nothing to clean.
func cleanGPU(open func() (bench.Probe, error), log *slog.Logger, uuid string) error {
	p, err := open()
	if err != nil {
		return err
	}
	defer p.Close()
	n, ok := p.(*bench.NVML)
	if !ok {
		return nil
	}
	pids, err := n.ProcessesOn(uuid)
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		return fmt.Errorf("processes %v still use the GPU", pids)
	}
	cleared, err := bench.ClearGPUMemory(uuid)
	if err != nil {
		return fmt.Errorf("clear its memory: %w", err)
	}
	log.Info("GPU memory cleared for the next renter", "gpu", uuid, "bytes", cleared)
	return nil
}

// Hold marks GPUs (by UUID) as a job's, after a restart.
func (r *Runner) Hold(job string, uuids []string) []sandbox.GPU {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sandbox.GPU
	for _, u := range uuids {
		i := slices.IndexFunc(r.gpus, func(s gpuSlot) bool { return s.gpu.UUID == u })
		if i < 0 {
			// The probe did not find this GPU healthy at start, but the job still runs on
			// it: a slot that stays the job's, so that it is never leased twice (probed
			// fills in its details when the GPU answers).
			r.gpus = append(r.gpus, gpuSlot{gpu: sandbox.GPU{UUID: u, Index: -1, Minor: -1}, ecc: -1, eccAtLease: -1})
			i = len(r.gpus) - 1
		}
		r.gpus[i].job, r.gpus[i].eccAtLease = job, -1 // the count at its start is not known
		out = append(out, r.gpus[i].gpu)
	}
	return out
}

// Busy reports whether a GPU is leased (benchmarks leave leased GPUs alone).
func (r *Runner) Busy(uuid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.gpus {
		if s.gpu.UUID == uuid {
			return s.job != ""
		}
	}
	return false
}

// RunningJobs counts the jobs holding GPUs now (not those whose GPUs are being cleaned).
func (r *Runner) RunningJobs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	jobs := map[string]bool{}
	for _, s := range r.gpus {
		if s.job != "" && !strings.HasPrefix(s.job, cleaningPrefix) {
			jobs[s.job] = true
		}
	}
	return len(jobs)
}

func (r *Runner) jobDir(id string) string { return filepath.Join(r.dir, id) }

// HandleJob runs the provider's side of a negotiation.
func (r *Runner) HandleJob(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	in := bufio.NewReader(s)
	refuse := func(reason string, err error) {
		r.metrics.JobProposals.WithLabelValues(reason).Inc()
		sendMsg(s, protocol.JobMsg{Type: "reject", Reason: err.Error()})
		r.log.Info("proposal refused", "renter", remote, "reason", reason, "err", err)
	}
	now := r.clock.Now()
	if !r.rate.Allow(remote, now) {
		r.peer.Misbehaved(remote)
		refuse("rate_limited", fmt.Errorf("more than %d proposals in a minute from %s: slow down", r.cfg.ProposalsPerMinute, remote))
		return
	}
	// Identities rotating on one network share four times one peer's rate (the host's own
	// address is exempt: a devnet's renters).
	if !r.nets.Take(s.Conn(), time.Now(), 1) {
		r.peer.Misbehaved(remote)
		refuse("rate_limited", fmt.Errorf("more than %d proposals in a minute from %s's network: slow down", 4*r.cfg.ProposalsPerMinute, remote))
		return
	}
	m, err := readMsg(in)
	if err != nil || m.Type != "propose" {
		if err == nil {
			err = fmt.Errorf("%w: expected a proposal, got %q", protocol.ErrMalformed, m.Type)
		}
		refuse(protocol.Reason(err), err)
		return
	}
	proposalRaw := m.Record
	p, err := protocol.CheckProposal(proposalRaw, now)
	if err == nil && p.Renter != remote.String() {
		err = fmt.Errorf("%w: proposal signed by %s arrived from %s", protocol.ErrWrongSigner, p.Renter, remote)
	}
	if err == nil && p.Provider != r.peer.ID.String() {
		err = fmt.Errorf("%w: proposal addressed to %s", protocol.ErrInvalid, p.Provider)
	}
	if err != nil {
		refuse(protocol.Reason(err), err)
		return
	}
	lease, gpus, counter, err := r.decide(p, proposalRaw, now)
	if counter > 0 {
		r.metrics.JobProposals.WithLabelValues("countered").Inc()
		sendMsg(s, protocol.JobMsg{Type: "counter", Price: counter, Reason: err.Error()})
		return
	}
	if err != nil {
		refuse("policy", err)
		return
	}
	defer func() {
		if err != nil {
			r.Release(p.Job)
		}
	}()
	cached := r.cachedImage(p)
	if err = sendMsg(s, protocol.JobMsg{Type: "accept", Record: lease, ImageCached: cached != ""}); err != nil {
		return
	}
	m, err = readMsg(in)
	if err == nil && m.Type != "countersign" {
		err = fmt.Errorf("expected the lease's countersignature, got %q", m.Type)
	}
	if err == nil {
		_, err = protocol.CheckCountersignature(m.Record, lease, protocol.KindLease, remote, r.clock.Now())
	}
	if err != nil {
		r.metrics.JobProposals.WithLabelValues("countersign_failed").Inc()
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	var uuids []string
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	if err = r.ledger.CreateJob(ledger.Job{
		ID: p.Job, Side: "provider", Peer: remote.String(), State: ledger.JobLeased, CreatedAt: now, UpdatedAt: now,
		Proposal: proposalRaw, Lease: lease, LeaseCountersig: m.Record, GPUs: uuids,
	}); err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	r.metrics.JobProposals.WithLabelValues("accepted").Inc()
	ref := cached
	if ref == "" {
		ref, err = r.receiveImage(s, in, p)
	}
	// A pull and the start take their time: the renter waits up to two minutes after
	// the image, and learns the outcome either way.
	s.SetDeadline(time.Now().Add(providerStartTimeout))
	if err == nil {
		err = r.start(p, lease, ref, gpus)
	}
	if err != nil {
		r.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
			j.State, j.Error, j.UpdatedAt = ledger.JobFailed, err.Error(), r.clock.Now()
			return nil
		})
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	j, _ := r.ledger.GetJob(p.Job)
	v := viewJob(j, r.clock.Now())
	sendMsg(s, protocol.JobMsg{Type: "started", Status: wireStatus(v)})
}

// providerStartTimeout bounds a provider's pull and start of a job's image; the renter
// waits a minute longer for the outcome.
const providerStartTimeout = 10 * time.Minute

// decide applies the provider's policy to a checked proposal. It returns a signed lease and
// the GPUs reserved for it, or the price to counter with, or why not.
func (r *Runner) decide(p *protocol.Proposal, raw []byte, now time.Time) (lease []byte, gpus []sandbox.GPU, counter protocol.MicroUSDC, err error) {
	if r.rtErr != nil {
		return nil, nil, 0, jobErr("this provider cannot run jobs right now: %v", r.rtErr)
	}
	if slices.Contains(r.cfg.BlockedRenters, p.Renter) {
		return nil, nil, 0, jobErr("renter %s is blocked by this provider", p.Renter)
	}
	r.mu.Lock()
	closed, detectErr := r.closed, r.detectErr
	r.mu.Unlock()
	if detectErr != nil {
		return nil, nil, 0, jobErr("this provider cannot run jobs right now: %v", detectErr)
	}
	if closed {
		return nil, nil, 0, jobErr("the provider is shutting down")
	}
	if r.publisher == nil || !r.publisher.Open(now) {
		return nil, nil, 0, jobErr("outside the provider's availability window")
	}
	var item *protocol.OfferGPUs
	egress := ""
	if cur := r.publisher.Current(); cur != nil && cur.Offer.Withdrawn == "" {
		egress = cur.Offer.Egress
		for i := range cur.Offer.GPUs {
			if cur.Offer.GPUs[i].Model == p.Model {
				item = &cur.Offer.GPUs[i]
			}
		}
	}
	if item == nil {
		return nil, nil, 0, jobErr("no %s on offer here now", p.Model)
	}
	if p.Egress && egress == "" {
		return nil, nil, 0, jobErr("this provider gives jobs no network (its jobs.egress is %q): propose without egress, or pick an offer with egress (gpunex offers search --egress)", protocol.EgressDeny)
	}
	if p.GPUs > item.Count {
		return nil, nil, 0, jobErr("%d x %s asked, %d offered", p.GPUs, p.Model, item.Count)
	}
	if item.PricePerGPUHour > p.MaxPrice {
		return nil, nil, item.PricePerGPUHour, fmt.Errorf("the price is %s USDC per GPU-hour, above your maximum of %s", item.PricePerGPUHour, p.MaxPrice)
	}
	if max := r.cfg.MaxImageMB << 20; p.Image.ArchiveSize > max {
		return nil, nil, 0, jobErr("image archive of %d MB, this provider takes at most %d MB", p.Image.ArchiveSize>>20, r.cfg.MaxImageMB)
	}
	if _, err := r.ledger.GetJob(p.Job); err == nil {
		return nil, nil, 0, fmt.Errorf("%w: job %s was proposed before", protocol.ErrReplay, p.Job)
	}
	if err := r.checkEscrow(p, item.PricePerGPUHour, now); err != nil {
		return nil, nil, 0, err
	}
	if gpus, err = r.Reserve(p.Job, p.Model, p.GPUs); err != nil {
		return nil, nil, 0, err
	}
	cfg := r.cfg
	l := protocol.Lease{
		Version: protocol.JobVersion, Job: p.Job, Proposal: protocol.RecordSHA256(raw), Renter: p.Renter, Provider: p.Provider,
		Model: p.Model, GPUs: p.GPUs, Price: item.PricePerGPUHour, IssuedAt: now.UTC(),
		EndsAt: now.UTC().Add(time.Duration(p.MaxSeconds) * time.Second),
		Limits: protocol.Limits{
			MemoryBytes: int64(p.GPUs) * cfg.MemoryMBPerGPU << 20, CPUMillis: int64(p.GPUs) * cfg.CPUMillisPerGPU,
			Pids: cfg.Pids, ScratchBytes: cfg.ScratchMB << 20,
		},
		Egress: p.Egress,
	}
	if lease, err = protocol.Seal(protocol.KindLease, l, r.peer.Key); err != nil {
		r.Release(p.Job)
		return nil, nil, 0, err
	}
	return lease, gpus, 0, nil
}

// checkEscrow applies jobs.require_escrow: the proposal carries a hold signed by a trusted
// coordinator that covers the job's maximum cost at this provider's price and lasts past
// the lease's end. Without the setting a hold, when given, is still checked.
func (r *Runner) checkEscrow(p *protocol.Proposal, price protocol.MicroUSDC, now time.Time) error {
	if len(p.Hold) == 0 {
		if r.cfg.RequireEscrow {
			return jobErr("this provider requires an escrow hold from its coordinator: deposit USDC (gpunex wallet deposit) and propose again")
		}
		return nil
	}
	h, err := protocol.CheckHold(p.Hold, now, protocol.NewTrust(r.trusted...))
	if err != nil {
		return jobErr("escrow hold refused: %v", err)
	}
	if err := protocol.CheckHoldCovers(h, p, price, now.Add(time.Duration(p.MaxSeconds)*time.Second)); err != nil {
		return jobErr("escrow hold refused: %v", err)
	}
	return nil
}

// receiveImage takes the job's image: the archive the renter streams (checked against the
// proposal's digest), or a pull of the reference.
func (r *Runner) receiveImage(s network.Stream, in *bufio.Reader, p *protocol.Proposal) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if p.Image.Ref != "" {
		s.SetDeadline(time.Now().Add(10 * time.Minute))
		if _, err := r.rt.PullImage(ctx, p.Image.Ref); err != nil {
			return "", fmt.Errorf("pull %s: %w", p.Image.Ref, err)
		}
		return p.Image.Ref, nil
	}
	// At least 1 MB/s, and never less than the usual step timeout.
	s.SetDeadline(time.Now().Add(jobStepTimeout + time.Duration(p.Image.ArchiveSize>>20)*time.Second))
	dir := r.jobDir(p.Job)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "image.tar")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer os.Remove(path)
	defer f.Close()
	h := newHashingReader(io.LimitReader(in, p.Image.ArchiveSize))
	n, err := io.Copy(f, h)
	if err != nil {
		return "", fmt.Errorf("receive image archive: %w", err)
	}
	if n != p.Image.ArchiveSize {
		return "", fmt.Errorf("image archive: %d of %d bytes received", n, p.Image.ArchiveSize)
	}
	if got := h.sum(); got != p.Image.ArchiveSHA256 {
		r.metrics.JobProposals.WithLabelValues("image_digest").Inc()
		return "", fmt.Errorf("%w: image archive digest sha256:%s does not match the proposal's sha256:%s", protocol.ErrInvalid, got, p.Image.ArchiveSHA256)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	// One import per archive at a time: proposals racing with the same image wait for the
	// first import and use it.
	lock := r.importLock(p.Image.ArchiveSHA256)
	lock.Lock()
	defer lock.Unlock()
	if ref := r.cachedImage(p); ref != "" {
		return ref, nil
	}
	ref, _, err := r.rt.ImportImage(ctx, f)
	if err != nil {
		return "", fmt.Errorf("import image: %w", err)
	}
	r.mu.Lock()
	r.images[imageKey(p)] = ref
	r.mu.Unlock()
	return ref, nil
}

// importLock returns the lock that serialises imports of one archive.
func (r *Runner) importLock(sha string) *sync.Mutex {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.imports[sha]
	if l == nil {
		l = &sync.Mutex{}
		r.imports[sha] = l
	}
	return l
}

// imageKey names an archive image in the runner's cache: per renter, so that how fast a
// job starts does not tell a renter which images others sent.
func imageKey(p *protocol.Proposal) string { return p.Renter + "/" + p.Image.ArchiveSHA256 }

// cachedImage returns the reference of an archive image this provider imported before for
// the same renter and still holds, or "".
func (r *Runner) cachedImage(p *protocol.Proposal) string {
	if p.Image.ArchiveSHA256 == "" {
		return ""
	}
	r.mu.Lock()
	ref := r.images[imageKey(p)]
	r.mu.Unlock()
	if ref == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.rt.ImageSize(ctx, ref); err != nil {
		return ""
	}
	return ref
}

// start runs the job in the sandbox and watches it.
func (r *Runner) start(p *protocol.Proposal, leaseRaw []byte, ref string, gpus []sandbox.GPU) error {
	l, _, err := protocol.OpenLease(leaseRaw)
	if err != nil {
		return err
	}
	dir := r.jobDir(p.Job)
	out := filepath.Join(dir, "output")
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	now := r.clock.Now()
	wall := l.EndsAt.Sub(now)
	if wall <= 0 {
		return errors.New("the lease ended before the job could start")
	}
	spec := sandbox.Spec{
		ID: p.Job, Image: ref, Args: p.Args, Env: p.Env, GPUs: gpus, Egress: l.Egress,
		MemoryBytes: l.Limits.MemoryBytes, CPUMillis: l.Limits.CPUMillis, Pids: l.Limits.Pids, ScratchBytes: l.Limits.ScratchBytes,
		WallClock: wall, OutputDir: out, LogPath: filepath.Join(dir, "log"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.rt.Start(ctx, spec); err != nil {
		r.rt.Remove(context.Background(), p.Job)
		return fmt.Errorf("start: %w", err)
	}
	started := r.clock.Now()
	if _, err := r.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
		j.State, j.StartedAt, j.UpdatedAt = ledger.JobRunning, started, started
		return nil
	}); err != nil {
		return err
	}
	r.metrics.JobsStarted.Inc()
	r.log.Info("job started", "job", p.Job, "renter", p.Renter, "gpus", len(gpus), "image", ref)
	r.watch(p.Job)
	return nil
}

// watch waits for a job's end in the background and then writes its receipt.
func (r *Runner) watch(id string) {
	ctx, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.cancels[id] = cancel
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		if stop := r.cfg.UnmeteredStop.Duration; stop > 0 {
			go r.stopUnmetered(ctx, id, stop)
		}
		exit, err := r.rt.Wait(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return // the node is closing without stopping jobs; the next start resumes
			}
			exit = sandbox.Exit{Code: -1, Reason: "lost: " + err.Error()}
		}
		r.finish(id, exit)
	}()
}

// ReasonUnmetered ends a job whose renter stopped countersigning its usage.
const ReasonUnmetered = "renter stopped countersigning usage"

// stopUnmetered stops a running job once its renter has countersigned no checkpoint for
// stop (since the start when it never did): past its last checkpoint, a renter that does
// not countersign pays at most one checkpoint interval, so running on would be unpaid.
func (r *Runner) stopUnmetered(ctx context.Context, id string, stop time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(stop / 8):
		}
		j, err := r.ledger.GetJob(id)
		if err != nil || j.State != ledger.JobRunning {
			return
		}
		last := j.StartedAt
		if j.MeteredAt.After(last) {
			last = j.MeteredAt
		}
		if r.clock.Now().Sub(last) >= stop {
			r.log.Warn("stopping a job: its renter countersigned no usage", "job", id, "renter", j.Peer, "since", last)
			if err := r.rt.Kill(ctx, id, ReasonUnmetered); err != nil {
				r.log.Warn("stopping an unmetered job failed", "job", id, "err", err)
			}
			return
		}
	}
}

// checkpoint signs a usage checkpoint of a running job: the seconds since its start (at
// most its lease) and what they cost.
func (r *Runner) checkpoint(j ledger.Job) ([]byte, *protocol.Checkpoint, error) {
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return nil, nil, err
	}
	now := r.clock.Now()
	until := now
	if until.After(l.EndsAt) {
		until = l.EndsAt
	}
	secs := max(0, int64(until.Sub(j.StartedAt)/time.Second))
	cp := protocol.Checkpoint{Version: protocol.JobVersion, Job: j.ID, Lease: protocol.RecordSHA256(j.Lease), Provider: l.Provider,
		Renter: l.Renter, Seconds: secs, Amount: protocol.Cost(l.Price, l.GPUs, secs), At: now.UTC()}
	raw, err := protocol.Seal(protocol.KindCheckpoint, cp, r.peer.Key)
	return raw, &cp, err
}

// meter serves one checkpoint exchange: a signed checkpoint out, the renter's
// countersignature back, kept when it is the latest. An ended job answers with its end.
func (r *Runner) meter(s network.Stream, in *bufio.Reader, j ledger.Job, remote peer.ID) {
	if j.State != ledger.JobRunning {
		sendMsg(s, protocol.JobMsg{Type: "end", Status: wireStatus(viewJob(j, r.clock.Now())), Record: j.Receipt})
		return
	}
	raw, cp, err := r.checkpoint(j)
	if err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "checkpoint", Record: raw}); err != nil {
		return
	}
	m, err := readMsg(in)
	if err != nil {
		return
	}
	if m.Type != "countersign" {
		r.log.Warn("the renter refused a usage checkpoint", "job", j.ID, "renter", remote, "seconds", cp.Seconds, "why", m.Reason)
		return
	}
	if _, err := protocol.CheckCountersignature(m.Record, raw, protocol.KindCheckpoint, remote, r.clock.Now()); err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	r.ledger.UpdateJob(j.ID, func(j *ledger.Job) error {
		if cp.Seconds >= j.CheckpointSeconds {
			j.Checkpoint, j.CheckpointCountersig, j.CheckpointSeconds, j.MeteredAt = raw, m.Record, cp.Seconds, r.clock.Now()
		}
		return nil
	})
	sendMsg(s, protocol.JobMsg{Type: "ok"})
}

// finish writes the final receipt of a job, frees its GPUs and removes its container.
func (r *Runner) finish(id string, exit sandbox.Exit) {
	j, err := r.ledger.GetJob(id)
	if err != nil || j.State == ledger.JobEnded {
		return
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return
	}
	started := j.StartedAt
	ended := exit.EndedAt
	if ended.IsZero() || ended.Before(started) {
		ended = r.clock.Now()
	}
	if exit.Code != 0 && !strings.HasPrefix(exit.Reason, "lost") {
		// A job that failed may have failed because its GPU did: look now rather than at
		// the next hourly check, and put it on the provider if so.
		if why := r.lostUnder(id); why != "" {
			exit.Reason = fmt.Sprintf("%s (the job ended: %s, exit code %d)", why, exit.Reason, exit.Code)
		}
	}
	if strings.HasPrefix(exit.Reason, "lost") {
		ended = started // the provider cannot show how long it ran: no charge
	}
	if ended.After(l.EndsAt) {
		ended = l.EndsAt
	}
	secs := int64(ended.Sub(started) / time.Second)
	reason := exit.Reason
	if reason == sandbox.ReasonTimeout {
		reason = "lease expired"
	}
	rec := protocol.Receipt{
		Version: protocol.JobVersion, Job: id, Lease: protocol.RecordSHA256(j.Lease), Provider: l.Provider, Renter: l.Renter,
		Model: l.Model, GPUs: l.GPUs, StartedAt: started.UTC(), EndedAt: ended.UTC(), Seconds: secs, Price: l.Price,
		Amount: protocol.Cost(l.Price, l.GPUs, secs), Reason: reason, ExitCode: exit.Code,
	}
	raw, err := protocol.Seal(protocol.KindReceipt, rec, r.peer.Key)
	if err != nil {
		r.log.Error("signing the receipt failed", "job", id, "err", err)
		return
	}
	if _, err := r.ledger.UpdateJob(id, func(j *ledger.Job) error {
		j.State, j.Receipt, j.ExitCode, j.ExitReason, j.UpdatedAt = ledger.JobEnded, raw, exit.Code, reason, r.clock.Now()
		return nil
	}); err != nil {
		r.log.Error("storing the receipt failed", "job", id, "err", err)
		return
	}
	removed := make(chan struct{}) // real GPUs are cleaned once nothing of the job runs
	r.releaseAfterCleaning(id, removed)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.rt.Remove(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		r.log.Warn("removing the job's container failed", "job", id, "err", err)
	}
	close(removed)
	r.mu.Lock()
	delete(r.cancels, id)
	r.mu.Unlock()
	label := exit.Reason
	if strings.HasPrefix(label, "lost") {
		label = "lost"
	} else if label == sandbox.ReasonTimeout {
		label = "lease_expired"
	}
	r.metrics.JobsEnded.WithLabelValues(label).Inc()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.pruneImages() }()
	r.log.Info("job ended", "job", id, "reason", reason, "exit_code", exit.Code, "seconds", secs, "amount_usdc", rec.Amount)
	if j, err := r.ledger.GetJob(id); err == nil {
		go r.reports.ReportJob(context.Background(), j)
	}
}

// Reconcile runs at start: jobs the ledger says are running are found again in the
// sandbox and watched, or ended; containers the ledger does not know are removed.
func (r *Runner) Reconcile(ctx context.Context) error {
	if r.rt == nil {
		return nil
	}
	infos, err := r.rt.List(ctx)
	if err != nil {
		return err
	}
	held := map[string]sandbox.Info{}
	for _, in := range infos {
		held[in.ID] = in
	}
	jobs, err := r.ledger.Jobs()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, j := range jobs {
		if j.Side != "provider" {
			continue
		}
		known[j.ID] = true
		switch j.State {
		case ledger.JobRunning:
			r.Hold(j.ID, j.GPUs)
			if _, ok := held[j.ID]; ok {
				r.log.Info("job found again after restart", "job", j.ID)
				r.watch(j.ID)
			} else {
				r.finish(j.ID, sandbox.Exit{Code: -1, Reason: "lost: container gone after a provider restart", EndedAt: j.UpdatedAt})
			}
		case ledger.JobEnded, ledger.JobFailed:
			if _, ok := held[j.ID]; ok {
				r.rt.Remove(ctx, j.ID) // a crash between the receipt and the removal
			}
		case ledger.JobLeased:
			// The image never arrived or the start never happened: no charge.
			r.ledger.UpdateJob(j.ID, func(j *ledger.Job) error {
				j.State, j.Error, j.UpdatedAt = ledger.JobFailed, "provider restarted before the job started", r.clock.Now()
				return nil
			})
			r.rt.Remove(ctx, j.ID)
		}
	}
	for id := range held {
		if !known[id] {
			r.log.Warn("removing a container no job owns", "container", id)
			r.rt.Remove(ctx, id)
		}
	}
	// A job may have ended while the node was down, or before its GPUs were cleaned.
	r.mu.Lock()
	for i := range r.gpus {
		if r.gpus[i].job == "" && !r.gpus[i].gpu.Simulated {
			r.gpus[i].job = "restart"
		}
	}
	r.mu.Unlock()
	nothingRuns := make(chan struct{})
	close(nothingRuns)
	r.releaseAfterCleaning("restart", nothingRuns)
	return nil
}

// StopAll ends every running job with a reason and waits for their receipts.
func (r *Runner) StopAll(ctx context.Context, reason string) {
	r.mu.Lock()
	r.closed = true
	var ids []string
	for id := range r.cancels {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		if err := r.rt.Kill(ctx, id, reason); err != nil {
			r.log.Warn("stopping a job failed", "job", id, "err", err)
		}
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.mu.Lock()
		for _, c := range r.cancels {
			c()
		}
		r.mu.Unlock()
	}
}

// HandleControl serves a renter's requests about its job.
func (r *Runner) HandleControl(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	in := bufio.NewReader(s)
	m, err := readMsg(in)
	if err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	j, err := r.ledger.GetJob(m.Job)
	if err != nil || j.Side != "provider" || j.Peer != remote.String() {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: fmt.Sprintf("no job %s of yours here", m.Job)})
		return
	}
	switch m.Op {
	case "status":
		v := viewJob(j, r.clock.Now())
		sendMsg(s, protocol.JobMsg{Type: "status", Status: wireStatus(v)})
	case "cancel":
		if j.State == ledger.JobRunning {
			err = r.rt.Kill(context.Background(), j.ID, "cancelled by the renter")
		}
		if err != nil {
			sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
			return
		}
		v := viewJob(j, r.clock.Now())
		sendMsg(s, protocol.JobMsg{Type: "status", Status: wireStatus(v)})
	case "checkpoint":
		r.meter(s, in, j, remote)
	case "logs":
		s.SetDeadline(time.Time{})
		r.streamLogs(s, j.ID, m.Follow)
	case "receipt-countersign":
		if _, err := protocol.CheckCountersignature(m.Record, j.Receipt, protocol.KindReceipt, remote, r.clock.Now()); err != nil {
			sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
			return
		}
		if j, err := r.ledger.UpdateJob(j.ID, func(j *ledger.Job) error { j.ReceiptCountersig = m.Record; return nil }); err == nil {
			go r.reports.ReportJob(context.Background(), j) // the coordinator keeps the renter's countersignature too
		}
		sendMsg(s, protocol.JobMsg{Type: "ok"})
	case "fetch":
		s.SetDeadline(time.Now().Add(10 * time.Minute))
		if err := writeTar(s, filepath.Join(r.jobDir(j.ID), "output")); err != nil {
			s.Reset()
		}
	default:
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: fmt.Sprintf("unknown op %q", m.Op)})
	}
}

// streamLogs sends the job's log from the start, following it until the job ends when
// follow is set, then an end frame with the job's status (and receipt).
func (r *Runner) streamLogs(s network.Stream, id string, follow bool) {
	j, err := r.followLog(context.Background(), id, follow, func(b []byte) error {
		return sendMsg(s, protocol.JobMsg{Type: "log", Data: b})
	})
	if err != nil {
		return
	}
	sendMsg(s, protocol.JobMsg{Type: "end", Status: wireStatus(viewJob(j, r.clock.Now())), Record: j.Receipt})
}

// Logs writes the log of a job this provider runs to w, following it until the job ends
// when follow is set: the provider's operator reads it on the dashboard (the file is in
// the job's folder on this machine anyway).
func (r *Runner) Logs(ctx context.Context, id string, follow bool, w io.Writer) error {
	_, err := r.followLog(ctx, id, follow, func(b []byte) error {
		_, err := w.Write(b)
		return err
	})
	return err
}

// followLog hands a job's log to write piece by piece, from its start, and, when follow is
// set, as it grows until the job ends; it returns the job as it stands then.
func (r *Runner) followLog(ctx context.Context, id string, follow bool, write func([]byte) error) (ledger.Job, error) {
	path := filepath.Join(r.jobDir(id), "log")
	var off int64
	buf := make([]byte, 16<<10) // base64 in a JSON frame: well under maxJobFrame
	for {
		j, err := r.ledger.GetJob(id)
		if err != nil {
			return j, err
		}
		ended := j.State == ledger.JobEnded || j.State == ledger.JobFailed
		if f, err := os.Open(path); err == nil {
			f.Seek(off, io.SeekStart)
			for {
				n, rerr := f.Read(buf)
				if n > 0 {
					off += int64(n)
					if err := write(buf[:n]); err != nil {
						f.Close()
						return j, err
					}
				}
				if rerr != nil {
					break
				}
			}
			f.Close()
		}
		if ended || !follow {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-r.clock.After(100 * time.Millisecond):
		}
	}
}

// writeTar writes a folder as a tar stream: regular files and folders only. The folder is
// opened as an os.Root, so that nothing the job left there (links, or a folder swapped for
// a link while the walk runs) can lead outside it.
func writeTar(w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	fsys := root.FS()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // links and devices stay behind
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = path
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := root.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		// The job may swap the file for another between the walk and the open: serve only
		// the very file the walk saw.
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() != info.Size() {
			return fmt.Errorf("%s changed while it was read", path)
		}
		_, err = io.CopyN(tw, f, info.Size())
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// pruneImages keeps the images held for later jobs within jobs.image_cache_gb.
func (r *Runner) pruneImages() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := r.rt.PruneImages(ctx, r.cfg.ImageCacheGB<<30); err != nil {
		r.log.Warn("pruning the image cache failed", "err", err)
	}
}

// CleanupLoop deletes, every hour and at start, the folders (log, output) of jobs that
// ended more than jobs.retention ago, and keeps the image cache within its budget.
func (r *Runner) CleanupLoop(ctx context.Context) {
	for {
		r.removeExpiredFolders()
		if r.rt != nil {
			r.pruneImages()
		}
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(time.Hour):
		}
	}
}

// removeExpiredFolders deletes the folders of this provider's jobs that ended more than
// jobs.retention ago.
func (r *Runner) removeExpiredFolders() {
	jobs, err := r.ledger.Jobs()
	if err != nil {
		return
	}
	cutoff := r.clock.Now().Add(-r.cfg.Retention.Duration)
	for _, j := range jobs {
		if j.Side != "provider" || (j.State != ledger.JobEnded && j.State != ledger.JobFailed) || j.UpdatedAt.After(cutoff) {
			continue
		}
		dir := r.jobDir(j.ID)
		if _, err := os.Lstat(dir); err != nil {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			r.log.Warn("deleting an old job's folder failed", "job", j.ID, "err", err)
			continue
		}
		r.log.Info("deleted the folder of a job ended before the retention period", "job", j.ID, "ended", j.UpdatedAt, "retention", r.cfg.Retention)
	}
}
