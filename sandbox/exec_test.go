//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The suite's cases of Runtime.Exec: a process run in a running job is the job's in every
// way that matters to the host (user, capabilities, seccomp, files), its exit status and
// output come back to the caller and not to the job's log, and a terminal works.

// execResult is what an exec'd process wrote and how it ended.
type execResult struct {
	stdout, stderr string
	code           int
}

// lockedBuffer is a buffer the runtime's copying goroutines write while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// execRun runs args in job id to its end, with stdin when not empty.
func (s *suite) execRun(t *testing.T, id, stdin string, args ...string) execResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	var out, errOut lockedBuffer
	e := ExecSpec{Args: args, Stdout: &out, Stderr: &errOut}
	if stdin != "" {
		e.Stdin = strings.NewReader(stdin)
	}
	p, err := s.rt.Exec(ctx, id, e)
	if err != nil {
		t.Fatalf("exec %q: %v", args, err)
	}
	defer p.Close()
	if stdin != "" {
		p.CloseStdin(ctx)
	}
	code, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait for %q: %v", args, err)
	}
	return execResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

// startJob starts a job that runs until killed, once it logged READY.
func (s *suite) startJob(t *testing.T, spec Spec) {
	t.Helper()
	if err := s.rt.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, spec, "READY")
}

// testExecAsTheJob: a process exec'd in a job sees the job's own files (its tmpfs), runs as
// the job's user with the job's capabilities (none), no-new-privileges and seccomp filter,
// cannot reach a host file, gets its stdin, gives back stdout, stderr and its exit status,
// and writes nothing to the job's log. A signal reaches it; once the job ended, an exec is
// refused.
func (s *suite) testExecAsTheJob(t *testing.T) {
	t.Parallel()
	secret := fmt.Sprintf("host-secret-%d", time.Now().UnixNano())
	f, err := os.CreateTemp("", "gpunex-exec-secret-")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(secret)
	f.Close()
	os.Chmod(f.Name(), 0o644)
	t.Cleanup(func() { os.Remove(f.Name()) })
	spec := withProbe(t, s.spec(t, "sh", "-c", "echo job-data > /scratch/mine; echo READY; sleep 60"))
	s.startJob(t, spec)
	defer s.remove(t, s.rt, spec.ID)

	if r := s.execRun(t, spec.ID, "", "cat", "/scratch/mine"); r.stdout != "job-data\n" || r.code != 0 {
		t.Fatalf("the job's own file from an exec: %+v", r)
	}
	if r := s.execRun(t, spec.ID, "", "id", "-u"); r.stdout != "65534\n" {
		t.Fatalf("id -u in an exec: %+v, want the job's uid 65534", r)
	}
	// Everything the kernel says of the exec'd process's privileges is the job's own.
	const fields = `grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' `
	mine := s.execRun(t, spec.ID, "", "sh", "-c", fields+"/proc/self/status").stdout
	job := s.execRun(t, spec.ID, "", "sh", "-c", fields+"/proc/1/status").stdout
	if mine != job || !strings.Contains(mine, "CapEff:\t0000000000000000") || !strings.Contains(mine, "NoNewPrivs:\t1") || !strings.Contains(mine, "Seccomp:\t2") {
		t.Fatalf("an exec'd process has other privileges than the job's:\nexec:\n%s\njob:\n%s", mine, job)
	}
	// ptrace is out of the job's seccomp profile: refused to the exec too (no capability
	// or other rule would refuse attaching to a process of the same user).
	if r := s.execRun(t, spec.ID, "", "/output/probe", "ptrace"); !strings.HasPrefix(r.stdout, "ptrace refused EPERM") {
		t.Fatalf("ptrace from an exec: %+v, want refused EPERM by the job's seccomp profile", r)
	}
	if r := s.execRun(t, spec.ID, "", "/output/probe", "setuid0"); !strings.HasPrefix(r.stdout, "setuid0 refused EPERM") {
		t.Fatalf("setuid(0) from an exec: %+v", r)
	}
	if r := s.execRun(t, spec.ID, "", "cat", f.Name()); strings.Contains(r.stdout, secret) || r.code == 0 {
		t.Fatalf("an exec read a host file: %+v", r)
	}
	if r := s.execRun(t, spec.ID, "piped\ninput\n", "cat"); r.stdout != "piped\ninput\n" || r.code != 0 {
		t.Fatalf("stdin through an exec: %+v", r)
	}
	if r := s.execRun(t, spec.ID, "", "sh", "-c", "echo to-out; echo to-err >&2; exit 7"); r.stdout != "to-out\n" || r.stderr != "to-err\n" || r.code != 7 {
		t.Fatalf("stdout, stderr and exit status of an exec: %+v, want to-out, to-err, 7", r)
	}
	for _, missing := range []string{"no-such-command", "/bin/no-such-command"} {
		if _, err := s.rt.Exec(context.Background(), spec.ID, ExecSpec{Args: []string{missing}}); !errors.Is(err, ErrCommandNotFound) {
			t.Fatalf("a missing command %s: %v, want ErrCommandNotFound", missing, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	var out lockedBuffer
	p, err := s.rt.Exec(ctx, spec.ID, ExecSpec{Args: []string{"sh", "-c", "echo STARTED; exec sleep 60"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "STARTED"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exec'd process never started")
		}
	}
	if err := p.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(ctx); code != 128+int(syscall.SIGTERM) || err != nil {
		t.Fatalf("an exec'd process killed by SIGTERM: %d %v, want 143", code, err)
	}
	p.Close()

	if log := readLog(t, spec); log != "READY\n" {
		t.Fatalf("an exec's output went to the job's log: %q", log)
	}
	// A process left running by the session is killed with it by Close.
	p, err = s.rt.Exec(ctx, spec.ID, ExecSpec{Args: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	p.Close()
	if code, err := p.Wait(ctx); code != 137 || err != nil || time.Since(t0) > 5*time.Second {
		t.Fatalf("Close of a running exec: %d %v after %s, want 137 at once", code, err, time.Since(t0))
	}
	if err := s.rt.Kill(ctx, spec.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.rt.Wait(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.rt.Exec(ctx, spec.ID, ExecSpec{Args: []string{"true"}}); !errors.Is(err, ErrJobNotRunning) {
		t.Fatalf("an exec in an ended job: %v, want ErrJobNotRunning", err)
	}
	if _, err := s.rt.Exec(ctx, "no-such-job", ExecSpec{Args: []string{"true"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an exec in an unknown job: %v, want ErrNotFound", err)
	}
}

// testExecTerminal: a process exec'd with a TTY has a terminal of the size asked, which a
// resize changes; its exit status comes back.
func (s *suite) testExecTerminal(t *testing.T) {
	t.Parallel()
	spec := s.spec(t, "sh", "-c", "echo READY; sleep 60")
	s.startJob(t, spec)
	defer s.remove(t, s.rt, spec.ID)
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	in, typed := io.Pipe()
	var out lockedBuffer
	p, err := s.rt.Exec(ctx, spec.ID, ExecSpec{Args: []string{"sh"}, TTY: true, Cols: 100, Rows: 30, Stdin: in, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defer typed.Close()
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), want); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the terminal never showed %q; it shows:\n%s", want, out.String())
			}
		}
	}
	io.WriteString(typed, "stty size; tty; echo $TERM\n")
	waitFor("30 100")
	waitFor("/dev/pts/")
	waitFor("xterm")
	if err := p.Resize(ctx, 132, 50); err != nil {
		t.Fatal(err)
	}
	io.WriteString(typed, "stty size\n")
	waitFor("50 132")
	io.WriteString(typed, "exit 3\n")
	if code, err := p.Wait(ctx); code != 3 || err != nil {
		t.Fatalf("exit of a terminal's shell: %d %v, want 3", code, err)
	}
	if err := s.rt.Kill(ctx, spec.ID, ""); err != nil {
		t.Fatal(err)
	}
	s.rt.Wait(ctx, spec.ID)
}
