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
// its receipt of what it measured), the provider's runner asks for them. Requests are in
// lock step with the answers: every answer holds a fresh token that the next ping, download
// or upload echoes, so that none is sent before the answer it follows has arrived (what
// the coordinator times would otherwise be the provider's sending, not the link).

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
		if r.holding {
			r.s.SetReadDeadline(r.stallDeadline()) // the upload's request comes promptly
		}
		var m protocol.BenchNetMsg
		if err := protocol.ReadJSONFrame(r.in, protocol.MaxBenchNetRequest, &m); err != nil {
			return
		}
		arrived := time.Now()
		r.timeArrival(m.Op, arrived)
		if !r.withinLimits(m) || !r.inStep(m) {
			return
		}
		if (m.Op == "down" || m.Op == "up") && !r.holding {
			if !r.mayTransfer(m) || !r.withinBudget(m) || !r.waitTurn(m) {
				return
			}
			arrived = time.Now() // the turn's wait is not the transfer's
		} else if (m.Op == "down" || m.Op == "up") && !r.withinBudget(m) {
			return
		}
		reply, ok := r.answer(m, arrived)
		if !ok {
			return
		}
		if err := protocol.WriteJSONFrame(s, reply); err != nil {
			return
		}
		r.answered = time.Now()
	}
}

// HandleBenchNetV1 answers a provider still on the first bench-net protocol, which this
// coordinator no longer measures: its first request gets an error that tells its operator
// to upgrade (the provider logs it as its run's failure), and the stream ends.
func (c *Coordinator) HandleBenchNetV1(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	if !c.rate.Allow(remote, time.Now()) {
		c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "rate_limited").Inc()
		c.peer.Misbehaved(remote)
		s.Reset()
		return
	}
	s.SetDeadline(time.Now().Add(time.Minute))
	var m protocol.BenchNetMsg
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxBenchNetRequest, &m); err != nil {
		return
	}
	c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "unknown_version").Inc()
	protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: m.Op, Error: fmt.Sprintf("this coordinator measures over %s: upgrade gpunex on this provider "+
		"to benchmark against it (docs/protocols/benchmarks.md, section 4); the attestation held stays valid until it expires", protocol.BenchNetProtocol)})
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
	holding               bool      // this run's turn to transfer
	turnEnd               time.Time // when the turn is taken back, at the latest
	standing              standing  // what the challenge request showed
	token                 string    // of the latest answer: the next ping or transfer echoes it
}

// release gives the transfer turn back, when the run holds it.
func (r *netRun) release() {
	if r.holding {
		r.c.turn.give()
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

// withinLimits counts a request against the stream's limits; past them the provider is
// told why (and counted as misbehaving).
func (r *netRun) withinLimits(m protocol.BenchNetMsg) bool {
	c := r.c
	if r.ops[m.Op]++; r.ops[m.Op] > netOpLimits[m.Op] {
		c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "over_budget").Inc()
		c.peer.Misbehaved(r.remote)
		protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: fmt.Sprintf("one benchmark run per stream: at most %d %q", netOpLimits[m.Op], m.Op)})
		return false
	}
	if (m.Op == "down" || m.Op == "up") && (m.Size < 0 || m.Size > protocol.MaxBenchTransfer) {
		return r.overBudget(m)
	}
	return true
}

// withinBudget counts a transfer against the byte budgets of its peer and network.
func (r *netRun) withinBudget(m protocol.BenchNetMsg) bool {
	return r.c.bytes.Take(r.s.Conn(), time.Now(), float64(m.Size)) || r.overBudget(m)
}

// overBudget refuses a transfer out of range or over budget (counted as misbehaving).
func (r *netRun) overBudget(m protocol.BenchNetMsg) bool {
	r.c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "over_budget").Inc()
	r.c.peer.Misbehaved(r.remote)
	protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: fmt.Sprintf("transfer of %d bytes refused: at most %d MiB each, %d MiB an hour per peer", m.Size, protocol.MaxBenchTransfer>>20, BenchBytesPerHour>>20)})
	return false
}

// inStep checks that a ping or a transfer echoes the token of the answer before it, and
// that the upload follows the download (whose end it echoes): one sent before that answer
// arrived is refused, and counted as misbehaving.
func (r *netRun) inStep(m protocol.BenchNetMsg) bool {
	if m.Op != "ping" && m.Op != "down" && m.Op != "up" {
		return true
	}
	why := ""
	switch {
	case r.token == "":
		why = "ask for a challenge first"
	case m.Op == "up" && r.ops["down"] == 0:
		why = "download first: the upload echoes the token that ends the download"
	case m.Token != r.token:
		why = "each ping, download and upload echoes the token of the answer before it: send it once that answer has arrived"
	default:
		return true
	}
	r.c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", "out_of_step").Inc()
	r.c.peer.Misbehaved(r.remote)
	protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: why})
	return false
}

// nextToken draws the token of the answer being written.
func (r *netRun) nextToken() string {
	var b [8]byte
	rand.Read(b[:])
	r.token = hex.EncodeToString(b[:])
	return r.token
}

// mayTransfer says whether the run's first transfer may have the coordinator's turn, or
// tells the provider why not.
func (r *netRun) mayTransfer(m protocol.BenchNetMsg) bool {
	c := r.c
	// The turn is for a real run of a provider of this coordinator: its challenge first
	// (which showed its standing), transfers that count, and a few turns an hour per peer,
	// so that nobody holds it for nothing.
	why, reason := "", "over_budget"
	switch {
	case r.challenge.Nonce == "":
		why = "ask for a challenge first"
	case m.Size < protocol.MinBenchTransfer:
		why = fmt.Sprintf("a transfer of at least %d MiB", protocol.MinBenchTransfer>>20)
	case r.standing == stranger:
		why, reason = "this coordinator measures its certified providers and applicants only: apply first (gpunex apply), or check the certificate this node holds (gpunex status)", "not_provider"
	case r.standing == applicant && !c.applicantNets.Take(r.s.Conn(), time.Now(), 1):
		why = fmt.Sprintf("at most %d applicants' runs an hour from one network: run the benchmarks again later", applicantTurnsPerNetwork)
	case !c.takeTurn(r.remote, time.Now()):
		why = fmt.Sprintf("at most %d benchmark runs an hour", turnsPerHour)
	default:
		return true
	}
	c.metrics.RecordsRejected.WithLabelValues("bench-net", "stream", reason).Inc()
	protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: "transfer refused: " + why, Reason: reason})
	return false
}

// waitTurn waits for the coordinator's transfer turn, at most transferWait, behind the runs
// of a higher standing (turnQueue).
func (r *netRun) waitTurn(m protocol.BenchNetMsg) bool {
	if !r.c.turn.take(r.standing, transferWait) {
		protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Error: "the coordinator is measuring other providers: run the benchmarks again later", Reason: "busy"})
		return false
	}
	r.holding = true
	// A run holds the turn for its two transfers at most transferHold: a peer that reads or
	// sends slowly (to keep others from measuring) loses its stream and the turn; one that
	// stops moving bytes loses them sooner (paceDeadline).
	r.turnEnd = time.Now().Add(TransferHold)
	r.s.SetDeadline(r.turnEnd)
	return true
}

// A run that holds the turn keeps it moving: every write of the download and every read of
// the upload goes through within transferStall, the upload's request comes within
// transferStall of the download's end, and each transfer averages minTransferMbps after its
// first transferStall (a link that slow is far under any listing minimum). A peer that
// stops reading, or trickles, loses its stream and the turn in seconds rather than
// TransferHold.
var transferStall = 5 * time.Second // (Tests shorten it.)

const minTransferMbps = 1.0

// paceDeadline is when a transfer that began at start must have moved done bytes: at its
// average's floor, within transferStall from now, within the turn.
func (r *netRun) paceDeadline(start time.Time, done int64) time.Time {
	d := start.Add(transferStall + time.Duration(float64(done)*8/(minTransferMbps*1e6)*float64(time.Second)))
	if stall := r.stallDeadline(); stall.Before(d) {
		return stall
	}
	return d
}

// stallDeadline is when the run's next frame must be through, within its turn.
func (r *netRun) stallDeadline() time.Time {
	if d := time.Now().Add(transferStall); d.Before(r.turnEnd) {
		return d
	}
	return r.turnEnd
}

// pacedReader reads an upload, each read within the run's pace.
type pacedReader struct {
	r     *netRun
	start time.Time
	done  int64
}

func (p *pacedReader) Read(b []byte) (int, error) {
	p.r.s.SetReadDeadline(p.r.paceDeadline(p.start, p.done+int64(len(b))))
	n, err := p.r.in.Read(b)
	p.done += int64(n)
	return n, err
}

// answer serves one request and returns the frame to answer with (after a download's
// bytes, the frame that ends them); false ends the stream.
func (r *netRun) answer(m protocol.BenchNetMsg, arrived time.Time) (protocol.BenchNetMsg, bool) {
	switch m.Op {
	case "challenge":
		r.standing = r.c.standingOf(r.remote, m)
		reply := r.newChallenge()
		reply.Token = r.nextToken()
		return reply, true
	case "ping":
		return protocol.BenchNetMsg{Op: m.Op, Token: r.nextToken()}, true
	case "down":
		// The turn is the run's: a frame says so (a refusal is a frame too), then the bytes.
		start := time.Now()
		r.s.SetWriteDeadline(r.paceDeadline(start, 0))
		if err := protocol.WriteJSONFrame(r.s, protocol.BenchNetMsg{Op: m.Op, Size: m.Size}); err != nil {
			return protocol.BenchNetMsg{}, false
		}
		r.downStart, r.downBytes, r.inFlight = time.Now(), m.Size, true
		buf := make([]byte, 64<<10)
		for sent := int64(0); sent < m.Size; sent += int64(len(buf)) {
			chunk := buf[:min(m.Size-sent, int64(len(buf)))]
			r.s.SetWriteDeadline(r.paceDeadline(start, sent+int64(len(chunk))))
			if _, err := r.s.Write(chunk); err != nil {
				return protocol.BenchNetMsg{}, false
			}
		}
		r.s.SetWriteDeadline(r.stallDeadline())
		return protocol.BenchNetMsg{Op: m.Op, Token: r.nextToken()}, true
	case "up":
		if _, err := io.CopyN(io.Discard, &pacedReader{r: r, start: arrived}, m.Size); err != nil {
			return protocol.BenchNetMsg{}, false
		}
		r.upBytes, r.upTook = m.Size, time.Since(arrived)
		r.release() // the run's transfers are over
		r.s.SetDeadline(r.turnEnd)
		return protocol.BenchNetMsg{Op: m.Op, Token: r.nextToken()}, true
	case "receipt":
		return r.receipt(), true
	default:
		return protocol.BenchNetMsg{}, false
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
// ten round trips, then size bytes each way (at least protocol.MinBenchTransfer); then it
// asks for the coordinator's receipt of what it measured from its end. It returns the
// challenge, its own figures and the receipt.
func (b *Runner) benchNetwork(ctx context.Context, coord peer.ID, size int64) ([]byte, protocol.NetworkBenchmark, []byte, error) {
	nb := protocol.NetworkBenchmark{Peer: coord.String()}
	if err := b.peer.Reach(ctx, coord); err != nil {
		return nil, nb, nil, err
	}
	s, err := b.peer.OpenStream(ctx, coord, protocol.BenchNetProtocol)
	if err != nil {
		return nil, nb, nil, fmt.Errorf("reach coordinator %s for the benchmarks over %s (a coordinator older than this node does not speak it): %w", coord, protocol.BenchNetProtocol, err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(2 * time.Minute))
	c := &netClient{s: s, in: bufio.NewReader(s)}
	req := protocol.BenchNetMsg{Op: "challenge"}
	req.Certificate, req.Application = b.standing(coord)
	ch, err := c.ask(req)
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
		if _, err := c.ask(protocol.BenchNetMsg{Op: "ping"}); err != nil {
			return nil, nb, nil, fmt.Errorf("ping: %w", err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	nb.RTTMilli = float64(rtts[len(rtts)/2].Microseconds()) / 1000
	size = max(size, protocol.MinBenchTransfer)
	if nb.DownMbps, err = c.download(size); err != nil {
		return nil, nb, nil, fmt.Errorf("download: %w", err)
	}
	if nb.UpMbps, err = c.upload(size, b.simulatedUpload()); err != nil {
		return nil, nb, nil, fmt.Errorf("upload: %w", err)
	}
	receipt, err := c.ask(protocol.BenchNetMsg{Op: "receipt"})
	if err != nil {
		return nil, nb, nil, fmt.Errorf("the coordinator's network receipt: %w", err)
	}
	return ch.Record, nb, receipt.Record, nil
}

// standing is what a run shows the coordinator for its transfer turn: the certificate this
// node holds, and the ID of its application to that coordinator (the coordinator judges
// both: standingOf).
func (b *Runner) standing(coord peer.ID) (cert []byte, application string) {
	cert, _ = b.applicant.OwnCertificate()
	if own, err := b.applicant.GetOwnApplication(); err == nil && own.Coordinator == coord.String() {
		application = own.ID
	}
	return cert, application
}

// refusal is the coordinator's refusal of a request, in its words; one for want of a
// certificate or an application is ErrNotProvider.
type refusal struct{ text, reason string }

func (e refusal) Error() string { return e.text }

func (e refusal) Is(target error) bool { return target == ErrNotProvider && e.reason == "not_provider" }

// netClient is the provider's end of a bench-net stream: it sends each request once the
// answer before it has arrived, with that answer's token.
type netClient struct {
	s     network.Stream
	in    *bufio.Reader
	token string // of the latest answer
}

// send writes a request, echoing the latest answer's token.
func (c *netClient) send(m protocol.BenchNetMsg) error {
	m.Token = c.token
	return protocol.WriteJSONFrame(c.s, m)
}

// read reads an answer and keeps its token; an answer with an error is that error.
func (c *netClient) read() (protocol.BenchNetMsg, error) {
	var r protocol.BenchNetMsg
	if err := protocol.ReadJSONFrame(c.in, protocol.MaxBenchNetAnswer, &r); err != nil {
		return r, err
	}
	if r.Error != "" {
		return r, refusal{r.Error, r.Reason}
	}
	c.token = r.Token
	return r, nil
}

func (c *netClient) ask(m protocol.BenchNetMsg) (protocol.BenchNetMsg, error) {
	if err := c.send(m); err != nil {
		return protocol.BenchNetMsg{}, err
	}
	return c.read()
}

// download asks for size bytes and reads them once the coordinator gives the run its turn,
// and the frame that ends them; it returns the rate it saw.
func (c *netClient) download(size int64) (float64, error) {
	if _, err := c.ask(protocol.BenchNetMsg{Op: "down", Size: size}); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if _, err := io.CopyN(io.Discard, c.in, size); err != nil {
		return 0, err
	}
	mbps := megabits(size, time.Since(t0))
	_, err := c.read()
	return mbps, err
}

// upload sends size bytes, no faster than rate bits a second when rate is set (a slow
// link simulated), and returns the rate it saw once the coordinator acknowledged them.
func (c *netClient) upload(size int64, rate float64) (float64, error) {
	t0 := time.Now()
	if err := c.send(protocol.BenchNetMsg{Op: "up", Size: size}); err != nil {
		return 0, err
	}
	zero := make([]byte, 64<<10)
	for sent := int64(0); sent < size; {
		n, err := c.s.Write(zero[:min(size-sent, int64(len(zero)))])
		if err != nil {
			return 0, err
		}
		sent += int64(n)
		if rate > 0 {
			time.Sleep(time.Until(t0.Add(time.Duration(float64(sent*8) / rate * float64(time.Second)))))
		}
	}
	if _, err := c.read(); err != nil {
		return 0, err
	}
	return megabits(size, time.Since(t0)), nil
}

func megabits(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		d = time.Microsecond
	}
	return float64(int64(float64(bytes)*8/1e6/d.Seconds()*10+0.5)) / 10
}
