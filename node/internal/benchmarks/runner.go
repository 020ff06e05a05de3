// Package benchmarks is a provider's benchmark runner (GPUs, storage, network against a
// coordinator's challenge, signed into an attestation) and a coordinator's side of it: the
// bench-net stream and challenges (docs/benchmarks.md).
//
// runner.go is the provider's runner and one run; loop.go when runs happen; notices.go what
// the operator is told of a run; coordinator.go the coordinator's side and turns.go who gets
// its transfer turn; benchnet.go the bench-net stream both speak.
package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/p2p"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Benchmarks: a provider measures its GPUs, storage and network, signs the results with a
// coordinator's challenge (a benchmark attestation), attaches it to its offer, and delists
// GPUs under the thresholds (docs/benchmarks.md).

// Leases are the job runner's GPU leases as the benchmarks see them.
type Leases interface {
	// Busy says whether a GPU is leased to a job (benchmarks leave it alone).
	Busy(uuid string) bool
	// Probed hands the runner the GPUs the latest probe found.
	Probed(gpus []bench.GPUInfo)
}

// Catalogues are the model catalogues of the trusted coordinators (the node's model book).
type Catalogues interface {
	// Take checks a catalogue and keeps it when newer (protocol.ErrReplay otherwise).
	Take(raw []byte, source string) error
	// Lookup returns a coordinator's catalogue of a sequence, nil when not held.
	Lookup(coordinator peer.ID, seq uint64) *protocol.ModelCatalogue
	// Latest returns a coordinator's newest catalogue, nil when none.
	Latest(coordinator peer.ID) *protocol.SignedModelCatalogue
}

// Poker wakes the provider's publisher, so that the offer shows a new attestation at once.
type Poker interface{ Poke() }

// Deps are what a provider's benchmark runner needs.
type Deps struct {
	Peer *p2p.Peer
	// Own keeps the latest attestation, History the benchmark runs for the dashboard,
	// Notifications the delisting notices, Serials the attestations' and notices' sequences,
	// Applicant the provider's certificate and application it names when it asks for a turn.
	Own           *ledger.ProviderStore
	History       *ledger.HistoryStore
	Notifications *ledger.NotificationStore
	Serials       *ledger.SerialStore
	Applicant     *ledger.ApplicantStore
	Clock         clock.Clock
	Log           *slog.Logger
	// Trusted are the coordinators whose challenges count; the first is benchmarked against.
	Trusted  []peer.ID
	Bench    config.BenchConfig
	Provider config.ProviderConfig
	// Probe opens the machine's GPU probe (NVML, or the simulated GPUs of the configuration).
	Probe func() (bench.Probe, error)
	// Dir is where the storage benchmark writes.
	Dir string
	// Models holds the coordinators' model catalogues: the runner names and scores GPUs
	// with the one its challenge names.
	Models Catalogues
	// Jobs and Publisher may be nil.
	Jobs      Leases
	Publisher Poker
	// Alert, when set, tells the operator of each notice (delisted, listed again, lost).
	Alert func(key, subject, body string)
}

// Runner runs a provider's benchmarks and keeps the latest attestation.
type Runner struct {
	peer          *p2p.Peer
	own           *ledger.ProviderStore
	history       *ledger.HistoryStore
	notifications *ledger.NotificationStore
	serials       *ledger.SerialStore
	applicant     *ledger.ApplicantStore
	clock         clock.Clock
	log           *slog.Logger
	trusted       []peer.ID
	trust         protocol.Trust
	cfg           config.BenchConfig
	provider      config.ProviderConfig
	probe         func() (bench.Probe, error)
	jobs          Leases
	publisher     Poker
	models        Catalogues
	alert         func(key, subject, body string)

	dir  string // where the storage benchmark writes
	run  sync.Mutex
	mu   sync.Mutex
	last *protocol.SignedAttestation
	wake chan struct{}
	// uploadMbps is bench.simulated_upload_mbps, which SimulateUpload changes.
	uploadMbps float64
	// forced makes the next Due true (Wake).
	forced bool
	// refused is set while the latest run was refused the coordinator's transfer turn for
	// want of a certificate or an application (ErrNotProvider).
	refused bool
}

// SimulateUpload slows the network benchmark's upload to mbps from the next run on (0:
// none), as bench.simulated_upload_mbps does (tests, devnet).
func (b *Runner) SimulateUpload(mbps float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.uploadMbps = mbps
}

func (b *Runner) simulatedUpload() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.uploadMbps * 1e6
}

// NewRunner returns a provider's benchmark runner holding the latest attestation from the
// ledger while it is valid; Loop runs it.
func NewRunner(d Deps) *Runner {
	b := &Runner{peer: d.Peer, own: d.Own, history: d.History, notifications: d.Notifications, serials: d.Serials, applicant: d.Applicant,
		clock: d.Clock, log: d.Log, trusted: d.Trusted,
		trust: protocol.NewTrust(d.Trusted...), cfg: d.Bench, provider: d.Provider, probe: d.Probe,
		jobs: d.Jobs, publisher: d.Publisher, models: d.Models, alert: d.Alert, dir: d.Dir, wake: make(chan struct{}, 1), uploadMbps: d.Bench.SimulatedUploadMbps}
	if raw, err := b.own.OwnAttestation(); err == nil {
		if a, err := protocol.CheckAttestation(raw, b.clock.Now(), b.trust, b.models.Lookup); err == nil {
			b.last = a
		}
	}
	return b
}

// Latest returns the latest attestation, nil before the first run.
func (b *Runner) Latest() *protocol.SignedAttestation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// Run measures everything, signs the attestation, delists or relists GPUs and notifies
// the operator. GPUs leased to a job are not benchmarked: their previous figures stay.
func (b *Runner) Run(ctx context.Context, progress api.Progress) (*protocol.SignedAttestation, error) {
	return b.RunWith(ctx, "", progress)
}

// RunWith is Run against a given coordinator ("" for the first trusted one): a
// coordinator's challenge is answered with its own nonce.
func (b *Runner) RunWith(ctx context.Context, coord peer.ID, progress api.Progress) (*protocol.SignedAttestation, error) {
	if progress == nil {
		progress = func(int, int, string) {}
	}
	b.run.Lock()
	defer b.run.Unlock()
	ids := b.trusted
	if len(ids) == 0 {
		return nil, errors.New("no coordinator to benchmark against: set trust.coordinators")
	}
	probe, err := b.probe()
	if err != nil {
		return nil, err
	}
	defer probe.Close()
	gpus, err := probe.GPUs()
	if err != nil {
		return nil, err
	}
	if b.jobs != nil {
		b.jobs.Probed(gpus)
	}
	steps, step := len(gpus)+2, 0
	next := func(what string) { step++; progress(step, steps, what) }
	if coord == "" {
		coord = ids[0]
	}
	next("network and challenge (coordinator " + coord.String() + ")")
	challenge, nb, receipt, err := b.benchNetwork(ctx, coord, b.cfg.NetworkMB<<20)
	b.mu.Lock()
	b.refused = errors.Is(err, ErrNotProvider)
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ch, _, err := protocol.CheckChallenge(challenge, b.trust, b.peer.ID)
	if err != nil {
		return nil, fmt.Errorf("the coordinator's challenge: %w", err)
	}
	cat := b.models.Lookup(coord, ch.ModelsSeq)
	if cat == nil {
		return nil, fmt.Errorf("%w: the coordinator's challenge names its model catalogue %d, which it did not send", protocol.ErrUnknownModels, ch.ModelsSeq)
	}
	bench.NameGPUs(gpus, cat) // as the catalogue of the challenge names them
	seq, err := b.serials.NextSerial("attestation", b.clock.Now())
	if err != nil {
		return nil, err
	}
	a := protocol.Attestation{Version: protocol.AttestationVersion, Provider: b.peer.ID.String(), Seq: seq, Challenge: challenge, Network: nb, NetworkReceipt: receipt}
	if err := b.measureGPUs(ctx, &a, gpus, cat, next); err != nil {
		return nil, err
	}
	next("storage")
	if a.Storage, err = bench.Storage(ctx, b.dir, b.cfg.StorageMB<<20); err != nil {
		return nil, err
	}
	// The host's minimums, on the coordinator's figures (checked again by every validator).
	r, err := protocol.CheckNetworkReceipt(receipt, ch, b.peer.ID.String())
	if err != nil {
		return nil, fmt.Errorf("the coordinator's network receipt: %w", err)
	}
	a.HostBelow = protocol.HostShortfall(r, a.Storage, r.Minimum)
	return b.keep(a, r)
}

// measureGPUs adds each GPU's entry to the attestation: its figures, scored with the
// catalogue of the run's challenge; a lost GPU's reason; a leased GPU's previous figures.
func (b *Runner) measureGPUs(ctx context.Context, a *protocol.Attestation, gpus []bench.GPUInfo, cat *protocol.ModelCatalogue, next func(string)) error {
	prev := map[string]protocol.GPUBenchmark{}
	if last := b.Latest(); last != nil {
		for _, g := range last.GPUs {
			prev[g.UUID] = g
		}
	}
	for _, g := range gpus {
		next(fmt.Sprintf("GPU %d %s", g.Index, g.Model))
		if a.DriverVersion == "" {
			a.DriverVersion, a.CUDAVersion = g.DriverVersion, g.CUDAVersion
		}
		if g.Health.Error != "" {
			a.GPUs = append(a.GPUs, b.lostEntry(g, prev))
			continue
		}
		if b.jobs != nil && b.jobs.Busy(g.UUID) {
			// Leased: never benchmarked during a lease. Its previous figures stay (none
			// without a previous run), scored with this run's catalogue.
			p, ok := prev[g.UUID]
			if !ok || strings.HasPrefix(p.Below, protocol.LostPrefix) {
				p = protocol.GPUBenchmark{UUID: g.UUID, Model: g.Model, Simulated: g.Simulated}
			}
			p.PerfScore, p.Below = cat.Score(p), cat.Shortfall(p)
			a.GPUs = append(a.GPUs, p)
			continue
		}
		r, err := bench.Compute(ctx, g, a.Seq, cat)
		if errors.Is(err, bench.ErrComputeUnavailable) {
			b.log.Warn("GPU figures not measured", "gpu", g.UUID, "err", err)
		} else if err != nil {
			return err
		}
		a.GPUs = append(a.GPUs, r)
	}
	return nil
}

// lostEntry is the attestation's entry of a GPU that fell off the bus.
func (b *Runner) lostEntry(g bench.GPUInfo, prev map[string]protocol.GPUBenchmark) protocol.GPUBenchmark {
	// Counted against its model, so that the offer lists one GPU fewer: the model
	// the probe still reports, else the one this GPU had in the last attestation,
	// else the only model declared.
	model := g.Model
	if p, ok := prev[g.UUID]; ok && model == "" {
		model = p.Model
	}
	if items, err := b.provider.Items(); err == nil && model == "" && len(items) == 1 {
		model = items[0].Model
	}
	if model == "" {
		model = "LOST"
	}
	uuid := g.UUID
	if uuid == "" {
		uuid = fmt.Sprintf("lost-%d", g.Index)
	}
	return protocol.GPUBenchmark{UUID: uuid, Model: model, Below: protocol.LostPrefix + g.Health.Error}
}

// keep signs the attestation, checks it as any validator would, keeps it in the ledger and
// the history, tells the operator what changed and wakes the publisher.
func (b *Runner) keep(a protocol.Attestation, r *protocol.NetworkReceipt) (*protocol.SignedAttestation, error) {
	a.IssuedAt = b.clock.Now().UTC()
	raw, err := protocol.Seal(protocol.KindAttestation, a, b.peer.Key)
	if err != nil {
		return nil, err
	}
	signed, err := protocol.CheckAttestation(raw, b.clock.Now(), b.trust, b.models.Lookup)
	if err != nil {
		return nil, fmt.Errorf("own attestation does not hold: %w", err)
	}
	if err := b.own.SetOwnAttestation(raw); err != nil {
		return nil, err
	}
	point := api.BenchPoint{GPUs: a.GPUs, StorageWrite: a.Storage.SeqWriteMBps, StorageRead: a.Storage.SeqReadMBps,
		UpMbps: r.UpMbps, DownMbps: r.DownMbps, HostBelow: a.HostBelow}
	if err := b.history.AddHistory(ledger.HistoryBench, a.IssuedAt, point, HistoryKeep); err != nil {
		b.log.Warn("the run is not kept in the benchmark history", "err", err)
	}
	b.mu.Lock()
	old := b.last
	b.last, b.forced = signed, false
	b.mu.Unlock()
	b.notifyChanges(old, signed)
	if b.publisher != nil {
		b.publisher.Poke()
	}
	b.log.Info("benchmarks done", "gpus", len(a.GPUs), "rtt_ms", r.RTTMilli, "up_mbps", r.UpMbps, "down_mbps", r.DownMbps,
		"storage_write_mbps", a.Storage.SeqWriteMBps, "host_below", a.HostBelow)
	return signed, nil
}

// HistoryKeep is how long a provider keeps its benchmark runs and scores for its charts.
const HistoryKeep = 180 * 24 * time.Hour

// View is the API's view of an attestation.
func View(a *protocol.SignedAttestation) api.BenchView {
	return api.BenchView{Attestation: &a.Attestation, Receipt: a.Receipt, Raw: a.Raw,
		EnterpriseBelow: protocol.HostShortfall(a.Receipt, a.Storage, protocol.EnterpriseMinimum)}
}

// HandleBenchChallenge runs the benchmarks when a trusted coordinator asks.
func (b *Runner) HandleBenchChallenge(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	if !b.trust[remote] {
		protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Error: "only a trusted coordinator may ask for a benchmark run"})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a, err := b.RunWith(ctx, remote, nil)
	if err != nil {
		protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Error: err.Error()})
		return
	}
	protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "attestation", Record: a.Raw})
}
