package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// The exec sessions of the fake sandbox, and the tests of the job-exec stream's two ends.

// fakeExecs counts the fake sandbox's exec'd processes still held (started, not closed).
var fakeExecs = struct {
	sync.Mutex
	open map[*fakeRuntime]int
}{open: map[*fakeRuntime]int{}}

// Exec runs a fake process in a running job: like sh -c 'echo "$@"; echo on-stderr >&2;
// cat; exit N', N being its last argument when that is a number. A resize prints the new
// size, a signal ends it with 128+N; "missing" is a command not found.
func (f *fakeRuntime) Exec(_ context.Context, id string, e sandbox.ExecSpec) (sandbox.ExecProcess, error) {
	f.mu.Lock()
	j := f.jobs[id]
	f.mu.Unlock()
	if j == nil {
		return nil, sandbox.ErrNotFound
	}
	select {
	case <-j.done:
		return nil, sandbox.ErrJobNotRunning
	default:
	}
	if e.Args[0] == "missing" {
		return nil, fmt.Errorf("missing: %w", sandbox.ErrCommandNotFound)
	}
	code, _ := strconv.Atoi(e.Args[len(e.Args)-1])
	p := &fakeProcess{rt: f, out: e.Stdout, ended: make(chan struct{}), stdinDone: make(chan struct{})}
	fakeExecs.Lock()
	fakeExecs.open[f]++
	fakeExecs.Unlock()
	go func() { // a process's output is copied after Exec returned, as a real sandbox's
		fmt.Fprintf(e.Stdout, "%s\n", strings.Join(e.Args, " "))
		fmt.Fprintf(e.Stderr, "on-stderr\n")
		if e.Stdin != nil {
			io.Copy(e.Stdout, e.Stdin)
		}
		close(p.stdinDone)
	}()
	go func() {
		select {
		case <-p.stdinDone:
			p.end(code)
		case <-p.ended:
		}
	}()
	return p, nil
}

// execsOpen is how many of the fake sandbox's exec'd processes are not closed.
func (f *fakeRuntime) execsOpen() int {
	fakeExecs.Lock()
	defer fakeExecs.Unlock()
	return fakeExecs.open[f]
}

type fakeProcess struct {
	rt        *fakeRuntime
	out       io.Writer
	mu        sync.Mutex
	code      int
	ended     chan struct{}
	stdinDone chan struct{}
	closed    bool
}

func (p *fakeProcess) end(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.ended:
	default:
		p.code = code
		close(p.ended)
	}
}

func (p *fakeProcess) Resize(_ context.Context, cols, rows uint16) error {
	_, err := fmt.Fprintf(p.out, "resized %dx%d\n", cols, rows)
	return err
}

func (p *fakeProcess) Signal(_ context.Context, sig syscall.Signal) error {
	p.end(128 + int(sig))
	return nil
}

func (p *fakeProcess) CloseStdin(context.Context) error { return nil }

func (p *fakeProcess) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.ended:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.code, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (p *fakeProcess) Close() error {
	p.end(137)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		fakeExecs.Lock()
		fakeExecs.open[p.rt]--
		fakeExecs.Unlock()
	}
	return nil
}

// execMarket is a market whose provider allows max shells per job and serves the exec
// stream, with a job of its renter running.
func execMarket(t *testing.T, max int) (*market, api.JobView) {
	t.Helper()
	m := newMarket(t, 1, func(d *Deps) { d.Jobs.MaxExecs = max })
	m.pv.peer.Handle(protocol.JobExecProtocol, m.pv.HandleExec)
	return m, m.run(t, m.request(imageArchive(t, "x")))
}

// execSession is the renter's end of an exec session, as the CLI drives it.
type execSession struct {
	t  *testing.T
	rw io.ReadWriteCloser
	in *bufio.Reader
}

func openExec(t *testing.T, rn *renter, id string, start protocol.ExecStartMsg) (*execSession, error) {
	t.Helper()
	rw, err := rn.OpenExec(context.Background(), id, start)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { rw.Close() })
	return &execSession{t: t, rw: rw, in: bufio.NewReader(rw)}, nil
}

func (s *execSession) send(typ byte, data []byte) {
	s.t.Helper()
	if err := protocol.WriteExecFrame(s.rw, typ, data); err != nil {
		s.t.Fatal(err)
	}
}

// end reads the session to its end and returns its stdout, stderr and exit status.
func (s *execSession) end() (stdout, stderr string, code int) {
	s.t.Helper()
	for {
		f, err := protocol.ReadExecFrame(s.in)
		if err != nil {
			s.t.Fatalf("the session ended without an exit (%v); stdout so far %q", err, stdout)
		}
		switch f.Type {
		case protocol.ExecStdout:
			stdout += string(f.Data)
		case protocol.ExecStderr:
			stderr += string(f.Data)
		case protocol.ExecExit:
			e, err := f.Exit()
			if err != nil {
				s.t.Fatal(err)
			}
			return stdout, stderr, e.Code
		default:
			s.t.Fatalf("frame %q in a session", f.Type)
		}
	}
}

func execsCounted(m *market, outcome string) float64 {
	return testutil.ToFloat64(m.pv.metrics.JobSessions.WithLabelValues("exec", outcome))
}

// TestExecSession: the renter runs a process in its job: its arguments arrive, its
// standard input reaches it and ends when the renter says so, its output and error come
// back apart, and its exit status; with a terminal a resize reaches it, and a signal ends
// it. Each session is counted, and none is left open.
func TestExecSession(t *testing.T) {
	m, v := execMarket(t, 2)
	s, err := openExec(t, m.rn, v.ID, protocol.ExecStartMsg{Args: []string{"cat", "-", "3"}})
	if err != nil {
		t.Fatal(err)
	}
	// The renter types while it reads the output, as the CLI does: the process's output
	// waits for the renter to read it, and the process for its input.
	typed := make(chan error, 1)
	go func() {
		err := protocol.WriteExecFrame(s.rw, protocol.ExecStdin, []byte("typed by the renter\n"))
		if err == nil {
			err = protocol.WriteExecFrame(s.rw, protocol.ExecKeepalive, nil)
		}
		if err == nil {
			err = protocol.WriteExecFrame(s.rw, protocol.ExecCloseStdin, nil)
		}
		typed <- err
	}()
	out, errOut, code := s.end()
	if err := <-typed; err != nil {
		t.Fatal(err)
	}
	if out != "cat - 3\ntyped by the renter\n" || errOut != "on-stderr\n" || code != 3 {
		t.Fatalf("a session: stdout %q, stderr %q, exit %d", out, errOut, code)
	}

	s, err = openExec(t, m.rn, v.ID, protocol.ExecStartMsg{Args: []string{"sh"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	s.send(protocol.ExecResize, protocol.ExecSize(132, 50))
	s.send(protocol.ExecSignal, []byte("INT"))
	out, _, code = s.end()
	if !strings.Contains(out, "resized 132x50\n") || code != 130 {
		t.Fatalf("a terminal's session: %q, exit %d; want the resize, then 130 (SIGINT)", out, code)
	}
	if n := execsCounted(m, "opened"); n != 2 {
		t.Fatalf("%v sessions counted opened, want 2", n)
	}
	eventually(t, "the processes closed", func() bool { return m.pv.rt.execsOpen() == 0 })

	// A command the job's container lacks: as a shell says it.
	s, err = openExec(t, m.rn, v.ID, protocol.ExecStartMsg{Args: []string{"missing"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := s.end(); code != 127 || !strings.Contains(errOut, "command not found") {
		t.Fatalf("a missing command: %q, exit %d; want 127", errOut, code)
	}
}

// TestExecRefusals: a stranger is told of no such job, a renter past the job's shells is
// told to wait (and gets one once a shell closed), past its opens in a minute is slowed
// down, a malformed start is refused, and an ended job takes no shell; each refusal is
// counted by reason.
func TestExecRefusals(t *testing.T) {
	m, v := execMarket(t, 1)
	start := protocol.ExecStartMsg{Args: []string{"sh"}}

	stranger := m.renter(t)
	rj, _ := m.rn.ledger.GetJob(v.ID)
	stranger.ledger.CreateJob(rj)
	if _, err := openExec(t, stranger, v.ID, start); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a stranger's shell: %v", err)
	}
	if execsCounted(m, "not_renter") != 1 || m.pv.rt.execsOpen() != 0 {
		t.Fatal("a stranger's shell was not counted, or ran")
	}

	first, err := openExec(t, m.rn, v.ID, start)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openExec(t, m.rn, v.ID, start); !errors.Is(err, api.ErrRateLimited) || !strings.Contains(err.Error(), "1 exec sessions open") {
		t.Fatalf("a second shell of one allowed: %v", err)
	}
	first.send(protocol.ExecCloseStdin, nil)
	first.end()
	eventually(t, "the first shell's place freed", func() bool {
		s, err := openExec(t, m.rn, v.ID, start)
		if err == nil {
			s.rw.Close()
		}
		return err == nil
	})
	if execsCounted(m, "limit") < 1 {
		t.Fatal("a shell past the limit was not counted")
	}

	// A malformed start, as a hostile peer sends it.
	st, err := m.rn.peer.OpenStream(context.Background(), m.pv.peer.ID, protocol.JobExecProtocol)
	if err != nil {
		t.Fatal(err)
	}
	protocol.WriteExecFrame(st, protocol.ExecStart, []byte(`{"job":"nope","args":["sh"]}`))
	f, err := protocol.ReadExecFrame(bufio.NewReader(st))
	if e, _ := f.Refusal(); err != nil || e.Reason != "other" || execsCounted(m, "other") != 1 {
		t.Fatalf("a malformed start: %+v %v", e, err)
	}
	st.Close()

	for execsCounted(m, "rate_limited") == 0 {
		if execsCounted(m, "opened")+execsCounted(m, "limit") > execOpensPerMinute {
			t.Fatalf("more than %d opens in a minute", execOpensPerMinute)
		}
		if s, err := openExec(t, m.rn, v.ID, start); err == nil {
			s.rw.Close()
		} else if errors.Is(err, api.ErrRateLimited) && strings.Contains(err.Error(), "slow down") {
			break
		}
	}
	m.pv.clk.Advance(time.Minute)
	m.pv.rt.end(v.ID, sandbox.Exit{Code: 0, Reason: sandbox.ReasonExited})
	m.pv.ended(t, v.ID)
	if _, err := openExec(t, m.rn, v.ID, start); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("a shell in an ended job: %v", err)
	}
	if execsCounted(m, "not_running") != 1 {
		t.Fatal("a shell in an ended job was not counted")
	}
	eventually(t, "every process closed", func() bool { return m.pv.rt.execsOpen() == 0 })
}

// TestExecRenterGone: a session whose renter goes quiet past the idle deadline (on the
// node's clock) ends and its process is killed, while frames keep a session alive; so does
// one whose renter resets its stream, or sends what a renter may not.
func TestExecRenterGone(t *testing.T) {
	m, v := execMarket(t, 4)
	clk, idle := m.pv.clk, protocol.ExecIdleTimeout
	timers := clk.Waiters()
	s, err := openExec(t, m.rn, v.ID, protocol.ExecStartMsg{Args: []string{"sh"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	waitTimer(t, clk, timers+1)
	// A frame half way keeps the session past the first deadline (the fake shell prints
	// the resize once it is handled)...
	clk.Advance(idle / 2)
	s.send(protocol.ExecResize, protocol.ExecSize(100, 30))
	readUntil(t, s, "resized 100x30")
	clk.Advance(idle / 2)
	waitTimer(t, clk, timers+1)
	s.send(protocol.ExecResize, protocol.ExecSize(101, 30))
	readUntil(t, s, "resized 101x30")
	if m.pv.rt.execsOpen() != 1 {
		t.Fatal("a session with a frame within the idle deadline ended")
	}
	// ...and silence past it ends it.
	clk.Advance(idle)
	if _, err := io.Copy(io.Discard, s.in); err == nil {
		t.Fatal("an idle session ended cleanly, not reset")
	}
	eventually(t, "the idle session's process killed", func() bool { return m.pv.rt.execsOpen() == 0 })

	start := protocol.ExecStartMsg{Args: []string{"sleep"}}
	gone, err := openExec(t, m.rn, v.ID, start)
	if err != nil {
		t.Fatal(err)
	}
	gone.rw.(interface{ Reset() error }).Reset()
	eventually(t, "a reset session's process killed", func() bool { return m.pv.rt.execsOpen() == 0 })

	rude, err := openExec(t, m.rn, v.ID, start)
	if err != nil {
		t.Fatal(err)
	}
	rude.send(protocol.ExecStdout, []byte("only the provider sends output"))
	if _, err := io.Copy(io.Discard, rude.in); err == nil {
		t.Fatal("a renter sending output got its session closed cleanly, not reset")
	}
	eventually(t, "a rude session's process killed", func() bool { return m.pv.rt.execsOpen() == 0 })
}

// readUntil reads a session's output until it shows want.
func readUntil(t *testing.T, s *execSession, want string) {
	t.Helper()
	var out string
	for !strings.Contains(out, want) {
		f, err := protocol.ReadExecFrame(s.in)
		if err != nil {
			t.Fatalf("the session ended before %q (%v); it showed %q", want, err, out)
		}
		out += string(f.Data)
	}
}
