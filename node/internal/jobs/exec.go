package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// The job-exec stream (/gpunex/job-exec/1.0.0), both ends: a renter runs a process in its
// running job's container (a shell, with a terminal or with plain pipes). The provider
// serves it only to the job's renter while the job runs (sessionJob), at most
// jobs.max_execs at once per job and execOpensPerMinute opens per peer, runs it through
// the sandbox's Exec (the job's user, namespaces, seccomp and limits) and streams its
// output back, not into the job's log; the session ends with the process, or when the
// renter goes quiet for protocol.ExecIdleTimeout (its side sends keepalives). The renter's
// side (OpenExec) opens the stream and hands it, once the process runs, to the local API,
// which relays it to the CLI.

// execOpensPerMinute caps the exec sessions one peer opens in a minute, refused or not.
const execOpensPerMinute = 60

// execPolicy is what bounds the provider's exec sessions besides jobs.max_execs.
type execPolicy struct {
	rate *p2p.PeerRate // opens per peer
	idle time.Duration // protocol.ExecIdleTimeout; shorter in tests
}

func newExecPolicy() execPolicy {
	return execPolicy{rate: p2p.NewPeerRate(execOpensPerMinute), idle: protocol.ExecIdleTimeout}
}

// errExecRate refuses a peer past execOpensPerMinute.
var errExecRate = fmt.Errorf("%w: too many shells opened in a minute: slow down", ErrSessionLimit)

// execWriter writes the frames of one exec stream: the process's output from the runtime's
// copying goroutines, and the session's own frames, one whole frame at a time, each within
// the idle deadline (a renter that stops reading loses its session, not the provider a
// goroutine).
type execWriter struct {
	mu   sync.Mutex
	s    network.Stream
	idle time.Duration
	// started is closed once the started frame is sent (or the session ended): the process
	// may write before its Exec call has returned, and its output follows that frame.
	started     chan struct{}
	startedOnce sync.Once
}

// start lets the process's output go (after the started frame, if sent).
func (w *execWriter) start() { w.startedOnce.Do(func() { close(w.started) }) }

func (w *execWriter) frame(typ byte, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s.SetWriteDeadline(time.Now().Add(w.idle))
	return w.ended(protocol.WriteExecFrame(w.s, typ, data))
}

func (w *execWriter) json(typ byte, v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s.SetWriteDeadline(time.Now().Add(w.idle))
	return w.ended(protocol.WriteExecJSON(w.s, typ, v))
}

// ended resets the stream after a failed write (the renter stopped reading, or is gone):
// the session is over, and its reading ends too.
func (w *execWriter) ended(err error) error {
	if err != nil {
		w.s.Reset()
	}
	return err
}

// output is an io.Writer sending what it is given as frames of one type.
func (w *execWriter) output(typ byte) io.Writer { return execOutput{w, typ} }

type execOutput struct {
	w   *execWriter
	typ byte
}

func (o execOutput) Write(p []byte) (int, error) {
	<-o.w.started
	for n := 0; n < len(p); {
		k := min(len(p)-n, protocol.MaxExecData)
		if err := o.w.frame(o.typ, p[n:n+k]); err != nil {
			return n, err
		}
		n += k
	}
	return len(p), nil
}

// refuseExec counts a refused exec session and tells the renter why; reason is the
// refusal's label, or "" for refuseSession's.
func (r *Runner) refuseExec(w *execWriter, reason string, err error) {
	if reason == "" {
		reason = r.refuseSession("exec", err)
	} else {
		r.metrics.JobSessions.WithLabelValues("exec", reason).Inc()
	}
	w.json(protocol.ExecError, protocol.ExecErrorMsg{Reason: reason, Message: err.Error()})
}

// HandleExec serves a renter's exec session in its running job.
func (r *Runner) HandleExec(s network.Stream) {
	defer s.Close()
	w := &execWriter{s: s, idle: r.exec.idle, started: make(chan struct{})}
	defer w.start()
	s.SetReadDeadline(time.Now().Add(protocol.ExecStartTimeout))
	in := bufio.NewReader(s)
	f, err := protocol.ReadExecFrame(in)
	var start protocol.ExecStartMsg
	if err == nil {
		start, err = f.Start()
	}
	if err != nil {
		r.refuseExec(w, "", err)
		return
	}
	release, reason, err := r.admitExec(s.Conn().RemotePeer(), start.Job)
	if err != nil {
		r.refuseExec(w, reason, err)
		return
	}
	defer release()
	stdin, typed := io.Pipe()
	defer stdin.Close() // a write the process never read returns
	proc, err := r.rt.Exec(context.Background(), start.Job, sandbox.ExecSpec{Args: start.Args, TTY: start.TTY, Cols: start.Cols, Rows: start.Rows,
		Stdin: stdin, Stdout: w.output(protocol.ExecStdout), Stderr: w.output(protocol.ExecStderr)})
	switch {
	case errors.Is(err, sandbox.ErrCommandNotFound):
		// As a shell says it: on standard error, with status 127.
		r.metrics.JobSessions.WithLabelValues("exec", "opened").Inc()
		w.frame(protocol.ExecStarted, nil)
		w.frame(protocol.ExecStderr, []byte(fmt.Sprintf("gpunex: %s\n", err)))
		w.json(protocol.ExecExit, protocol.ExecExitMsg{Code: 127})
	case errors.Is(err, sandbox.ErrJobNotRunning), errors.Is(err, sandbox.ErrNotFound):
		r.refuseExec(w, "", fmt.Errorf("%w (it has ended)", ErrJobNotRunning))
	case err != nil:
		r.log.Warn("a renter's exec failed", "job", start.Job, "err", err)
		r.refuseExec(w, "other", err)
	default:
		defer proc.Close() // kills it if the session ends first
		r.metrics.JobSessions.WithLabelValues("exec", "opened").Inc()
		r.serveExec(s, in, w, proc, typed, start.TTY)
	}
}

// admitExec takes one of a job's shells for remote, when it is the job's renter, the job
// runs, and remote is within its rate; else it says why not (reason "" for refuseSession's).
func (r *Runner) admitExec(remote peer.ID, job string) (release func(), reason string, err error) {
	if !r.exec.rate.Allow(remote, r.clock.Now()) {
		return nil, "rate_limited", errExecRate
	}
	j, err := r.sessionJob(remote, job)
	if err != nil {
		return nil, "", err
	}
	if r.rt == nil {
		return nil, "other", fmt.Errorf("jobs cannot run here: %v", r.rtErr)
	}
	release, err = r.sessions.acquire(j.ID, "exec", r.cfg.MaxExecs)
	return release, "", err
}

// serveExec runs a started process's session: the started frame, then the renter's frames
// to the process until it ends (its exit sent, the stream closed) or the renter goes
// (the stream reset).
func (r *Runner) serveExec(s network.Stream, in *bufio.Reader, w *execWriter, proc sandbox.ExecProcess, typed *io.PipeWriter, tty bool) {
	err := w.frame(protocol.ExecStarted, nil)
	w.start()
	if err != nil {
		return
	}
	exited := make(chan struct{})
	go func() {
		code, err := proc.Wait(context.Background())
		if err != nil {
			w.json(protocol.ExecError, protocol.ExecErrorMsg{Reason: "other", Message: err.Error()})
		} else {
			w.json(protocol.ExecExit, protocol.ExecExitMsg{Code: code})
		}
		close(exited)
		s.Close() // the session's end: the reading below stops
		// A write of input the process never read returns: the reading must not hang on it.
		typed.CloseWithError(io.ErrClosedPipe)
	}()
	// The idle deadline, on the node's clock: the renter's side sends a keepalive every
	// protocol.ExecKeepaliveInterval, so a renter silent for r.exec.idle is gone.
	var last atomic.Int64
	seen := func() { last.Store(r.clock.Now().UnixNano()) }
	seen()
	input := make(chan struct{})
	go func() {
		for {
			select {
			case <-input:
				return
			case <-r.clock.After(r.exec.idle):
			}
			if r.clock.Now().Sub(time.Unix(0, last.Load())) >= r.exec.idle {
				s.Reset()
				typed.CloseWithError(io.ErrClosedPipe) // as above
				return
			}
		}
	}()
	r.execInput(in, proc, typed, tty, seen)
	close(input)
	select {
	case <-exited:
	default:
		s.Reset() // the renter is gone, idle or broke the protocol: proc.Close kills the process
	}
}

// execInput hands the renter's frames to the process until the stream ends: the process's
// end closed it, or the renter went away, idled or sent what it may not. seen is called at
// each frame.
func (r *Runner) execInput(in *bufio.Reader, proc sandbox.ExecProcess, typed *io.PipeWriter, tty bool, seen func()) error {
	ctx := context.Background()
	stdinOpen := true
	for {
		f, err := protocol.ReadExecFrame(in)
		if err != nil {
			return err
		}
		seen()
		switch f.Type {
		case protocol.ExecStdin:
			if !stdinOpen {
				continue // typed after the end of the input: nothing reads it
			}
			if _, err := typed.Write(f.Data); err != nil {
				return err
			}
		case protocol.ExecCloseStdin:
			if stdinOpen {
				stdinOpen = false
				typed.Close()
				proc.CloseStdin(ctx)
			}
		case protocol.ExecResize:
			cols, rows, err := f.Size()
			if err != nil {
				return err
			}
			if tty {
				proc.Resize(ctx, cols, rows)
			}
		case protocol.ExecSignal:
			_, num, err := f.Signal()
			if err != nil {
				return err
			}
			proc.Signal(ctx, syscall.Signal(num))
		case protocol.ExecKeepalive:
		default:
			return fmt.Errorf("%w: exec frame %q from the renter", protocol.ErrMalformed, f.Type)
		}
	}
}

// execStream is a renter's exec stream past the provider's answer.
type execStream struct {
	network.Stream
	in *bufio.Reader
}

func (e *execStream) Read(p []byte) (int, error) { return e.in.Read(p) }

// OpenExec opens an exec session with a job this node rents and returns its stream once
// the provider runs the process (protocol.ExecStarted read): the caller writes the
// renter's frames to it and reads the provider's, and closes it. A refusal is an error of
// the kind of its reason (not found, conflict, rate limited).
func (r *Renter) OpenExec(ctx context.Context, id string, start protocol.ExecStartMsg) (io.ReadWriteCloser, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return nil, err
	}
	if j.Side != "renter" {
		return nil, api.Invalid(errors.New("only the renter opens a shell in a job"))
	}
	p, err := peer.Decode(j.Peer)
	if err != nil {
		return nil, err
	}
	s, err := r.peer.OpenStream(ctx, p, protocol.JobExecProtocol)
	if err != nil {
		return nil, fmt.Errorf("reach provider %s: %w", p, err)
	}
	start.Job = j.ID
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	in := bufio.NewReader(s)
	var f protocol.ExecFrame
	err = protocol.WriteExecJSON(s, protocol.ExecStart, start)
	if err == nil {
		f, err = protocol.ReadExecFrame(in)
	}
	if err == nil && f.Type == protocol.ExecError {
		s.Close()
		m, err := f.Refusal()
		if err != nil {
			return nil, fmt.Errorf("the provider's answer: %w", err)
		}
		return nil, execRefusal(m)
	}
	if err == nil && f.Type != protocol.ExecStarted {
		err = fmt.Errorf("%w: the provider answered %q to a start", protocol.ErrMalformed, f.Type)
	}
	if err != nil {
		s.Reset()
		return nil, fmt.Errorf("exec in job %s: %w", id, err)
	}
	s.SetDeadline(time.Time{})
	return &execStream{Stream: s, in: in}, nil
}

// execRefusal is a provider's refusal as an error of the API's kinds.
func execRefusal(m protocol.ExecErrorMsg) error {
	err := fmt.Errorf("the provider refused the shell: %s", m.Message)
	switch m.Reason {
	case "not_renter":
		return api.Kind(api.ErrNotFound, err)
	case "not_running":
		return api.Conflict(err)
	case "limit", "rate_limited":
		return api.Kind(api.ErrRateLimited, err)
	}
	return err
}
