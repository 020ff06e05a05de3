package benchmarks

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/protocol"
)

// rawRun is a bench-net stream driven by hand, as a stranger's or a careless provider's
// would be.
type rawRun struct {
	t     testing.TB
	s     network.Stream
	in    *bufio.Reader
	token string // of the latest answer
	// What the challenge request shows of the peer's standing.
	cert        []byte
	application string
}

func openRaw(t testing.TB, from *p2p.Peer, coord *testCoordinator) *rawRun {
	t.Helper()
	connect(t, from, coord.peer)
	s, err := from.Host.NewStream(context.Background(), coord.peer.ID, libp2pprotocol.ID(protocol.BenchNetProtocol))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Reset() })
	s.SetDeadline(time.Now().Add(time.Minute))
	return &rawRun{t: t, s: s, in: bufio.NewReader(s)}
}

// openCertified opens a bench-net stream from p showing a certificate of the coordinator.
func openCertified(t testing.TB, from *p2p.Peer, coord *testCoordinator) *rawRun {
	t.Helper()
	r := openRaw(t, from, coord)
	r.cert = recordtest.Certificate(t, coord.peer.Key, from.ID, []protocol.CertifiedGPU{{Model: "H100-80GB", Count: 1}}, testStart)
	return r
}

func (r *rawRun) send(m protocol.BenchNetMsg) {
	r.t.Helper()
	if err := protocol.WriteJSONFrame(r.s, m); err != nil {
		r.t.Fatal(err)
	}
}

// read reads one answer; an error when the stream ended.
func (r *rawRun) read() (protocol.BenchNetMsg, error) {
	var m protocol.BenchNetMsg
	err := protocol.ReadJSONFrame(r.in, protocol.MaxBenchNetAnswer, &m)
	return m, err
}

// ask sends a request and reads its answer, which must come.
func (r *rawRun) ask(m protocol.BenchNetMsg) protocol.BenchNetMsg {
	r.t.Helper()
	r.send(m)
	a, err := r.read()
	if err != nil {
		r.t.Fatalf("%s: no answer: %v", m.Op, err)
	}
	return a
}

// refused asks and wants an error holding why, and the stream's end after it.
func (r *rawRun) refused(m protocol.BenchNetMsg, why string) {
	r.t.Helper()
	if a := r.ask(m); !strings.Contains(a.Error, why) {
		r.t.Fatalf("%s %d: answer %+v, want an error with %q", m.Op, m.Size, a, why)
	}
	if _, err := r.read(); err == nil {
		r.t.Fatalf("the stream goes on after a refused %s", m.Op)
	}
}

// challenge asks for the run's challenge.
func (r *rawRun) challenge() protocol.BenchNetMsg {
	r.t.Helper()
	a := r.ask(protocol.BenchNetMsg{Op: "challenge", Certificate: r.cert, Application: r.application})
	if a.Error != "" || len(a.Record) == 0 || a.Token == "" {
		r.t.Fatalf("challenge: %+v", a)
	}
	r.token = a.Token
	return a
}

// ping sends a ping that echoes the latest answer's token and reads its answer.
func (r *rawRun) ping() {
	r.t.Helper()
	a := r.ask(protocol.BenchNetMsg{Op: "ping", Token: r.token})
	if a.Op != "ping" || a.Error != "" || a.Token == "" || a.Token == r.token {
		r.t.Fatalf("ping: %+v", a)
	}
	r.token = a.Token
}

// down asks for size bytes and reads the frame that gives the turn, the bytes, and the
// frame that ends them.
func (r *rawRun) down(size int64) {
	r.t.Helper()
	if a := r.ask(protocol.BenchNetMsg{Op: "down", Size: size, Token: r.token}); a.Op != "down" || a.Size != size || a.Error != "" {
		r.t.Fatalf("download: %+v", a)
	}
	if _, err := io.CopyN(io.Discard, r.in, size); err != nil {
		r.t.Fatalf("download: %v", err)
	}
	a, err := r.read()
	if err != nil || a.Op != "down" || a.Error != "" || a.Token == "" {
		r.t.Fatalf("the download's end: %+v %v", a, err)
	}
	r.token = a.Token
}

// up sends size bytes and reads the acknowledgement.
func (r *rawRun) up(size int64) {
	r.t.Helper()
	r.send(protocol.BenchNetMsg{Op: "up", Size: size, Token: r.token})
	if _, err := r.s.Write(make([]byte, size)); err != nil {
		r.t.Fatal(err)
	}
	a, err := r.read()
	if err != nil || a.Error != "" || a.Token == "" {
		r.t.Fatalf("upload: %+v %v", a, err)
	}
	r.token = a.Token
}

// TestChallengeNamesTheAsker: a challenge names the stream's remote peer, is signed by the
// coordinator and dated by its clock, and names the coordinator's latest model catalogue,
// which goes with it.
func TestChallengeNamesTheAsker(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newRationedCoordinator(t, clk)
	asker := newTestPeer(t)
	a := openRaw(t, asker, coord).challenge()
	ch, _, err := protocol.CheckChallenge(a.Record, protocol.NewTrust(coord.peer.ID), asker.ID)
	if err != nil || ch.Provider != asker.ID.String() || !ch.IssuedAt.Equal(testStart) || ch.ModelsSeq != 0 || len(a.Models) != 0 {
		t.Fatalf("challenge %+v, %d bytes of models: %v", ch, len(a.Models), err)
	}
	cat := signCatalogue(t, coord.peer.Key, 3, func(protocol.ModelEntry) bool { return true })
	coord.models.add(cat)
	a = openRaw(t, asker, coord).challenge()
	if ch, _, err := protocol.CheckChallenge(a.Record, protocol.NewTrust(coord.peer.ID), asker.ID); err != nil || ch.ModelsSeq != 3 || string(a.Models) != string(cat.Raw) {
		t.Fatalf("challenge with a catalogue: %+v: %v", ch, err)
	}
}

// TestOneRunPerStream: a stream carries one run: a second challenge, a 17th ping, a second
// download or an unknown request end it, with the reason.
func TestOneRunPerStream(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newRationedCoordinator(t, clk)
	p := newTestPeer(t)

	r := openRaw(t, p, coord)
	r.challenge()
	r.refused(protocol.BenchNetMsg{Op: "challenge"}, `at most 1 "challenge"`)

	r = openRaw(t, p, coord)
	r.challenge()
	for i := 0; i < 16; i++ {
		r.ping()
	}
	r.refused(protocol.BenchNetMsg{Op: "ping", Token: r.token}, `at most 16 "ping"`)

	r = openRaw(t, p, coord)
	r.refused(protocol.BenchNetMsg{Op: "shell"}, `at most 0 "shell"`)

	r = openCertified(t, p, coord)
	r.challenge()
	r.down(protocol.MinBenchTransfer)
	r.refused(protocol.BenchNetMsg{Op: "down", Size: protocol.MinBenchTransfer, Token: r.token}, `at most 1 "down"`)
}

// TestTransferTurnRules: the transfer turn goes to a run that asked for its challenge, for
// a transfer that measures the link (4 MiB to 64 MiB); a receipt needs a challenge too.
func TestTransferTurnRules(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newRationedCoordinator(t, clk)
	p := newTestPeer(t)
	openRaw(t, p, coord).refused(protocol.BenchNetMsg{Op: "down", Size: protocol.MinBenchTransfer}, "ask for a challenge first")
	r := openRaw(t, p, coord)
	r.challenge()
	r.refused(protocol.BenchNetMsg{Op: "down", Size: protocol.MinReceiptBytes, Token: r.token}, "transfer refused: a transfer of at least 4 MiB")
	r = openRaw(t, p, coord)
	r.challenge()
	r.refused(protocol.BenchNetMsg{Op: "down", Size: protocol.MaxBenchTransfer + 1, Token: r.token}, "at most 64 MiB each")
	r = openRaw(t, p, coord)
	r.challenge()
	r.refused(protocol.BenchNetMsg{Op: "down", Size: -1, Token: r.token}, "transfer of -1 bytes refused")
	if a := openRaw(t, p, coord).ask(protocol.BenchNetMsg{Op: "receipt"}); !strings.Contains(a.Error, "a receipt is for a run with a challenge") || len(a.Record) != 0 {
		t.Fatalf("a receipt without a challenge: %+v", a)
	}
	if coord.turn.busy() {
		t.Fatal("a refused run holds the transfer turn")
	}
}

// TestTurnsPerHour: one peer gets turnsPerHour turns in any hour, whoever else takes theirs.
func TestTurnsPerHour(t *testing.T) {
	coord := newRationedCoordinator(t, clock.NewFake(testStart))
	p, q := newTestPeer(t).ID, newTestPeer(t).ID
	for i := 0; i < turnsPerHour; i++ {
		if !coord.takeTurn(p, testStart.Add(time.Duration(i)*time.Minute)) {
			t.Fatalf("turn %d refused", i+1)
		}
	}
	if coord.takeTurn(p, testStart.Add(59*time.Minute)) {
		t.Fatal("a turn past the hour's")
	}
	if !coord.takeTurn(q, testStart.Add(59*time.Minute)) {
		t.Fatal("another peer refused for the first's turns")
	}
	if !coord.takeTurn(p, testStart.Add(time.Hour)) {
		t.Fatal("the first turn's hour is over, and still refused")
	}
}

// TestReceiptOfWhatWasMeasured: the receipt is what the coordinator measured on the stream:
// the round trips between its answers and the next pings, the bytes moved each way. A run
// that moved nothing gets a receipt that counts for nothing, and no link is kept.
func TestReceiptOfWhatWasMeasured(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newRationedCoordinator(t, clk)
	p := newTestPeer(t)
	r := openCertified(t, p, coord)
	ch, _, _ := protocol.CheckChallenge(r.challenge().Record, protocol.NewTrust(coord.peer.ID), p.ID)
	for i := 0; i < 10; i++ {
		r.ping()
	}
	r.down(2 * protocol.MinBenchTransfer)
	r.up(protocol.MinBenchTransfer)
	a := r.ask(protocol.BenchNetMsg{Op: "receipt"})
	rc, err := protocol.CheckNetworkReceipt(a.Record, ch, p.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	if rc.RTTSamples != 9 || rc.Bytes != protocol.MinBenchTransfer || rc.UpMbps <= 0 || rc.DownMbps <= 0 || rc.Minimum != lenientMinimum || !rc.MeasuredAt.Equal(testStart) {
		t.Fatalf("receipt: %+v", rc)
	}
	if m, ok := coord.links.of(p.ID); !ok || m.Bytes != protocol.MinBenchTransfer || m.DownMbps != rc.DownMbps {
		t.Fatalf("link kept: %+v %v", m, ok)
	}
	if coord.turn.busy() {
		t.Fatal("the turn is held after the upload")
	}

	idle := newTestPeer(t)
	r = openRaw(t, idle, coord)
	ch, _, _ = protocol.CheckChallenge(r.challenge().Record, protocol.NewTrust(coord.peer.ID), idle.ID)
	rc, err = protocol.CheckNetworkReceipt(r.ask(protocol.BenchNetMsg{Op: "receipt"}).Record, ch, idle.ID.String())
	if err != nil || rc.Bytes != 0 || rc.RTTSamples != 0 {
		t.Fatalf("the receipt of a run that moved nothing: %+v %v", rc, err)
	}
	if why := protocol.HostShortfall(rc, protocol.StorageBenchmark{}, rc.Minimum); !strings.HasPrefix(why, "network not measured by the coordinator") {
		t.Fatalf("it counts: %q", why)
	}
	if _, ok := coord.links.of(idle.ID); ok {
		t.Fatal("a link kept for a run that moved nothing")
	}
}

// TestTransferTurnBounded: runs transfer one at a time; a run that takes the turn and then
// stalls loses its stream and the turn after TransferHold, and the run waiting behind it
// completes.
func TestTransferTurnBounded(t *testing.T) {
	hold := TransferHold
	TransferHold = time.Second
	t.Cleanup(func() { TransferHold = hold })
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	hog := openCertified(t, newTestPeer(t), coord)
	hog.challenge()
	taken := time.Now()                 // before the hog's turn began
	hog.down(protocol.MinBenchTransfer) // and no upload: it keeps the turn
	if !coord.turn.busy() {
		t.Fatal("the run holds no turn")
	}
	prov := newTestProvider(t, clk, coord, h100)
	a := prov.run(t)
	if a.Receipt == nil || a.Receipt.Bytes < protocol.MinReceiptBytes {
		t.Fatalf("the run behind the hog: %+v", a.Receipt)
	}
	if since := time.Since(taken); since < TransferHold {
		t.Fatalf("the run transferred during the hog's turn (%s after it began)", since)
	}
	if _, err := hog.read(); err == nil {
		t.Fatal("the hog's stream outlived its turn")
	}
}

// TestStreamsPerMinute: a peer opening more than benchRunsPerMinute streams a minute has
// the next reset before anything is answered.
func TestStreamsPerMinute(t *testing.T) {
	coord := newRationedCoordinator(t, clock.NewFake(testStart))
	p := newTestPeer(t)
	for i := 0; i < benchRunsPerMinute; i++ {
		openRaw(t, p, coord).challenge()
	}
	r := openRaw(t, p, coord)
	r.send(protocol.BenchNetMsg{Op: "challenge"})
	if a, err := r.read(); err == nil {
		t.Fatalf("stream %d answered: %+v", benchRunsPerMinute+1, a)
	}
}

// TestPingsCannotBePipelined: pings sent at once, each before the answer to the one
// before (round trips timed from answers the provider did not wait for), are refused: only
// the first echoes the token of the answer before it.
func TestPingsCannotBePipelined(t *testing.T) {
	coord := newRationedCoordinator(t, clock.NewFake(testStart))
	r := openRaw(t, newTestPeer(t), coord)
	r.challenge()
	for i := 0; i < 10; i++ {
		r.send(protocol.BenchNetMsg{Op: "ping", Token: r.token})
	}
	answered, refusal := 0, ""
	for i := 0; i < 10 && refusal == ""; i++ {
		a, err := r.read()
		if err != nil {
			break
		}
		if refusal = a.Error; refusal == "" {
			answered++
		}
	}
	if answered != 1 || !strings.Contains(refusal, "token") {
		t.Fatalf("%d pipelined pings answered, then %q", answered, refusal)
	}
}

// TestUploadAfterTheDownload: an upload asked for before the download has arrived (which
// would time the download to the early request, and the upload from bytes sent long
// before) is refused: it cannot echo the token that ends the download.
func TestUploadAfterTheDownload(t *testing.T) {
	coord := newRationedCoordinator(t, clock.NewFake(testStart))
	r := openCertified(t, newTestPeer(t), coord)
	r.challenge()
	for i := 0; i < 10; i++ {
		r.ping()
	}
	size := int64(protocol.MinBenchTransfer)
	r.send(protocol.BenchNetMsg{Op: "down", Size: size, Token: r.token})
	r.send(protocol.BenchNetMsg{Op: "up", Size: size, Token: r.token})
	go r.s.Write(make([]byte, size)) // the upload, at once
	if a, err := r.read(); err != nil || a.Op != "down" || a.Size != size {
		t.Fatalf("the download's turn: %+v %v", a, err)
	}
	if _, err := io.CopyN(io.Discard, r.in, size); err != nil {
		t.Fatal(err)
	}
	for {
		a, err := r.read()
		if err != nil {
			t.Fatalf("the stream ended without a refusal: %v", err)
		}
		if a.Op == "down" && a.Error == "" {
			continue // the download's end
		}
		if a.Op != "up" || !strings.Contains(a.Error, "token") {
			t.Fatalf("an early upload answered: %+v", a)
		}
		return
	}
}

// TestOldProvidersToldToUpgrade: a provider on the first bench-net protocol, whose figures
// could be flattered, is not measured: its first request is answered with what to do.
func TestOldProvidersToldToUpgrade(t *testing.T) {
	coord := newRationedCoordinator(t, clock.NewFake(testStart))
	old := newTestPeer(t)
	connect(t, old, coord.peer)
	s, err := old.Host.NewStream(context.Background(), coord.peer.ID, libp2pprotocol.ID(protocol.BenchNetProtocolV1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &rawRun{t: t, s: s, in: bufio.NewReader(s)}
	if a := r.ask(protocol.BenchNetMsg{Op: "challenge"}); a.Op != "challenge" || len(a.Record) != 0 || !strings.Contains(a.Error, "upgrade gpunex on this provider") || !strings.Contains(a.Error, protocol.BenchNetProtocol) {
		t.Fatalf("an old provider's challenge: %+v", a)
	}
	if _, err := r.read(); err == nil {
		t.Fatal("the old stream goes on")
	}
}

// TestUploadFirstRefused: a run's upload comes after its download (it echoes the
// download's end): an upload first, whose bytes could wait in buffers for the turn, is
// refused.
func TestUploadFirstRefused(t *testing.T) {
	coord := newRationedCoordinator(t, clock.NewFake(testStart))
	r := openRaw(t, newTestPeer(t), coord)
	r.challenge()
	r.ping()
	r.refused(protocol.BenchNetMsg{Op: "up", Size: protocol.MinBenchTransfer, Token: r.token}, "download first")
}

// TestBenchNetTurnsForProvidersOnly (security review 2026-12-05, finding 8): a stranger
// asks for a challenge and a download, then reads nothing, to hold the coordinator's only
// transfer turn; it is refused the turn, and a certified provider's run gets its receipt
// at once.
func TestBenchNetTurnsForProvidersOnly(t *testing.T) {
	hold, wait := TransferHold, transferWait
	TransferHold, transferWait = 5*time.Second, time.Second
	t.Cleanup(func() { TransferHold, transferWait = hold, wait })
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	stranger := openRaw(t, newTestPeer(t), coord)
	stranger.challenge()
	stranger.send(protocol.BenchNetMsg{Op: "down", Size: protocol.MaxBenchTransfer, Token: stranger.token})
	if _, err := stranger.in.Peek(1); err != nil { // the coordinator has answered: a refusal, or the turn
		t.Fatal(err)
	}
	prov := newTestProvider(t, clk, coord, h100)
	a, err := prov.Run(context.Background(), nil)
	if err != nil || a.Receipt == nil || a.Receipt.Bytes < protocol.MinBenchTransfer {
		t.Fatalf("a certified provider's run while a stranger asked for the turn: %v", err)
	}
	if m, err := stranger.read(); err != nil || !strings.Contains(m.Error, "certified providers and applicants only") {
		t.Fatalf("the stranger's answer: %+v %v", m, err)
	}
}

// TestStandingForTheTurn: the transfer turn goes to a run whose challenge request showed a
// certificate that holds (a trusted coordinator's, for the stream's peer, unexpired, not
// revoked) or the ID of the peer's own open application; to no other.
func TestStandingForTheTurn(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	other := newTestCoordinator(t, clk) // a coordinator this one does not trust
	cert := func(key crypto.PrivKey, p *p2p.Peer, at time.Time) []byte {
		return recordtest.Certificate(t, key, p.ID, []protocol.CertifiedGPU{{Model: "H100-80GB", Count: 1}}, at)
	}
	revoked, applying, asking, rejected := newTestPeer(t), newTestPeer(t), newTestPeer(t), newTestPeer(t)
	coord.reviews.revoke(revoked.ID)
	coord.reviews.apply("aaaaaaaaaaaa", applying.ID, protocol.StatusPending)
	coord.reviews.apply("bbbbbbbbbbbb", asking.ID, protocol.StatusInfoRequested)
	coord.reviews.apply("cccccccccccc", rejected.ID, protocol.StatusRejected)
	someone := newTestPeer(t)
	for _, c := range []struct {
		name        string
		p           *p2p.Peer
		cert        func(p *p2p.Peer) []byte
		application string
		turn        bool
	}{
		{"certified", newTestPeer(t), func(p *p2p.Peer) []byte { return cert(coord.peer.Key, p, testStart) }, "", true},
		{"another's certificate", newTestPeer(t), func(*p2p.Peer) []byte { return cert(coord.peer.Key, someone, testStart) }, "", false},
		{"an untrusted coordinator's", newTestPeer(t), func(p *p2p.Peer) []byte { return cert(other.peer.Key, p, testStart) }, "", false},
		{"expired", newTestPeer(t), func(p *p2p.Peer) []byte { return cert(coord.peer.Key, p, testStart.AddDate(0, 0, -31)) }, "", false},
		{"revoked", revoked, func(p *p2p.Peer) []byte { return cert(coord.peer.Key, p, testStart) }, "", false},
		{"not a certificate", newTestPeer(t), func(*p2p.Peer) []byte { return []byte("junk") }, "", false},
		{"pending application", applying, nil, "aaaaaaaaaaaa", true},
		{"application with a question", asking, nil, "bbbbbbbbbbbb", true},
		{"rejected application", rejected, nil, "cccccccccccc", false},
		{"another's application", newTestPeer(t), nil, "aaaaaaaaaaaa", false},
		{"unknown application", newTestPeer(t), nil, "dddddddddddd", false},
		{"nothing shown", newTestPeer(t), nil, "", false},
	} {
		r := openRaw(t, c.p, coord)
		if c.cert != nil {
			r.cert = c.cert(c.p)
		}
		r.application = c.application
		r.challenge()
		a := r.ask(protocol.BenchNetMsg{Op: "down", Size: protocol.MinBenchTransfer, Token: r.token})
		if got := a.Error == ""; got != c.turn || (!c.turn && (a.Reason != "not_provider" || !strings.Contains(a.Error, "apply first (gpunex apply)"))) {
			t.Errorf("%s: the turn's answer %+v", c.name, a)
		}
		r.s.Reset()
		waitUntil(t, "the turn given back", func() bool { return !coord.turn.busy() })
	}
}

// TestCertifiedProvidersFirst: certified providers' runs take the transfer turn before the
// applicants' that were waiting longer, so that a flood of applications does not starve
// the certified providers' renewals.
func TestCertifiedProvidersFirst(t *testing.T) {
	hold := TransferHold
	TransferHold = time.Second
	t.Cleanup(func() { TransferHold = hold })
	clk := clock.NewFake(testStart)
	coord := newTestCoordinator(t, clk)
	applicantRun := func(id string) *rawRun {
		p := newTestPeer(t)
		coord.reviews.apply(id, p.ID, protocol.StatusPending)
		r := openRaw(t, p, coord)
		r.application = id
		r.challenge()
		r.send(protocol.BenchNetMsg{Op: "down", Size: protocol.MinBenchTransfer, Token: r.token})
		return r
	}
	holder := applicantRun("aaaaaaaaaaaa")
	if _, err := holder.in.Peek(1); err != nil { // it holds the turn, and will not upload
		t.Fatal(err)
	}
	// Two applicants wait for the turn; when it comes, each notes whether the certified
	// provider still waits, and gives it back.
	type grant struct {
		id            string
		certifiedWait int
	}
	granted := make(chan grant, 2)
	for _, id := range []string{"bbbbbbbbbbbb", "cccccccccccc"} {
		r := applicantRun(id)
		go func() {
			if a, err := r.read(); err == nil && a.Error == "" {
				granted <- grant{id, coord.turn.waiting(certified)}
			}
			r.s.Reset()
		}()
	}
	waitUntil(t, "two applicants waiting", func() bool { return coord.turn.waiting(applicant) == 2 })
	prov := newTestProvider(t, clk, coord, h100)
	done := make(chan error, 1)
	go func() { _, err := prov.Run(context.Background(), nil); done <- err }()
	waitUntil(t, "the certified provider waiting", func() bool { return coord.turn.waiting(certified) == 1 })
	holder.s.Reset()
	if err := <-done; err != nil {
		t.Fatalf("the certified provider's run: %v", err)
	}
	for _, want := range []string{"bbbbbbbbbbbb", "cccccccccccc"} {
		if g := <-granted; g.id != want || g.certifiedWait != 0 {
			t.Fatalf("applicant %s took the turn with %d certified providers waiting (want %s first)", g.id, g.certifiedWait, want)
		}
	}
}

// TestTurnQueue: the turn is given to one run at a time, the highest standing first and in
// order of arrival within one; a run that waited its time leaves the queue; beyond
// maxWaiting runs of one standing, more are refused at once.
func TestTurnQueue(t *testing.T) {
	var q turnQueue
	if !q.take(applicant, time.Hour) || !q.busy() {
		t.Fatal("a free turn not taken")
	}
	if q.take(certified, time.Millisecond) || q.waiting(certified) != 0 {
		t.Fatal("a held turn taken, or its waiter left behind")
	}
	order := make(chan string, maxWaiting+2)
	wait := func(s standing, name string) {
		go func() {
			if q.take(s, time.Hour) {
				order <- name
			}
		}()
	}
	for i := 0; i < maxWaiting; i++ {
		wait(applicant, fmt.Sprint("applicant ", i))
		waitUntil(t, "the applicant queued", func() bool { return q.waiting(applicant) == i+1 })
	}
	if q.take(applicant, time.Hour) {
		t.Fatal("a run past the queue's bound got the turn")
	}
	wait(certified, "certified")
	waitUntil(t, "the certified provider queued", func() bool { return q.waiting(certified) == 1 })
	for i := -1; i < maxWaiting; i++ {
		q.give()
		want := fmt.Sprint("applicant ", i)
		if i < 0 {
			want = "certified"
		}
		if got := <-order; got != want {
			t.Fatalf("turn %d went to %s, want %s", i+2, got, want)
		}
	}
	q.give()
	if q.busy() {
		t.Fatal("the turn held with nobody waiting")
	}
}

// TestApplicantTurnsPerNetwork: applicants cost a fresh key and an application, so one
// network (an IPv4 address, an IPv6 /64) gets applicantTurnsPerNetwork of their turns an
// hour, whatever its keys; applicants of another network, and certified providers of the
// same one, still get theirs.
func TestApplicantTurnsPerNetwork(t *testing.T) {
	clk := clock.NewFake(testStart)
	coord := newRationedCoordinator(t, clk)
	turn := func(p *p2p.Peer, certify bool) protocol.BenchNetMsg {
		t.Helper()
		r := openRaw(t, p, coord)
		if certify {
			r.cert = recordtest.Certificate(t, coord.peer.Key, p.ID, []protocol.CertifiedGPU{{Model: "H100-80GB", Count: 1}}, testStart)
		} else {
			r.application = fmt.Sprintf("%012x", p.ID[len(p.ID)-6:])
			coord.reviews.apply(r.application, p.ID, protocol.StatusPending)
		}
		r.challenge()
		a := r.ask(protocol.BenchNetMsg{Op: "down", Size: protocol.MinBenchTransfer, Token: r.token})
		r.s.Reset()
		waitUntil(t, "the turn given back", func() bool { return !coord.turn.busy() })
		return a
	}
	for i := 0; i < applicantTurnsPerNetwork; i++ {
		if a := turn(newTestPeerOn(t, "127.0.0.2"), false); a.Error != "" {
			t.Fatalf("applicant %d of the network: %+v", i+1, a)
		}
	}
	if a := turn(newTestPeerOn(t, "127.0.0.2"), false); !strings.Contains(a.Error, "applicants' runs an hour from one network") {
		t.Fatalf("an applicant past its network's turns: %+v", a)
	}
	if a := turn(newTestPeerOn(t, "127.0.0.3"), false); a.Error != "" {
		t.Fatalf("an applicant of another network: %+v", a)
	}
	if a := turn(newTestPeerOn(t, "127.0.0.2"), true); a.Error != "" {
		t.Fatalf("a certified provider of the busy network: %+v", a)
	}
}

// TestStalledTransferLosesTheTurn: a run that holds the transfer turn and stops moving
// bytes (a download it does not read, no upload after its download, an upload that
// trickles) loses its stream and the turn within seconds, not TransferHold.
func TestStalledTransferLosesTheTurn(t *testing.T) {
	stall := transferStall
	transferStall = time.Second
	t.Cleanup(func() { transferStall = stall })
	coord := newTestCoordinator(t, clock.NewFake(testStart))
	for _, c := range []struct {
		name  string
		stall func(r *rawRun)
	}{
		{"a download it does not read", func(r *rawRun) {
			r.send(protocol.BenchNetMsg{Op: "down", Size: protocol.MaxBenchTransfer, Token: r.token})
		}},
		{"a download it stops reading", func(r *rawRun) {
			r.send(protocol.BenchNetMsg{Op: "down", Size: protocol.MaxBenchTransfer, Token: r.token})
			io.CopyN(io.Discard, r.in, 16<<20) // at loopback's speed: time banked at the average's floor
		}},
		{"no upload after the download", func(r *rawRun) { r.down(protocol.MinBenchTransfer) }},
		{"an upload that trickles", func(r *rawRun) {
			r.down(protocol.MinBenchTransfer)
			r.send(protocol.BenchNetMsg{Op: "up", Size: protocol.MinBenchTransfer, Token: r.token})
			r.s.Write(make([]byte, 64<<10))
		}},
	} {
		r := openCertified(t, newTestPeer(t), coord)
		r.challenge()
		start := time.Now()
		c.stall(r)
		waitUntil(t, c.name+": the turn taken", coord.turn.busy)
		waitUntil(t, c.name+": the turn given back", func() bool { return !coord.turn.busy() })
		if held := time.Since(start); held > TransferHold/4 {
			t.Fatalf("%s: the turn held %s", c.name, held)
		}
	}
}
