package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A process run in a running job's container, beside the job's own (a renter's shell):
// containerd's exec, that is runc exec, which enters the job's namespaces (user, PID,
// mount, network, IPC, UTS) and its cgroup, and applies the container's seccomp profile
// (runc's setns init installs the container's filter, not one of the process's: the OCI
// process has none). Its process spec is the job's own with another command: the same
// user without groups, no capabilities, no new privileges, rlimits, environment and working
// directory. What it uses counts against the job's memory, CPU and pids limits. Its output
// goes to the caller, not to the job's log.

// ExecSpec is a process to run in a running job (Runtime.Exec).
type ExecSpec struct {
	Args []string // command and arguments (required)
	// TTY gives the process a terminal of Cols x Rows (80 x 24 when zero); its output, and
	// what it writes to its standard error, then comes on Stdout.
	TTY        bool
	Cols, Rows uint16
	// Stdin is read until it ends (nil: the process's standard input is empty); Stdout and
	// Stderr receive its output (nil: discarded).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// ExecProcess is a process Exec started.
type ExecProcess interface {
	// Resize changes the size of its terminal (with TTY).
	Resize(ctx context.Context, cols, rows uint16) error
	// Signal sends it a signal (by its Linux number).
	Signal(ctx context.Context, sig syscall.Signal) error
	// CloseStdin lets its standard input end: it reads what Stdin gives until Stdin
	// returns io.EOF, then end of file (without CloseStdin it would wait for more, the
	// runtime holding its input open). It may be called before Stdin has ended.
	CloseStdin(ctx context.Context) error
	// Wait blocks until it has ended and its output has been written, and returns its exit
	// status (128+N when signal N killed it).
	Wait(ctx context.Context) (int, error)
	// Close kills it if it still runs and frees what the runtime holds for it. Call it
	// once done, also after Wait.
	Close() error
}

// ErrJobNotRunning is returned by Exec for a job whose process has ended (or not started).
var ErrJobNotRunning = errors.New("the job is not running")

// ErrCommandNotFound is returned by Exec when the job's container has no such command (a
// shell would exit with status 127).
var ErrCommandNotFound = errors.New("command not found in the job's container")

// execDrain is how long an ended process's output may take to reach the caller: a child it
// left running in the background may hold its output open, which must not hold the exit.
const execDrain = 2 * time.Second

// execTerm is the terminal type a TTY process gets where the job's environment sets none.
const execTerm = "TERM=xterm"

// Exec runs a process in a running job's container, as the job's user and within its
// limits (see above).
func (c *Containerd) Exec(ctx context.Context, id string, e ExecSpec) (ExecProcess, error) {
	if len(e.Args) == 0 || e.Args[0] == "" {
		return nil, errors.New("exec: no command")
	}
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return nil, err
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotRunning)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	if st, err := task.Status(ctx); err != nil || st.Status != client.Running {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotRunning)
	}
	spec, err := ctr.Spec(ctx)
	if err != nil || spec.Process == nil {
		return nil, fmt.Errorf("job %s: read its spec: %v", id, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	execID := "exec-" + hex.EncodeToString(rnd[:])
	streams := []cio.Opt{cio.WithStreams(e.Stdin, orDiscard(e.Stdout), orDiscard(e.Stderr))}
	if e.TTY {
		streams = append(streams, cio.WithTerminal)
	}
	proc, err := task.Exec(ctx, execID, execProcessSpec(spec.Process, e), cio.NewCreator(streams...))
	if err != nil {
		return nil, fmt.Errorf("job %s: exec: %w", id, err)
	}
	// The process outlives the call: its wait runs under the runtime's context (Close of
	// the runtime ends it), not the caller's.
	pctx, cancel := context.WithCancel(c.ns(context.WithoutCancel(ctx)))
	exitC, err := proc.Wait(pctx) // before Start: an exit at once is not missed
	if err == nil {
		err = proc.Start(ctx)
	}
	if err != nil {
		cancel()
		proc.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		if st, serr := task.Status(ctx); serr != nil || st.Status != client.Running {
			return nil, fmt.Errorf("job %s: %w", id, ErrJobNotRunning)
		}
		if msg := err.Error(); strings.Contains(msg, "executable file not found") || strings.Contains(msg, "no such file or directory") {
			return nil, fmt.Errorf("%s: %w", e.Args[0], ErrCommandNotFound)
		}
		return nil, fmt.Errorf("job %s: start %s: %w", id, e.Args[0], err)
	}
	p := &execProcess{proc: proc, ns: c.opts.Namespace, ctx: pctx, cancel: cancel, done: make(chan struct{})}
	go p.reap(exitC)
	return p, nil
}

// execProcessSpec is the job's process spec with the command of e (and its terminal): the
// same user, capabilities, no-new-privileges, rlimits, environment, working directory and
// security labels, never more.
func execProcessSpec(job *specs.Process, e ExecSpec) *specs.Process {
	p := *job
	p.Args = slices.Clone(e.Args)
	p.CommandLine = ""
	p.Env = slices.Clone(job.Env)
	p.NoNewPrivileges = true
	p.Terminal = e.TTY
	p.ConsoleSize = nil
	if e.TTY {
		cols, rows := e.Cols, e.Rows
		if cols == 0 || rows == 0 {
			cols, rows = 80, 24
		}
		p.ConsoleSize = &specs.Box{Width: uint(cols), Height: uint(rows)}
		if !slices.ContainsFunc(p.Env, func(v string) bool { return strings.HasPrefix(v, "TERM=") }) {
			p.Env = append(p.Env, execTerm)
		}
	}
	return &p
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// execProcess is a process Containerd.Exec started.
type execProcess struct {
	proc   client.Process
	ns     string          // the runtime's containerd namespace
	ctx    context.Context // in it; cancelled by Close
	cancel context.CancelFunc
	done   chan struct{} // closed once it ended, its output written and its state deleted
	code   int
	err    error
	once   sync.Once
}

// reap waits for the process's end, for its output (within execDrain), and deletes it.
func (p *execProcess) reap(exitC <-chan client.ExitStatus) {
	defer close(p.done)
	st := <-exitC
	code, _, err := st.Result()
	p.code, p.err = int(code), err
	if err != nil {
		p.err = fmt.Errorf("wait for the exec'd process: %w", err)
	}
	drained := make(chan struct{})
	go func() { p.proc.IO().Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(execDrain):
		p.proc.IO().Cancel()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 10*time.Second)
	defer cancel()
	p.proc.Delete(ctx)
}

func (p *execProcess) Resize(ctx context.Context, cols, rows uint16) error {
	return p.proc.Resize(p.nsOf(ctx), uint32(cols), uint32(rows))
}

func (p *execProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.proc.Kill(p.nsOf(ctx), sig)
}

func (p *execProcess) CloseStdin(ctx context.Context) error {
	return p.proc.CloseIO(p.nsOf(ctx), client.WithStdinCloser)
}

func (p *execProcess) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.code, p.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Close kills the process if it runs and waits (10 s at most) for it to be reaped.
func (p *execProcess) Close() error {
	p.once.Do(func() {
		select {
		case <-p.done:
		default:
			ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
			defer cancel()
			p.proc.Kill(ctx, syscall.SIGKILL) // it may have ended meanwhile
			select {
			case <-p.done:
			case <-ctx.Done():
			}
		}
		p.cancel()
	})
	return nil
}

// nsOf puts the runtime's namespace on a caller's context.
func (p *execProcess) nsOf(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, p.ns)
}
