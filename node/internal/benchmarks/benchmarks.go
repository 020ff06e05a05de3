// Package benchmarks is a provider's benchmark runner (GPUs, storage, network against a
// coordinator's challenge, signed into an attestation) and a coordinator's side of it: the
// bench-net stream and challenges (docs/benchmarks.md).
package benchmarks

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
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

// HandleBenchNet serves a provider's benchmark requests on a coordinator: a challenge, then
// pings and transfers both ways.
func (c *Coordinator) HandleBenchNet(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	if !c.rate.Allow(remote, time.Now()) {
		// A benchmark run opens one stream; more than a few a minute is abuse (each may
		// ask for 64 MiB transfers).
		c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "rate_limited").Inc()
		c.peer.Misbehaved(remote)
		s.Reset()
		return
	}
	in := bufio.NewReader(s)
	buf := make([]byte, 64<<10)
	// One benchmark run per stream: one challenge, ten round trips (a few more allowed),
	// one transfer each way, each within MaxBenchTransfer and the source's hourly budget.
	ops := map[string]int{}
	limits := map[string]int{"challenge": 1, "ping": 16, "down": 1, "up": 1, "receipt": 1}
	s.SetDeadline(time.Now().Add(3 * time.Minute))
	// What this end measures, for the receipt: round trips from an answer to the next
	// ping, the download from its first byte to the provider's next request, the upload
	// as it comes in.
	var (
		challenge             protocol.Challenge
		rtts                  []time.Duration
		answered, downStart   time.Time
		downBytes, upBytes    int64
		downTook, upTook      time.Duration
		lastWasPing, inFlight bool
	)
	holding := false // this run's turn to transfer
	release := func() {
		if holding {
			<-c.transfers
			holding = false
		}
	}
	defer release()
	for {
		var m protocol.BenchNetMsg
		if err := protocol.ReadJSONFrame(in, protocol.MaxBenchNetRequest, &m); err != nil {
			return
		}
		arrived := time.Now()
		if lastWasPing && m.Op == "ping" {
			rtts = append(rtts, arrived.Sub(answered))
		}
		if inFlight {
			downTook, inFlight = arrived.Sub(downStart), false
		}
		lastWasPing = m.Op == "ping"
		if ops[m.Op]++; ops[m.Op] > limits[m.Op] {
			c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "over_budget").Inc()
			c.peer.Misbehaved(remote)
			protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: m.Op, Error: fmt.Sprintf("one benchmark run per stream: at most %d %q", limits[m.Op], m.Op)})
			return
		}
		if (m.Op == "down" || m.Op == "up") && (m.Size < 0 || m.Size > protocol.MaxBenchTransfer || !c.bytes.Take(s.Conn(), time.Now(), float64(m.Size))) {
			c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "over_budget").Inc()
			c.peer.Misbehaved(remote)
			protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: m.Op, Error: fmt.Sprintf("transfer of %d bytes refused: at most %d MiB each, %d MiB an hour per peer", m.Size, protocol.MaxBenchTransfer>>20, BenchBytesPerHour>>20)})
			return
		}
		if (m.Op == "down" || m.Op == "up") && !holding {
			// The turn is for a real run: its challenge first, transfers that count, and a
			// few turns an hour per peer, so that nobody holds it for nothing.
			why := ""
			switch {
			case challenge.Nonce == "":
				why = "ask for a challenge first"
			case m.Size < protocol.MinReceiptBytes:
				why = fmt.Sprintf("a transfer of at least %d MiB", protocol.MinReceiptBytes>>20)
			case !c.takeTurn(remote, time.Now()):
				why = fmt.Sprintf("at most %d benchmark runs an hour", turnsPerHour)
			}
			if why != "" {
				c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "over_budget").Inc()
				protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: m.Op, Error: "transfer refused: " + why})
				return
			}
			select {
			case c.transfers <- struct{}{}:
				holding = true
				// A run holds the turn for its two transfers at most transferHold: a
				// peer that reads or sends slowly (to keep others from measuring) loses
				// its stream and the turn.
				s.SetDeadline(time.Now().Add(TransferHold))
			case <-time.After(transferWait):
				protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: m.Op, Error: "the coordinator is measuring other providers: run the benchmarks again later"})
				return
			}
			arrived = time.Now() // the turn's wait is not the transfer's
		}
		var reply protocol.BenchNetMsg
		switch m.Op {
		case "challenge":
			var nonce [16]byte
			rand.Read(nonce[:])
			challenge = protocol.Challenge{
				Version: protocol.AttestationVersion, Coordinator: c.peer.ID.String(), Provider: remote.String(),
				Nonce: hex.EncodeToString(nonce[:]), IssuedAt: c.clock.Now().UTC(),
			}
			// The run is scored with this coordinator's latest model catalogue, which
			// goes with the challenge.
			var models []byte
			if cat := c.models.Latest(c.peer.ID); cat != nil {
				challenge.ModelsSeq, models = cat.Seq, cat.Raw
			}
			raw, err := protocol.Seal(protocol.KindChallenge, challenge, c.peer.Key)
			reply = protocol.BenchNetMsg{Op: m.Op, Record: raw, Models: models}
			if err != nil {
				reply.Error = err.Error()
			}
		case "ping":
			reply = protocol.BenchNetMsg{Op: m.Op}
		case "down":
			downStart, downBytes, inFlight = time.Now(), m.Size, true
			for left := m.Size; left > 0; left -= int64(len(buf)) {
				if _, err := s.Write(buf[:min(left, int64(len(buf)))]); err != nil {
					return
				}
			}
			continue
		case "up":
			if _, err := io.CopyN(io.Discard, in, m.Size); err != nil {
				return
			}
			upBytes, upTook = m.Size, time.Since(arrived)
			release() // the run's transfers are over
			reply = protocol.BenchNetMsg{Op: m.Op}
		case "receipt":
			r := protocol.NetworkReceipt{Version: protocol.AttestationVersion, Coordinator: c.peer.ID.String(),
				Provider: remote.String(), Nonce: challenge.Nonce, MeasuredAt: c.clock.Now().UTC(), Bytes: min(downBytes, upBytes),
				Minimum: c.minimum}
			r.RTTSamples = len(rtts)
			if len(rtts) > 0 {
				slices.Sort(rtts)
				r.RTTMilli = float64(rtts[len(rtts)/2].Microseconds()) / 1000
			}
			if downTook > 0 {
				r.DownMbps = megabits(downBytes, downTook)
			}
			if upTook > 0 {
				r.UpMbps = megabits(upBytes, upTook)
			}
			reply = protocol.BenchNetMsg{Op: m.Op}
			if challenge.Nonce == "" {
				reply.Error = "a receipt is for a run with a challenge: ask for one first"
			} else if raw, err := protocol.Seal(protocol.KindNetworkReceipt, r, c.peer.Key); err != nil {
				reply.Error = err.Error()
			} else {
				reply.Record = raw
				if c.links != nil && r.Bytes >= protocol.MinReceiptBytes {
					if err := c.links.SetLinkMeasurement(ledger.LinkMeasurement{Provider: r.Provider, MeasuredAt: r.MeasuredAt,
						RTTMilli: r.RTTMilli, UpMbps: r.UpMbps, DownMbps: r.DownMbps, Bytes: r.Bytes}); err != nil {
						c.log.Warn("a provider's link measurement was not kept", "provider", r.Provider, "err", err)
					}
				}
			}
		default:
			return
		}
		if err := protocol.WriteJSONFrame(s, reply); err != nil {
			return
		}
		answered = time.Now()
	}
}

// benchNetwork asks the coordinator for a challenge and measures the link: the median of
// ten round trips, then size bytes each way; then it asks for the coordinator's receipt
// of what it measured from its end. It returns the challenge, its own figures and the
// receipt.
func (b *Runner) benchNetwork(ctx context.Context, coord peer.ID, size int64) ([]byte, protocol.NetworkBenchmark, []byte, error) {
	nb := protocol.NetworkBenchmark{Peer: coord.String()}
	if err := b.peer.Reach(ctx, coord); err != nil {
		return nil, nb, nil, err
	}
	s, err := b.peer.OpenStream(ctx, coord, protocol.BenchNetProtocol)
	if err != nil {
		return nil, nb, nil, fmt.Errorf("reach coordinator %s for the benchmarks: %w", coord, err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(2 * time.Minute))
	in := bufio.NewReader(s)
	ask := func(m protocol.BenchNetMsg) (protocol.BenchNetMsg, error) {
		var r protocol.BenchNetMsg
		if err := protocol.WriteJSONFrame(s, m); err != nil {
			return r, err
		}
		if err := protocol.ReadJSONFrame(in, protocol.MaxBenchNetAnswer, &r); err != nil {
			return r, err
		}
		if r.Error != "" {
			return r, errors.New(r.Error)
		}
		return r, nil
	}
	ch, err := ask(protocol.BenchNetMsg{Op: "challenge"})
	if err != nil {
		return nil, nb, nil, fmt.Errorf("challenge: %w", err)
	}
	if len(ch.Models) > 0 {
		// The catalogue the challenge names; one held already, or older, changes nothing.
		if err := b.models.Take(ch.Models, "bench-net"); err != nil && !errors.Is(err, protocol.ErrReplay) {
			return nil, nb, nil, fmt.Errorf("the coordinator's model catalogue: %w", err)
		}
	}
	var rtts []time.Duration
	for i := 0; i < 10; i++ {
		t0 := time.Now()
		if _, err := ask(protocol.BenchNetMsg{Op: "ping"}); err != nil {
			return nil, nb, nil, fmt.Errorf("ping: %w", err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	nb.RTTMilli = float64(rtts[len(rtts)/2].Microseconds()) / 1000
	t0 := time.Now()
	if err := protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "down", Size: size}); err != nil {
		return nil, nb, nil, err
	}
	if _, err := io.CopyN(io.Discard, in, size); err != nil {
		return nil, nb, nil, fmt.Errorf("download: %w", err)
	}
	nb.DownMbps = megabits(size, time.Since(t0))
	t0 = time.Now()
	if err := protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "up", Size: size}); err != nil {
		return nil, nb, nil, err
	}
	zero := make([]byte, 64<<10)
	rate := b.simulatedUpload() // bits per second; 0: none
	for sent := int64(0); sent < size; {
		n, err := s.Write(zero[:min(size-sent, int64(len(zero)))])
		if err != nil {
			return nil, nb, nil, fmt.Errorf("upload: %w", err)
		}
		sent += int64(n)
		if rate > 0 {
			time.Sleep(time.Until(t0.Add(time.Duration(float64(sent*8) / rate * float64(time.Second)))))
		}
	}
	var ack protocol.BenchNetMsg
	if err := protocol.ReadJSONFrame(in, protocol.MaxBenchNetRequest, &ack); err != nil {
		return nil, nb, nil, fmt.Errorf("upload: %w", err)
	}
	nb.UpMbps = megabits(size, time.Since(t0))
	receipt, err := ask(protocol.BenchNetMsg{Op: "receipt"})
	if err != nil {
		return nil, nb, nil, fmt.Errorf("the coordinator's network receipt: %w", err)
	}
	return ch.Record, nb, receipt.Record, nil
}

func megabits(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		d = time.Microsecond
	}
	return float64(int64(float64(bytes)*8/1e6/d.Seconds()*10+0.5)) / 10
}

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
	// Notifications the delisting notices, Serials the attestations' and notices' sequences.
	Own           *ledger.ProviderStore
	History       *ledger.HistoryStore
	Notifications *ledger.NotificationStore
	Serials       *ledger.SerialStore
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
	b := &Runner{peer: d.Peer, own: d.Own, history: d.History, notifications: d.Notifications, serials: d.Serials,
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
	prev := map[string]protocol.GPUBenchmark{}
	if last := b.Latest(); last != nil {
		for _, g := range last.GPUs {
			prev[g.UUID] = g
		}
	}
	seq, err := b.serials.NextSerial("attestation", b.clock.Now())
	if err != nil {
		return nil, err
	}
	a := protocol.Attestation{Version: protocol.AttestationVersion, Provider: b.peer.ID.String(), Seq: seq, Challenge: challenge, Network: nb, NetworkReceipt: receipt}
	for _, g := range gpus {
		next(fmt.Sprintf("GPU %d %s", g.Index, g.Model))
		if a.DriverVersion == "" {
			a.DriverVersion, a.CUDAVersion = g.DriverVersion, g.CUDAVersion
		}
		if g.Health.Error != "" {
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
			a.GPUs = append(a.GPUs, protocol.GPUBenchmark{UUID: uuid, Model: model, Below: protocol.LostPrefix + g.Health.Error})
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
		r, err := bench.Compute(ctx, g, seq, cat)
		if errors.Is(err, bench.ErrComputeUnavailable) {
			b.log.Warn("GPU figures not measured", "gpu", g.UUID, "err", err)
		} else if err != nil {
			return nil, err
		}
		a.GPUs = append(a.GPUs, r)
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

// notifyChanges tells the operator about every GPU that fell under a threshold or came
// back over it, and about the host's link or disk falling under its minimum or passing
// again.
func (b *Runner) notifyChanges(old, cur *protocol.SignedAttestation) {
	wasBelow := ""
	if old != nil {
		wasBelow = old.HostBelow
	}
	switch {
	case cur.HostBelow != "" && wasBelow == "":
		b.notice("this provider is delisted: its link or disk is under the minimum", cur.HostBelow+
			". Every GPU stays out of your offer and gets no job until a benchmark run passes (gpunex bench run; the minimums are in docs/benchmarks.md).")
	case cur.HostBelow == "" && wasBelow != "":
		b.notice("this provider is listed again: its link and disk pass the minimums", "The latest benchmarks pass the host minimums; your GPUs are back in your offer unless one is under its own threshold.")
	}
	was := map[string]string{}
	if old != nil {
		for _, g := range old.GPUs {
			was[g.UUID] = g.Below
		}
	}
	now := map[string]bool{}
	for _, g := range cur.GPUs {
		now[g.UUID] = true
		before, known := was[g.UUID]
		switch {
		case strings.HasPrefix(g.Below, protocol.LostPrefix) && (!known || before == ""):
			b.notice(fmt.Sprintf("GPU %s (%s) delisted", g.UUID, g.Model), g.Below+": the driver no longer reaches it (fallen off the bus). "+
				"Check `nvidia-smi` and the kernel log for Xid errors, power and seating; a lost GPU usually needs a reboot. "+
				"It stays out of your offer and gets no job until it answers again.")
		case strings.HasPrefix(g.Below, protocol.NotInCatalogue) && (!known || before == ""):
			b.notice(fmt.Sprintf("GPU %s (%s) delisted", g.UUID, g.Model), g.Below+". It stays out of your offer until the coordinator's model catalogue holds "+
				"its model (ask the coordinator; `gpunex coordinator models list` on its node shows the catalogue): the node benchmarks it again as soon as the catalogue arrives.")
		case g.Below != "" && (!known || before == ""):
			b.notice(fmt.Sprintf("GPU %s (%s) delisted", g.UUID, g.Model), g.Below+". It stays out of your offer until a benchmark run passes (gpunex bench run).")
		case g.Below == "" && known && before != "":
			b.notice(fmt.Sprintf("GPU %s (%s) listed again", g.UUID, g.Model), fmt.Sprintf("The latest benchmarks pass the thresholds (performance score %d).", g.PerfScore))
		}
	}
	// A lost GPU has no UUID of its own in the attestation (lost-<index>): when it answers
	// again, its entry is gone.
	if old != nil {
		for _, g := range old.GPUs {
			if strings.HasPrefix(g.Below, protocol.LostPrefix) && !now[g.UUID] {
				b.notice(fmt.Sprintf("GPU %s (%s) answers again", g.UUID, g.Model), "The driver reaches it again; it is back in your offer once its benchmarks pass (see gpunex bench show).")
			}
		}
	}
}

func (b *Runner) notice(subject, body string) {
	now := b.clock.Now()
	seq, err := b.serials.NextSerial("node-notification", now)
	if err == nil {
		_, err = b.notifications.AddNotification(ledger.Notification{ReceivedAt: now, From: "node", Seq: seq, Subject: subject, Body: body})
	}
	if err != nil {
		b.log.Warn("storing a notification failed", "err", err)
	}
	b.log.Warn(subject, "why", body)
	if b.alert != nil {
		b.alert("benchmarks", subject, body)
	}
}

// Delisted counts, per model, the GPUs the latest attestation puts under a threshold (all
// of them when the host is under its minimum).
func (b *Runner) Delisted() map[string]int {
	out := map[string]int{}
	if a := b.Latest(); a != nil {
		for _, g := range a.GPUs {
			if g.Below != "" || a.HostBelow != "" {
				out[g.Model]++
			}
		}
	}
	return out
}

// Loop runs the benchmarks once the node has peers, then whenever the interval has passed
// or the driver changed (checked hourly), or on request.
func (b *Runner) Loop(ctx context.Context) {
	for b.peer.Connected() == 0 {
		select {
		case <-ctx.Done():
			return
		case <-b.clock.After(500 * time.Millisecond):
		}
	}
	for {
		if b.Due() {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			if _, err := b.Run(rctx, nil); err != nil && ctx.Err() == nil {
				b.log.Warn("benchmark run failed; retrying later", "err", err)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-b.clock.After(min(time.Hour, b.cfg.Interval.Duration)):
		}
	}
}

// Due says whether a run is needed: none yet, older than the interval, or the driver
// changed since.
func (b *Runner) Due() bool {
	gpus, err := b.detect()
	if err == nil && b.jobs != nil {
		b.jobs.Probed(gpus)
	}
	b.mu.Lock()
	forced := b.forced // cleared by a run that succeeds
	b.mu.Unlock()
	last := b.Latest()
	if forced || last == nil || b.clock.Now().Sub(last.IssuedAt) >= b.cfg.Interval.Duration {
		return true
	}
	if err != nil || len(gpus) == 0 {
		return false
	}
	// A driver change, or a GPU that fell off the bus or came back since the last run.
	lostNow, lostThen := 0, 0
	for _, g := range gpus {
		if g.Health.Error != "" {
			lostNow++
		}
	}
	for _, g := range last.GPUs {
		if strings.HasPrefix(g.Below, protocol.LostPrefix) {
			lostThen++
		}
	}
	return gpus[0].DriverVersion != last.DriverVersion || lostNow != lostThen
}

// CatalogueChanged runs the benchmarks again when the coordinator they run against
// publishes a model catalogue that changes this machine's GPUs: their model's entry, or
// the model a real GPU's name maps to (a GPU delisted for want of an entry is listed once
// a run scores it). A change that concerns other models costs nothing.
//
// It looks in the background, once any run in progress has ended: a catalogue that came
// with a run's own challenge is the one that run scores with.
func (b *Runner) CatalogueChanged(coordinator peer.ID, _, cur *protocol.ModelCatalogue) {
	if len(b.trusted) == 0 || coordinator != b.trusted[0] {
		return
	}
	go func() {
		b.run.Lock()
		b.run.Unlock()
		b.catalogueChanged(coordinator, cur)
	}()
}

func (b *Runner) catalogueChanged(coordinator peer.ID, cur *protocol.ModelCatalogue) {
	last := b.Latest()
	if last == nil {
		return // the first run is due anyway
	}
	used := b.models.Lookup(coordinator, last.Challenge.ModelsSeq)
	if last.Challenge.Coordinator != coordinator.String() || used == nil {
		used = protocol.FirstModels()
	}
	gpus, err := b.detect()
	if err != nil || !bench.CatalogueAffects(used, cur, gpus) {
		return
	}
	// Every provider the change concerns benchmarks again: spread them over CatalogueJitter.
	wait := time.Duration(mrand.Int64N(int64(CatalogueJitter) + 1))
	b.log.Info("the coordinator's model catalogue changed this machine's models: benchmarking again", "seq", cur.Seq, "in", wait)
	b.mu.Lock()
	b.forced = true // until a run succeeds
	b.mu.Unlock()
	time.AfterFunc(wait, b.Wake)
}

// CatalogueJitter spreads over this long the runs that a new model catalogue starts on the
// providers it concerns, all against one coordinator. (Tests shorten it.)
var CatalogueJitter = 2 * time.Minute

// Wake asks the loop for a run now.
func (b *Runner) Wake() {
	b.mu.Lock()
	b.forced = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// CheckGPUs probes the GPUs now and hands the result to the job runner (which stops jobs
// on a GPU that was lost): what the hourly check does, for a job that failed.
func (b *Runner) CheckGPUs() {
	if gpus, err := b.detect(); err == nil && b.jobs != nil {
		b.jobs.Probed(gpus)
	}
}

// detect lists the machine's GPUs.
func (b *Runner) detect() ([]bench.GPUInfo, error) {
	p, err := b.probe()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.GPUs()
}

// HistoryKeep is how long a provider keeps its benchmark runs and scores for its charts.
const HistoryKeep = 180 * 24 * time.Hour

// View is the API's view of an attestation.
func View(a *protocol.SignedAttestation) api.BenchView {
	return api.BenchView{Attestation: &a.Attestation, Receipt: a.Receipt, Raw: a.Raw,
		EnterpriseBelow: protocol.HostShortfall(a.Receipt, a.Storage, protocol.EnterpriseMinimum)}
}

// CoordinatorDeps are what a coordinator's side of the benchmarks needs.
type CoordinatorDeps struct {
	Peer    *p2p.Peer
	Clock   clock.Clock
	Metrics *metrics.Metrics
	// Trust checks the providers' attestations (the coordinator trusts itself).
	Trust protocol.Trust
	// Minimum is the listing minimum it holds providers to (coordinator.host_minimum).
	Minimum protocol.HostMinimum
	// Links keeps the latest measurement of each provider's link, for its review.
	Links Links
	// Models holds the coordinator's model catalogue, which its challenges name.
	Models Catalogues
	Log    *slog.Logger
}

// Links keeps a coordinator's measurements of providers' links (the ledger).
type Links interface {
	SetLinkMeasurement(ledger.LinkMeasurement) error
}

// Coordinator serves the providers' network benchmark and challenges (bench-net stream) and
// asks providers to benchmark now.
type Coordinator struct {
	peer    *p2p.Peer
	clock   clock.Clock
	metrics *metrics.Metrics
	trust   protocol.Trust
	models  Catalogues
	// rate bounds the bench-net streams of each peer; bytes their transfers, per peer and
	// per network.
	rate  *p2p.PeerRate
	bytes *p2p.Sources
	// transfers lets one run's transfers go at a time, so that what the coordinator
	// measures is the provider's link, not the other runs sharing the coordinator's.
	transfers chan struct{}
	minimum   protocol.HostMinimum
	links     Links
	log       *slog.Logger
	turnsMu   sync.Mutex
	turns     map[peer.ID][]time.Time // transfer turns taken in the last hour, per peer
}

// turnsPerHour is how many transfer turns one peer gets an hour (a run takes one).
const turnsPerHour = 4

// takeTurn records a turn for p at now, unless p had turnsPerHour in the last hour.
func (c *Coordinator) takeTurn(p peer.ID, now time.Time) bool {
	c.turnsMu.Lock()
	defer c.turnsMu.Unlock()
	if c.turns == nil || len(c.turns) > 100_000 {
		c.turns = map[peer.ID][]time.Time{} // a flood of identities costs them their history, not our memory
	}
	kept := c.turns[p][:0]
	for _, t := range c.turns[p] {
		if now.Sub(t) < time.Hour {
			kept = append(kept, t)
		}
	}
	if len(kept) >= turnsPerHour {
		c.turns[p] = kept
		return false
	}
	c.turns[p] = append(kept, now)
	return true
}

// transferWait is how long a run waits for its turn to transfer.
const transferWait = 90 * time.Second

// TransferHold is how long a run may keep its turn: the largest transfers (64 MiB each
// way) at the listing minimum's rates (20 Mbit/s up, 50 down) take 38 s. (Tests shorten
// it.)
var TransferHold = 45 * time.Second

// benchRunsPerMinute bounds the bench-net streams a peer opens in a minute.
const benchRunsPerMinute = 6

// BenchBytesPerHour is how many bytes of bench-net transfers one peer may ask for an hour
// (both ways; one full run, 128 MiB, at once); its network (IPv4 address, IPv6 /64) four
// times that.
// A run at the largest size (64 MiB each way) takes 128 MiB.
const BenchBytesPerHour = 512 << 20

// NewCoordinator returns a coordinator's side of the benchmarks.
func NewCoordinator(d CoordinatorDeps) *Coordinator {
	c := &Coordinator{peer: d.Peer, clock: d.Clock, metrics: d.Metrics, trust: d.Trust, rate: p2p.NewPeerRate(benchRunsPerMinute),
		bytes:     p2p.NewSources(float64(BenchBytesPerHour)/60, 2*protocol.MaxBenchTransfer, 4),
		transfers: make(chan struct{}, 1), minimum: d.Minimum, links: d.Links, models: d.Models, log: d.Log}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// ChallengeProvider asks a provider to run its benchmarks now (a coordinator's request):
// the provider answers once the new attestation is signed, and returns it.
func (c *Coordinator) ChallengeProvider(ctx context.Context, p peer.ID) (*protocol.SignedAttestation, error) {
	s, err := c.peer.OpenStream(ctx, p, protocol.BenchChallengeProtocol)
	if err != nil {
		return nil, fmt.Errorf("reach provider %s: %w", p, err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Minute))
	s.CloseWrite()
	var reply protocol.BenchNetMsg
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxBenchChallengeAnswer, &reply); err != nil {
		return nil, fmt.Errorf("provider's answer: %w", err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("provider %s: %s", p, reply.Error)
	}
	a, err := protocol.CheckAttestation(reply.Record, c.clock.Now(), c.trust, c.models.Lookup)
	if err != nil {
		return nil, fmt.Errorf("provider's attestation: %w", err)
	}
	if a.Signer != p || a.Challenge.Coordinator != c.peer.ID.String() {
		return nil, fmt.Errorf("%w: attestation by %s on a challenge of %s", protocol.ErrWrongSigner, a.Signer, a.Challenge.Coordinator)
	}
	return a, nil
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
