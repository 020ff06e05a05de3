package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"
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
	subsystem.Base // the peer, clock, logger and metrics of the node
	Ledger         *ledger.JobStore
	Jobs           config.JobsConfig
	// Trusted are the coordinators whose escrow holds count and who may ask for a hold's
	// release.
	Trusted []peer.ID
	// Runtime is the sandbox jobs run in; nil when jobs cannot run here, and RuntimeErr
	// says why (proposals are then refused with it).
	Runtime    sandbox.Runtime
	RuntimeErr error
	// Dir holds the per-job folders (image archive, log, output, input) and the renters'
	// input chunks (.inputs); it is created if need be.
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
	// RuntimeClockOffset is the node's clock less the system clock (debug.clock_offset):
	// the sandbox dates a job's exit by the system clock (containerd's), and the receipt
	// dates it by the node's, as it dates the start.
	RuntimeClockOffset time.Duration
}

// Runner is the provider's side of jobs: it decides on proposals by its policy, reserves
// GPUs, receives images, runs jobs in the sandbox, watches them, and writes receipts.
type Runner struct {
	// runtimeOffset moves the sandbox's times onto the node's clock (Deps.RuntimeClockOffset).
	runtimeOffset time.Duration
	peer          *p2p.Peer
	ledger        *ledger.JobStore
	clock         clock.Clock
	log           *slog.Logger
	metrics       *metrics.Metrics
	cfg           config.JobsConfig
	trusted       []peer.ID
	publisher     Publisher
	reports       Reporter

	rt    sandbox.Runtime // nil when jobs cannot run here; rtErr says why
	probe func() (bench.Probe, error)
	rtErr error
	dir   string // per-job folders: image archive, log, output
	gpus  *gpuSlots
	rate  *p2p.PeerRate
	nets  *p2p.NetworkBudget // proposals per network (IPv4 address, IPv6 /64)
	// sessions counts the renters' sessions with their running jobs (sessions.go).
	sessions *jobSessions
	// input is data in: the renters' chunk cache and the inputs in flight (inputs.go).
	input   *providerInputs
	exec    execPolicy   // the rate and idle deadline of shells (exec.go)
	tunnels *tunnelGuard // each peer's and network's tunnel opens (tunnel.go)

	mu sync.Mutex
	// detectErr says why the probe found no GPU at start; cleared when a later probe
	// finds one.
	detectErr error
	cancels   map[string]context.CancelFunc // running jobs' watchers
	images    map[string]jobImage           // imported archive images by renter and archive SHA-256
	imports   map[string]*sync.Mutex        // one import per archive at a time
	extending map[string]bool               // jobs whose lease is being extended (extend.go)
	closed    bool
	wg        sync.WaitGroup
}

// NewRunner returns a provider's job runner with the GPUs the probe finds. The node then
// runs Reconcile, hands it the benchmark runner (UseAttestations) and registers its
// stream handlers.
func NewRunner(d Deps) (*Runner, error) {
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return nil, err
	}
	r := &Runner{peer: d.Peer, ledger: d.Ledger, clock: d.Clock, log: d.Log, metrics: d.Metrics, cfg: d.Jobs, trusted: d.Trusted,
		publisher: d.Publisher, reports: d.Reports, rt: d.Runtime, rtErr: d.RuntimeErr, probe: d.Probe, dir: d.Dir,
		rate: p2p.NewPeerRate(d.Jobs.ProposalsPerMinute), nets: p2p.NewNetworkBudget(float64(4*d.Jobs.ProposalsPerMinute), float64(4*d.Jobs.ProposalsPerMinute), d.Trusted...), cancels: map[string]context.CancelFunc{}, images: map[string]jobImage{}, imports: map[string]*sync.Mutex{}, sessions: newJobSessions(), exec: newExecPolicy(),
		tunnels: newTunnelGuard(d.Jobs, d.Trusted), runtimeOffset: d.RuntimeClockOffset}
	r.input = newProviderInputs(filepath.Join(d.Dir, ".inputs"), d.Jobs.InputCacheGB<<30, r)
	clean := d.CleanGPU
	if clean == nil {
		clean = func(uuid string) error { return cleanGPU(d.Probe, d.Log, uuid) }
	}
	// The GPUs jobs get are the ones the probe finds, with their real UUIDs and indexes
	// (simulated ones where the configuration declares them).
	gpus, err := detectGPUs(d.Probe)
	if err != nil {
		r.detectErr = fmt.Errorf("GPU detection: %w", err)
		r.log.Warn("no GPUs for jobs", "err", err)
	}
	r.gpus = newGPUSlots(gpus, d.Log, d.Clock, clean, &r.wg)
	return r, nil
}
