package benchmarks

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// The bench-net stream (docs/protocols/benchmarks.md, section 4), both ends: the
// coordinator serves one benchmark run per stream (a challenge, pings, a transfer each way,
// its receipt of what it measured), the provider's runner asks for them.

// netOpLimits bound the requests of one stream: one benchmark run per stream, one
// challenge, ten round trips (a few more allowed), one transfer each way, one receipt.
var netOpLimits = map[string]int{"challenge": 1, "ping": 16, "down": 1, "up": 1, "receipt": 1}

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
	r := &netRun{c: c, s: s, in: bufio.NewReader(s), remote: remote, ops: map[string]int{}}
	defer r.release()
	s.SetDeadline(time.Now().Add(3 * time.Minute))
	for {
		var m protocol.BenchNetMsg
		if err := protocol.ReadJSONFrame(r.in, protocol.MaxBenchNetRequest, &m); err != nil {
			return
		}
		arrived := time.Now()
		r.timeArrival(m.Op, arrived)
		if !r.withinLimits(m) {
			return
		}
		if (m.Op == "down" || m.Op == "up") && !r.holding {
			if !r.takeTransferTurn(m) {
				return
			}
			arrived = time.Now() // the turn's wait is not the transfer's
		}
		reply, ok := r.answer(m, arrived)
		if !ok {
			return
		}
		if reply == nil {
			continue // the download's bytes are the answer
		}
		if err := protocol.WriteJSONFrame(s, *reply); err != nil {
			return
		}
		r.answered = time.Now()
	}
}

// netRun is one bench-net stream on the coordinator: the run's challenge, what this end
// measures for the receipt, and whether the run holds the transfer turn.
type netRun struct {
	c      *Coordinator
	s      network.Stream
	in     *bufio.Reader
	remote peer.ID
	ops    map[string]int // requests so far, by op
	// What this end measures, for the receipt: round trips from an answer to the next
	// ping, the download from its first byte to the provider's next request, the upload
	// as it comes in.
	challenge             protocol.Challenge
	rtts                  []time.Duration
	answered, downStart   time.Time
	downBytes, upBytes    int64
	downTook, upTook      time.Duration
	lastWasPing, inFlight bool
	holding               bool // this run's turn to transfer
}

// release gives the transfer turn back, when the run holds it.
func (r *netRun) release() {
	if r.holding {
		<-r.c.transfers
		r.holding = false
	}
}

// timeArrival times what a request's arrival ends: the round trip of a ping that follows
// a ping's answer, the download that the next request follows.
func (r *netRun) timeArrival(op string, arrived time.Time) {
	if r.lastWasPing && op == "ping" {
		r.rtts = append(r.rtts, arrived.Sub(r.answered))
	}
	if r.inFlight {
		r.downTook, r.inFlight = arrived.Sub(r.downStart), false
	}
	r.lastWasPing = op == "ping"
}

// withinLimits counts a request against the stream's limits and a transfer against the
// source's byte budgets; past them the provider is told why (and counted as misbehaving).
func (r *netRun) withinLimits(m protocol.BenchNetMsg) bool {
	c := r.c
	if r.ops[m.Op]++; r.ops[m.Op] > netOpLimits[m.Op] {
		c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "over_budget").Inc()
		c.peer.Misbehaved(r.remote)
		protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: fmt.Sprintf("one benchmark run per stream: at most %d %q", netOpLimits[m.Op], m.Op)})
		return false
	}
	if (m.Op == "down" || m.Op == "up") && (m.Size < 0 || m.Size > protocol.MaxBenchTransfer || !c.bytes.Take(r.s.Conn(), time.Now(), float64(m.Size))) {
		c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "over_budget").Inc()
		c.peer.Misbehaved(r.remote)
		protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: fmt.Sprintf("transfer of %d bytes refused: at most %d MiB each, %d MiB an hour per peer", m.Size, protocol.MaxBenchTransfer>>20, BenchBytesPerHour>>20)})
		return false
	}
	return true
}

// takeTransferTurn waits for the coordinator's transfer turn for the run's first transfer,
// or tells the provider why it gets none.
func (r *netRun) takeTransferTurn(m protocol.BenchNetMsg) bool {
	c := r.c
	// The turn is for a real run: its challenge first, transfers that count, and a
	// few turns an hour per peer, so that nobody holds it for nothing.
	why := ""
	switch {
	case r.challenge.Nonce == "":
		why = "ask for a challenge first"
	case m.Size < protocol.MinReceiptBytes:
		why = fmt.Sprintf("a transfer of at least %d MiB", protocol.MinReceiptBytes>>20)
	case !c.takeTurn(r.remote, time.Now()):
		why = fmt.Sprintf("at most %d benchmark runs an hour", turnsPerHour)
	}
	if why != "" {
		c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "over_budget").Inc()
		protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: "transfer refused: " + why})
		return false
	}
	select {
	case c.transfers <- struct{}{}:
		r.holding = true
		// A run holds the turn for its two transfers at most transferHold: a
		// peer that reads or sends slowly (to keep others from measuring) loses
		// its stream and the turn.
		r.s.SetDeadline(time.Now().Add(TransferHold))
		return true
	case <-time.After(transferWait):
		protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: "the coordinator is measuring other providers: run the benchmarks again later"})
		return false
	}
}

// answer serves one request: the frame to answer with, nil for a download (its bytes are
// the answer); false ends the stream.
func (r *netRun) answer(m protocol.BenchNetMsg, arrived time.Time) (*protocol.BenchNetMsg, bool) {
	switch m.Op {
	case "challenge":
		reply := r.newChallenge()
		return &reply, true
	case "ping":
		return &protocol.BenchNetMsg{Op: m.Op}, true
	case "down":
		r.downStart, r.downBytes, r.inFlight = time.Now(), m.Size, true
		buf := make([]byte, 64<<10)
		for left := m.Size; left > 0; left -= int64(len(buf)) {
			if _, err := r.s.Write(buf[:min(left, int64(len(buf)))]); err != nil {
				return nil, false
			}
		}
		return nil, true
	case "up":
		if _, err := io.CopyN(io.Discard, r.in, m.Size); err != nil {
			return nil, false
		}
		r.upBytes, r.upTook = m.Size, time.Since(arrived)
		r.release() // the run's transfers are over
		return &protocol.BenchNetMsg{Op: m.Op}, true
	case "receipt":
		reply := r.receipt()
		return &reply, true
	default:
		return nil, false
	}
}

// newChallenge signs a challenge for the stream's remote peer.
func (r *netRun) newChallenge() protocol.BenchNetMsg {
	c := r.c
	var nonce [16]byte
	rand.Read(nonce[:])
	r.challenge = protocol.Challenge{
		Version: protocol.AttestationVersion, Coordinator: c.peer.ID.String(), Provider: r.remote.String(),
		Nonce: hex.EncodeToString(nonce[:]), IssuedAt: c.clock.Now().UTC(),
	}
	// The run is scored with this coordinator's latest model catalogue, which
	// goes with the challenge.
	var models []byte
	if cat := c.models.Latest(c.peer.ID); cat != nil {
		r.challenge.ModelsSeq, models = cat.Seq, cat.Raw
	}
	raw, err := protocol.Seal(protocol.KindChallenge, r.challenge, c.peer.Key)
	reply := protocol.BenchNetMsg{Op: "challenge", Record: raw, Models: models}
	if err != nil {
		reply.Error = err.Error()
	}
	return reply
}

// receipt signs what this end measured of the run, and keeps the measurement of the
// provider's link when the run moved enough to count.
func (r *netRun) receipt() protocol.BenchNetMsg {
	c := r.c
	rc := protocol.NetworkReceipt{Version: protocol.AttestationVersion, Coordinator: c.peer.ID.String(),
		Provider: r.remote.String(), Nonce: r.challenge.Nonce, MeasuredAt: c.clock.Now().UTC(), Bytes: min(r.downBytes, r.upBytes),
		Minimum: c.minimum}
	rc.RTTSamples = len(r.rtts)
	if len(r.rtts) > 0 {
		slices.Sort(r.rtts)
		rc.RTTMilli = float64(r.rtts[len(r.rtts)/2].Microseconds()) / 1000
	}
	if r.downTook > 0 {
		rc.DownMbps = megabits(r.downBytes, r.downTook)
	}
	if r.upTook > 0 {
		rc.UpMbps = megabits(r.upBytes, r.upTook)
	}
	reply := protocol.BenchNetMsg{Op: "receipt"}
	if r.challenge.Nonce == "" {
		reply.Error = "a receipt is for a run with a challenge: ask for one first"
	} else if raw, err := protocol.Seal(protocol.KindNetworkReceipt, rc, c.peer.Key); err != nil {
		reply.Error = err.Error()
	} else {
		reply.Record = raw
		if c.links != nil && rc.Bytes >= protocol.MinReceiptBytes {
			if err := c.links.SetLinkMeasurement(ledger.LinkMeasurement{Provider: rc.Provider, MeasuredAt: rc.MeasuredAt,
				RTTMilli: rc.RTTMilli, UpMbps: rc.UpMbps, DownMbps: rc.DownMbps, Bytes: rc.Bytes}); err != nil {
				c.log.Warn("a provider's link measurement was not kept", "provider", rc.Provider, "err", err)
			}
		}
	}
	return reply
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
