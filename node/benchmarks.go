package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Benchmarks: a provider measures its GPUs, storage and network, signs the results with a
// coordinator's challenge (a benchmark attestation), attaches it to its offer, and delists
// GPUs under the thresholds (docs/benchmarks.md).

// benchNetMsg is one frame of the bench-net stream.
type benchNetMsg struct {
	Op     string `json:"op"` // challenge, ping, down, up
	Size   int64  `json:"size,omitempty"`
	Record []byte `json:"record,omitempty"`
	Error  string `json:"error,omitempty"`
}

// handleBenchNet serves a provider's benchmark requests on a coordinator: a challenge, then
// pings and transfers both ways.
func (n *Node) handleBenchNet(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	if n.coord != nil && !n.coord.benchRate.allow(remote, time.Now()) {
		// A benchmark run opens one stream; more than a few a minute is abuse (each may
		// ask for 64 MiB transfers).
		n.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "rate_limited").Inc()
		s.Reset()
		return
	}
	in := bufio.NewReader(s)
	buf := make([]byte, 64<<10)
	for {
		s.SetDeadline(time.Now().Add(time.Minute))
		var m benchNetMsg
		if err := readJSONFrame(in, 4096, &m); err != nil {
			return
		}
		var reply benchNetMsg
		switch m.Op {
		case "challenge":
			var nonce [16]byte
			rand.Read(nonce[:])
			raw, err := protocol.Seal(protocol.KindChallenge, protocol.Challenge{
				Version: protocol.AttestationVersion, Coordinator: n.id.String(), Provider: remote.String(),
				Nonce: hex.EncodeToString(nonce[:]), IssuedAt: n.clock.Now().UTC(),
			}, n.key)
			reply = benchNetMsg{Op: m.Op, Record: raw}
			if err != nil {
				reply.Error = err.Error()
			}
		case "ping":
			reply = benchNetMsg{Op: m.Op}
		case "down":
			if m.Size < 0 || m.Size > protocol.MaxBenchTransfer {
				return
			}
			for left := m.Size; left > 0; left -= int64(len(buf)) {
				if _, err := s.Write(buf[:min(left, int64(len(buf)))]); err != nil {
					return
				}
			}
			continue
		case "up":
			if m.Size < 0 || m.Size > protocol.MaxBenchTransfer {
				return
			}
			if _, err := io.CopyN(io.Discard, in, m.Size); err != nil {
				return
			}
			reply = benchNetMsg{Op: m.Op}
		default:
			return
		}
		if err := writeJSONFrame(s, reply); err != nil {
			return
		}
	}
}

// benchNetwork asks the coordinator for a challenge and measures the link: the median of
// ten round trips, then size bytes each way.
func (n *Node) benchNetwork(ctx context.Context, coord peer.ID, size int64) ([]byte, protocol.NetworkBenchmark, error) {
	nb := protocol.NetworkBenchmark{Peer: coord.String()}
	if err := n.reach(ctx, coord); err != nil {
		return nil, nb, err
	}
	s, err := n.host.NewStream(ctx, coord, protocol.BenchNetProtocol)
	if err != nil {
		return nil, nb, fmt.Errorf("reach coordinator %s for the benchmarks: %w", coord, err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(2 * time.Minute))
	in := bufio.NewReader(s)
	ask := func(m benchNetMsg) (benchNetMsg, error) {
		var r benchNetMsg
		if err := writeJSONFrame(s, m); err != nil {
			return r, err
		}
		if err := readJSONFrame(in, protocol.MaxChallengeSize*2, &r); err != nil {
			return r, err
		}
		if r.Error != "" {
			return r, errors.New(r.Error)
		}
		return r, nil
	}
	ch, err := ask(benchNetMsg{Op: "challenge"})
	if err != nil {
		return nil, nb, fmt.Errorf("challenge: %w", err)
	}
	var rtts []time.Duration
	for i := 0; i < 10; i++ {
		t0 := time.Now()
		if _, err := ask(benchNetMsg{Op: "ping"}); err != nil {
			return nil, nb, fmt.Errorf("ping: %w", err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	nb.RTTMilli = float64(rtts[len(rtts)/2].Microseconds()) / 1000
	t0 := time.Now()
	if err := writeJSONFrame(s, benchNetMsg{Op: "down", Size: size}); err != nil {
		return nil, nb, err
	}
	if _, err := io.CopyN(io.Discard, in, size); err != nil {
		return nil, nb, fmt.Errorf("download: %w", err)
	}
	nb.DownMbps = megabits(size, time.Since(t0))
	t0 = time.Now()
	if err := writeJSONFrame(s, benchNetMsg{Op: "up", Size: size}); err != nil {
		return nil, nb, err
	}
	zero := make([]byte, 64<<10)
	for left := size; left > 0; left -= int64(len(zero)) {
		if _, err := s.Write(zero[:min(left, int64(len(zero)))]); err != nil {
			return nil, nb, fmt.Errorf("upload: %w", err)
		}
	}
	var ack benchNetMsg
	if err := readJSONFrame(in, 4096, &ack); err != nil {
		return nil, nb, fmt.Errorf("upload: %w", err)
	}
	nb.UpMbps = megabits(size, time.Since(t0))
	return ch.Record, nb, nil
}

func megabits(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		d = time.Microsecond
	}
	return float64(int64(float64(bytes)*8/1e6/d.Seconds()*10+0.5)) / 10
}

// benchRunner runs a provider's benchmarks and keeps the latest attestation.
type benchRunner struct {
	n    *Node
	dir  string // where the storage benchmark writes
	run  sync.Mutex
	mu   sync.Mutex
	last *protocol.SignedAttestation
	wake chan struct{}
}

func newBenchRunner(n *Node, dir string) *benchRunner {
	b := &benchRunner{n: n, dir: dir, wake: make(chan struct{}, 1)}
	if raw, err := n.ledger.OwnAttestation(); err == nil {
		if a, err := protocol.CheckAttestation(raw, n.clock.Now(), n.trust.trust); err == nil {
			b.last = a
		}
	}
	return b
}

// Latest returns the latest attestation, nil before the first run.
func (b *benchRunner) Latest() *protocol.SignedAttestation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// Progress reports a run's steps.
type Progress func(step, steps int, what string)

// Run measures everything, signs the attestation, delists or relists GPUs and notifies
// the operator. GPUs leased to a job are not benchmarked: their previous figures stay.
func (b *benchRunner) Run(ctx context.Context, progress Progress) (*protocol.SignedAttestation, error) {
	return b.RunWith(ctx, "", progress)
}

// RunWith is Run against a given coordinator ("" for the first trusted one): a
// coordinator's challenge is answered with its own nonce.
func (b *benchRunner) RunWith(ctx context.Context, coord peer.ID, progress Progress) (*protocol.SignedAttestation, error) {
	if progress == nil {
		progress = func(int, int, string) {}
	}
	b.run.Lock()
	defer b.run.Unlock()
	ids, err := b.n.cfg.TrustedCoordinators()
	if err != nil || len(ids) == 0 {
		return nil, errors.New("no coordinator to benchmark against: set trust.coordinators")
	}
	probe, err := OpenProbe(b.n.cfg, b.n.id)
	if err != nil {
		return nil, err
	}
	defer probe.Close()
	gpus, err := probe.GPUs()
	if err != nil {
		return nil, err
	}
	if b.n.jobs != nil {
		b.n.jobs.probed(gpus)
	}
	steps, step := len(gpus)+2, 0
	next := func(what string) { step++; progress(step, steps, what) }
	if coord == "" {
		coord = ids[0]
	}
	next("network and challenge (coordinator " + coord.String() + ")")
	challenge, nb, err := b.n.benchNetwork(ctx, coord, b.n.cfg.Bench.NetworkMB<<20)
	if err != nil {
		return nil, err
	}
	prev := map[string]protocol.GPUBenchmark{}
	if last := b.Latest(); last != nil {
		for _, g := range last.GPUs {
			prev[g.UUID] = g
		}
	}
	seq, err := b.n.ledger.NextSerial("attestation", b.n.clock.Now())
	if err != nil {
		return nil, err
	}
	a := protocol.Attestation{Version: protocol.AttestationVersion, Provider: b.n.id.String(), Seq: seq, Challenge: challenge, Network: nb}
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
			if items, err := b.n.cfg.Provider.Items(); err == nil && model == "" && len(items) == 1 {
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
		if b.n.jobs != nil && b.n.jobs.busy(g.UUID) {
			if p, ok := prev[g.UUID]; ok {
				a.GPUs = append(a.GPUs, p) // leased: never benchmarked during a lease
			} else {
				a.GPUs = append(a.GPUs, protocol.GPUBenchmark{UUID: g.UUID, Model: g.Model, Simulated: g.Simulated})
			}
			continue
		}
		r, err := bench.Compute(ctx, g, seq)
		if errors.Is(err, bench.ErrComputeUnavailable) {
			b.n.log.Warn("GPU figures not measured", "gpu", g.UUID, "err", err)
		} else if err != nil {
			return nil, err
		}
		a.GPUs = append(a.GPUs, r)
	}
	next("storage")
	if a.Storage, err = bench.Storage(ctx, b.dir, b.n.cfg.Bench.StorageMB<<20); err != nil {
		return nil, err
	}
	a.IssuedAt = b.n.clock.Now().UTC()
	raw, err := protocol.Seal(protocol.KindAttestation, a, b.n.key)
	if err != nil {
		return nil, err
	}
	signed, err := protocol.CheckAttestation(raw, b.n.clock.Now(), b.n.trust.trust)
	if err != nil {
		return nil, fmt.Errorf("own attestation does not hold: %w", err)
	}
	if err := b.n.ledger.SetOwnAttestation(raw); err != nil {
		return nil, err
	}
	b.mu.Lock()
	old := b.last
	b.last = signed
	b.mu.Unlock()
	b.notifyChanges(old, signed)
	if b.n.prov != nil {
		b.n.prov.poke()
	}
	b.n.log.Info("benchmarks done", "gpus", len(a.GPUs), "rtt_ms", nb.RTTMilli, "storage_write_mbps", a.Storage.SeqWriteMBps)
	return signed, nil
}

// notifyChanges tells the operator about every GPU that fell under a threshold or came
// back over it.
func (b *benchRunner) notifyChanges(old, cur *protocol.SignedAttestation) {
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

func (b *benchRunner) notice(subject, body string) {
	now := b.n.clock.Now()
	seq, err := b.n.ledger.NextSerial("node-notification", now)
	if err == nil {
		_, err = b.n.ledger.AddNotification(ledger.Notification{ReceivedAt: now, From: "node", Seq: seq, Subject: subject, Body: body})
	}
	if err != nil {
		b.n.log.Warn("storing a notification failed", "err", err)
	}
	b.n.log.Warn(subject, "why", body)
}

// delisted counts, per model, the GPUs the latest attestation puts under a threshold.
func (b *benchRunner) delisted() map[string]int {
	out := map[string]int{}
	if a := b.Latest(); a != nil {
		for _, g := range a.GPUs {
			if g.Below != "" {
				out[g.Model]++
			}
		}
	}
	return out
}

// loop runs the benchmarks once the node has peers, then whenever the interval has passed
// or the driver changed (checked hourly), or on request.
func (b *benchRunner) loop(ctx context.Context) {
	for len(b.n.host.Network().Peers()) == 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	for {
		if b.due() {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			if _, err := b.Run(rctx, nil); err != nil && ctx.Err() == nil {
				b.n.log.Warn("benchmark run failed; retrying later", "err", err)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-time.After(min(time.Hour, b.n.cfg.Bench.Interval.Duration)):
		}
	}
}

// due says whether a run is needed: none yet, older than the interval, or the driver
// changed since.
func (b *benchRunner) due() bool {
	gpus, err := DetectGPUs(b.n.cfg, b.n.id)
	if err == nil && b.n.jobs != nil {
		b.n.jobs.probed(gpus)
	}
	last := b.Latest()
	if last == nil || b.n.clock.Now().Sub(last.IssuedAt) >= b.n.cfg.Bench.Interval.Duration {
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

// BenchView is the answer of GET /v1/bench.
type BenchView struct {
	Attestation *protocol.Attestation `json:"attestation"`
	Raw         []byte                `json:"raw"`
}

func attestationView(a *protocol.SignedAttestation) BenchView {
	return BenchView{Attestation: &a.Attestation, Raw: a.Raw}
}

// encodeProgress writes one progress line of POST /v1/bench/run.
func encodeProgress(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ChallengeProvider asks a provider to run its benchmarks now (a coordinator's request):
// the provider answers once the new attestation is signed, and returns it.
func (n *Node) ChallengeProvider(ctx context.Context, p peer.ID) (*protocol.SignedAttestation, error) {
	if n.coord == nil {
		return nil, fmt.Errorf("%w: only a coordinator challenges providers", ErrWrongRole)
	}
	if err := n.reach(ctx, p); err != nil {
		return nil, err
	}
	s, err := n.host.NewStream(ctx, p, protocol.BenchChallengeProtocol)
	if err != nil {
		return nil, fmt.Errorf("reach provider %s: %w", p, err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Minute))
	s.CloseWrite()
	var reply benchNetMsg
	if err := readJSONFrame(bufio.NewReader(s), protocol.MaxAttestationSize*2, &reply); err != nil {
		return nil, fmt.Errorf("provider's answer: %w", err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("provider %s: %s", p, reply.Error)
	}
	a, err := protocol.CheckAttestation(reply.Record, n.clock.Now(), n.trust.trust)
	if err != nil {
		return nil, fmt.Errorf("provider's attestation: %w", err)
	}
	if a.Signer != p || a.Challenge.Coordinator != n.id.String() {
		return nil, fmt.Errorf("%w: attestation by %s on a challenge of %s", protocol.ErrWrongSigner, a.Signer, a.Challenge.Coordinator)
	}
	return a, nil
}

// handleBenchChallenge runs the benchmarks when a trusted coordinator asks.
func (n *Node) handleBenchChallenge(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	if !n.trust.trust[remote] {
		writeJSONFrame(s, benchNetMsg{Error: "only a trusted coordinator may ask for a benchmark run"})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a, err := n.bench.RunWith(ctx, remote, nil)
	if err != nil {
		writeJSONFrame(s, benchNetMsg{Error: err.Error()})
		return
	}
	writeJSONFrame(s, benchNetMsg{Op: "attestation", Record: a.Raw})
}
