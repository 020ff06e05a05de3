//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SuiteHooks give the suite what it cannot learn through Runtime. A nil hook skips the
// tests that need it.
type SuiteHooks struct {
	// NewInstance returns another Runtime on the same backend and namespace, as a node
	// makes after a restart. The suite closes it.
	NewInstance func(t *testing.T) Runtime
	// Leftovers lists what the backend still holds for a job (id) or, with id "", for
	// any job: containers, tasks, writable snapshots, leases.
	Leftovers func(t *testing.T, id string) []string
	// Pids returns how many processes the job's cgroup holds now and how often a fork
	// was refused at its limit.
	Pids func(id string) (current, refused int64, err error)
}

// RunSuite is the security and behaviour suite every Runtime must pass. image is an
// imported BusyboxImage. Each test asserts what a renter or a provider would notice.
func RunSuite(t *testing.T, rt Runtime, image string, hooks SuiteHooks) {
	s := &suite{rt: rt, image: image, hooks: hooks}
	t.Run("jobs", func(t *testing.T) {
		t.Run("LogsAndExitCode", s.testLogsAndExitCode)
		t.Run("HostFilesInvisible", s.testHostFilesInvisible)
		t.Run("NoNetworkWithoutEgress", s.testNoNetworkWithoutEgress)
		t.Run("EgressOffByDefault", s.testEgressOffByDefault)
		t.Run("OnlyAllocatedGPUs", s.testOnlyAllocatedGPUs)
		t.Run("OOM", s.testOOM)
		t.Run("ForkBomb", s.testForkBomb)
		t.Run("WallClock", s.testWallClock)
		t.Run("KillReason", s.testKillReason)
		t.Run("OutputRootfsIdentity", s.testOutputRootfsIdentity)
		t.Run("ForbiddenCalls", s.testForbiddenCalls)
		t.Run("OutputBounded", s.testOutputBounded)
		t.Run("OutputEntriesBounded", s.testOutputEntriesBounded)
		t.Run("ScratchBounded", s.testScratchBounded)
		t.Run("Invalid", s.testInvalid)
		t.Run("RemoveLeavesNothing", s.testRemoveLeavesNothing)
		t.Run("Restart", s.testRestart)
		t.Run("TimeoutWhileDown", s.testTimeoutWhileDown)
		t.Run("Concurrent", s.testConcurrent)
		t.Run("ExecAsTheJob", s.testExecAsTheJob)
		t.Run("ExecTerminal", s.testExecTerminal)
		t.Run("DialPort", s.testDialPort)
	})
	t.Run("NothingLeft", func(t *testing.T) {
		infos, err := rt.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 0 {
			t.Errorf("jobs left after every job was removed: %+v", infos)
		}
		if hooks.Leftovers != nil {
			if left := hooks.Leftovers(t, ""); len(left) > 0 {
				t.Errorf("the backend still holds: %s", strings.Join(left, ", "))
			}
		}
	})
}

type suite struct {
	rt    Runtime
	image string
	hooks SuiteHooks
	seq   atomic.Int64
}

const (
	mib          = 1 << 20
	suiteTimeout = 60 * time.Second
)

// spec returns a spec with small limits and the job's own output folder and log.
func (s *suite) spec(t *testing.T, args ...string) Spec {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "output")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	name = strings.Trim(name, "-")
	return Spec{
		ID: fmt.Sprintf("%s-%d", name, s.seq.Add(1)), Image: s.image, Args: args,
		MemoryBytes: 64 * mib, CPUMillis: 500, Pids: 64, ScratchBytes: 16 * mib, WallClock: 30 * time.Second,
		OutputDir: out, LogPath: filepath.Join(dir, "log"),
	}
}

// run starts a job, waits for its end and removes it; it returns the exit and the log.
func (s *suite) run(t *testing.T, rt Runtime, spec Spec) (Exit, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	if err := rt.Start(ctx, spec); err != nil {
		t.Fatalf("start %s: %v", spec.ID, err)
	}
	exit, err := rt.Wait(ctx, spec.ID)
	if err != nil {
		t.Fatalf("wait for %s: %v", spec.ID, err)
	}
	s.remove(t, rt, spec.ID)
	return exit, readLog(t, spec)
}

func (s *suite) remove(t *testing.T, rt Runtime, id string) {
	t.Helper()
	if err := rt.Remove(context.Background(), id); err != nil {
		t.Fatalf("remove %s: %v", id, err)
	}
	if s.hooks.Leftovers != nil {
		if left := s.hooks.Leftovers(t, id); len(left) > 0 {
			t.Fatalf("after Remove, the backend still holds %s", strings.Join(left, ", "))
		}
	}
}

func readLog(t *testing.T, spec Spec) string {
	t.Helper()
	b, err := os.ReadFile(spec.LogPath)
	if err != nil {
		t.Fatalf("read the job's log: %v", err)
	}
	return string(b)
}

func wantExit(t *testing.T, e Exit, code int, reason string, log string) {
	t.Helper()
	if e.Code != code || e.Reason != reason {
		t.Fatalf("exit = code %d reason %q, want code %d reason %q; log:\n%s", e.Code, e.Reason, code, reason, log)
	}
	if e.StartedAt.IsZero() || e.EndedAt.Before(e.StartedAt) {
		t.Fatalf("exit times are wrong: started %v, ended %v", e.StartedAt, e.EndedAt)
	}
}

func (s *suite) testLogsAndExitCode(t *testing.T) {
	t.Parallel()
	exit, log := s.run(t, s.rt, s.spec(t, "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"))
	wantExit(t, exit, 3, ReasonExited, log)
	if !strings.Contains(log, "to-stdout") || !strings.Contains(log, "to-stderr") {
		t.Fatalf("stdout and stderr should be in the log; it holds:\n%s", log)
	}
}

func (s *suite) testHostFilesInvisible(t *testing.T) {
	t.Parallel()
	secret := fmt.Sprintf("host-secret-%d", time.Now().UnixNano())
	var paths []string
	for _, dir := range []string{os.TempDir(), "/root"} {
		f, err := os.CreateTemp(dir, "gpunex-secret-")
		if err != nil {
			continue
		}
		f.WriteString(secret)
		f.Close()
		os.Chmod(f.Name(), 0o644) // readable by anyone who can reach it
		t.Cleanup(func() { os.Remove(f.Name()) })
		paths = append(paths, f.Name())
	}
	if len(paths) == 0 {
		t.Fatal("cannot write a secret file on the host")
	}
	spec := s.spec(t, "sh", "-c", `for f in "$@"; do cat "$f" && echo READ-HOST-FILE; done
cat /output/control.txt
echo ROOT: $(ls -a /)
for p in /etc/os-release /usr/bin/containerd /usr/bin/env /home /var /work /etc/shadow; do test -e $p && echo FOUND $p; done
exit 0`, "sh")
	spec.Args = append(spec.Args, paths...)
	// A positive control: a file the job is given must be readable, so that a leaked
	// host file would show in the log.
	if err := os.WriteFile(filepath.Join(spec.OutputDir, "control.txt"), []byte("control-visible"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, log := s.run(t, s.rt, spec)
	if strings.Contains(log, secret) || strings.Contains(log, "READ-HOST-FILE") {
		t.Fatalf("the job read a host file:\n%s", log)
	}
	if !strings.Contains(log, "control-visible") {
		t.Fatalf("the job could not read its own /output (the check above proves nothing):\n%s", log)
	}
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, "ROOT: "); ok {
			allowed := []string{".", "..", "bin", "dev", "etc", "output", "proc", "root", "run", "scratch", "sys", "tmp", "usr"}
			for _, e := range strings.Fields(rest) {
				if !slices.Contains(allowed, e) {
					t.Errorf("the job's / holds %q, which is not in the image", e)
				}
			}
		}
		if strings.HasPrefix(line, "FOUND ") && line != "FOUND /usr/bin/env" {
			t.Errorf("the job sees a host path: %s", line)
		}
	}
}

// listen accepts TCP connections on the host's loopback and records what they send.
func listen(t *testing.T) (port int, got func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port, serve(t, ln)
}

// serve accepts connections on ln and records, for each, "REMOTE-IP what it sent".
func serve(t *testing.T, ln net.Listener) (got func() []string) {
	var mu sync.Mutex
	var msgs []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				b, _ := io.ReadAll(c)
				from := c.RemoteAddr().String()
				if h, _, err := net.SplitHostPort(from); err == nil {
					from = h
				}
				mu.Lock()
				msgs = append(msgs, from+" "+string(b))
				mu.Unlock()
			}()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(msgs)
	}
}

func netScript(port int) string {
	return fmt.Sprintf(`echo hello-from-job | nc -w 2 127.0.0.1 %d && echo CONNECTED
wget -q -T 2 -O - http://127.0.0.1:%d/ >/dev/null 2>&1; echo WGET $?
echo IFACES: $(tail -n +3 /proc/net/dev | cut -d: -f1)`, port, port)
}

func (s *suite) testNoNetworkWithoutEgress(t *testing.T) {
	t.Parallel()
	port, got := listen(t)
	exit, log := s.run(t, s.rt, s.spec(t, "sh", "-c", netScript(port)))
	wantExit(t, exit, 0, ReasonExited, log)
	time.Sleep(100 * time.Millisecond)
	if msgs := got(); len(msgs) > 0 || strings.Contains(log, "CONNECTED") {
		t.Fatalf("the job reached a listener on the host's 127.0.0.1:%d without egress (%q); log:\n%s", port, msgs, log)
	}
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, "IFACES: "); ok && strings.TrimSpace(rest) != "lo" {
			t.Fatalf("without egress the job should have only its loopback, it has %q", rest)
		}
	}
}

// testEgressOffByDefault: a runtime made without an egress policy refuses a job with
// egress, saying why, and leaves nothing behind. (What jobs with egress reach under each
// policy: TestEgress.)
func (s *suite) testEgressOffByDefault(t *testing.T) {
	t.Parallel()
	spec := s.spec(t, "sh", "-c", "echo should-not-run")
	spec.Egress = true
	err := s.rt.Start(context.Background(), spec)
	if !errors.Is(err, ErrEgressOff) {
		t.Fatalf("a job with egress on a runtime that gives none: %v, want ErrEgressOff", err)
	}
	if s.hooks.Leftovers != nil {
		if left := s.hooks.Leftovers(t, spec.ID); len(left) > 0 {
			t.Fatalf("a refused job left %s", strings.Join(left, ", "))
		}
	}
}

func (s *suite) testOnlyAllocatedGPUs(t *testing.T) {
	t.Parallel()
	spec := s.spec(t, "sh", "-c", `echo VISIBLE=$GPUNEX_VISIBLE_GPUS; ls /dev/ | grep -i nvidia && echo HAS-NVIDIA; exit 0`)
	// The host has (simulated) GPUs 0 to 3; this job holds 1 and 3 only, and tries to
	// widen its own list through its environment.
	spec.GPUs = []GPU{{Index: 1, UUID: "GPU-11111111-sim", Simulated: true}, {Index: 3, UUID: "GPU-33333333-sim", Simulated: true}}
	spec.Env = []string{"GPUNEX_VISIBLE_GPUS=GPU-00000000-sim,GPU-11111111-sim,GPU-22222222-sim,GPU-33333333-sim"}
	exit, log := s.run(t, s.rt, spec)
	wantExit(t, exit, 0, ReasonExited, log)
	if !strings.Contains(log, "VISIBLE=GPU-11111111-sim,GPU-33333333-sim\n") {
		t.Fatalf("GPUNEX_VISIBLE_GPUS should list exactly the allocated GPUs; log:\n%s", log)
	}
	if strings.Contains(log, "HAS-NVIDIA") {
		t.Fatalf("a job with simulated GPUs sees NVIDIA devices; log:\n%s", log)
	}
}

func (s *suite) testOOM(t *testing.T) {
	t.Parallel()
	// 8 MiB fits in 32 MiB (the limit is not simply failing everything); 64 MiB does not.
	spec := s.spec(t, "sh", "-c", `dd if=/dev/zero of=/dev/null bs=8M count=1 && echo SMALL-OK; exec dd if=/dev/zero of=/dev/null bs=64M count=1`)
	spec.MemoryBytes = 32 * mib
	exit, log := s.run(t, s.rt, spec)
	if !strings.Contains(log, "SMALL-OK") {
		t.Fatalf("8 MiB should fit in a 32 MiB limit; log:\n%s", log)
	}
	wantExit(t, exit, 137, ReasonOOM, log)
}

func (s *suite) testForkBomb(t *testing.T) {
	t.Parallel()
	spec := s.spec(t, "sh", "-c", `bomb() { bomb | bomb & }; bomb; sleep 30`)
	spec.Pids = 32
	spec.WallClock = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	if err := s.rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var peak, refused int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	if s.hooks.Pids != nil {
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if cur, ref, err := s.hooks.Pids(spec.ID); err == nil {
					peak, refused = max(peak, cur), max(refused, ref)
				}
			}
		}()
	} else {
		close(sampled)
	}
	// The host stays responsive: starting a process on it does not wait for the bomb.
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("the host took %s to start a process during the fork bomb", d)
	}
	exit, err := s.rt.Wait(ctx, spec.ID)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	s.remove(t, s.rt, spec.ID)
	if exit.Reason != ReasonTimeout {
		t.Fatalf("the fork bomb should run until its wall clock: %+v", exit)
	}
	if s.hooks.Pids != nil {
		t.Logf("fork bomb: at most %d processes, %d forks refused", peak, refused)
		if peak > spec.Pids {
			t.Fatalf("the job held %d processes, over its limit of %d", peak, spec.Pids)
		}
		if refused == 0 {
			t.Fatalf("no fork was refused: the bomb did not reach the limit, so this test proves nothing")
		}
	}
}

func (s *suite) testWallClock(t *testing.T) {
	t.Parallel()
	spec := s.spec(t, "sleep", "30")
	spec.WallClock = time.Second
	t0 := time.Now()
	exit, log := s.run(t, s.rt, spec)
	wantExit(t, exit, 137, ReasonTimeout, log)
	if d := time.Since(t0); d < time.Second || d > 10*time.Second {
		t.Fatalf("a 1 s wall clock ended the job after %s", d)
	}
}

func (s *suite) testKillReason(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	// The job ends at once on SIGTERM: the grace period is not always waited out.
	spec := s.spec(t, "sh", "-c", `trap 'echo GOT-TERM; exit 143' TERM; echo READY; while :; do sleep 1; done`)
	if err := s.rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, spec, "READY")
	t0 := time.Now()
	if err := s.rt.Kill(ctx, spec.ID, "cancelled by the renter"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	exit, err := s.rt.Wait(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Reason != "cancelled by the renter" {
		t.Fatalf("exit reason %q, want Kill's reason", exit.Reason)
	}
	// Killing an ended job does nothing, and its reason stays.
	if err := s.rt.Kill(ctx, spec.ID, "another reason"); err != nil {
		t.Fatal(err)
	}
	if again, err := s.rt.Wait(ctx, spec.ID); err != nil || again != exit {
		t.Fatalf("a second Wait gave %+v, %v; the first %+v", again, err, exit)
	}
	s.remove(t, s.rt, spec.ID)
	log := readLog(t, spec)
	if !strings.Contains(log, "GOT-TERM") {
		t.Errorf("the job was not sent SIGTERM first; log:\n%s", log)
	}
	if took > 1500*time.Millisecond {
		t.Errorf("Kill took %s for a job that ends on SIGTERM", took)
	}
	// Empty reason: cancelled.
	spec = s.spec(t, "sleep", "30")
	if err := s.rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := s.rt.Kill(ctx, spec.ID, ""); err != nil {
		t.Fatal(err)
	}
	exit, err = s.rt.Wait(ctx, spec.ID)
	if err != nil || exit.Reason != ReasonCancelled || exit.Code != 137 {
		t.Fatalf("Kill without a reason: %+v, %v; want reason %q and code 137 (SIGKILL after the grace)", exit, err, ReasonCancelled)
	}
	s.remove(t, s.rt, spec.ID)
}

func waitLog(t *testing.T, spec Spec, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(spec.LogPath)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not log %q in 10 s; log:\n%s", want, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *suite) testOutputRootfsIdentity(t *testing.T) {
	t.Parallel()
	spec := s.spec(t, "sh", "-c", `echo result-data > /output/result.txt && echo OUTPUT-OK
touch /rootfs-file && echo ROOTFS-WRITABLE
touch /bin/x && echo BIN-WRITABLE
echo s > /scratch/s && echo SCRATCH-OK
echo t > /tmp/t && echo TMP-OK
echo UID=$(id -u) GID=$(id -g) GROUPS=$(id -G)
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status
echo SCRATCHKB=$(df -k /scratch | tail -1 | awk '{print $2}')
chown 0 /output/result.txt && echo CHOWN-OK
mount -t tmpfs none /mnt 2>/dev/null && echo MOUNT-OK
exit 0`)
	spec.ScratchBytes = 8 * mib
	exit, log := s.run(t, s.rt, spec)
	wantExit(t, exit, 0, ReasonExited, log)
	b, err := os.ReadFile(filepath.Join(spec.OutputDir, "result.txt"))
	if err != nil || string(b) != "result-data\n" {
		t.Fatalf("the job's /output/result.txt should be on the host: %q, %v; log:\n%s", b, err, log)
	}
	for _, want := range []string{"OUTPUT-OK", "SCRATCH-OK", "TMP-OK", "UID=65534 GID=65534 GROUPS=65534\n",
		"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2",
		fmt.Sprintf("SCRATCHKB=%d\n", spec.ScratchBytes/1024)} {
		if !strings.Contains(log, want) {
			t.Errorf("the log should hold %q:\n%s", want, log)
		}
	}
	for _, bad := range []string{"ROOTFS-WRITABLE", "BIN-WRITABLE", "CHOWN-OK", "MOUNT-OK"} {
		if strings.Contains(log, bad) {
			t.Errorf("the job could do what it must not: %s; log:\n%s", bad, log)
		}
	}
}

// testForbiddenCalls: what a job tries with the kernel to get out is refused, each with
// its reason (the probe prints the errno): mounting, tracing, BPF, the kernel keyring, new
// namespaces, device nodes, kernel settings.
func (s *suite) testForbiddenCalls(t *testing.T) {
	t.Parallel()
	calls := map[string]string{
		"mount": "EPERM", "ptrace": "EPERM", "bpf": "EPERM", "keyctl": "EPERM", "unshare": "EPERM", "mknod": "EPERM",
		"sysctl": "EROFS", "setuid0": "EPERM",
	}
	var script strings.Builder
	for what := range calls {
		fmt.Fprintf(&script, "echo \"%s => $(/output/probe %s)\"\n", what, what)
	}
	exit, log := s.run(t, s.rt, withProbe(t, s.spec(t, "sh", "-c", script.String())))
	wantExit(t, exit, 0, ReasonExited, log)
	v := probeLines(log)
	for what, errno := range calls {
		if !strings.HasPrefix(v[what], "refused "+errno) {
			t.Errorf("%s: %q, want refused %s; log:\n%s", what, v[what], errno, log)
		}
	}
}

func (s *suite) testInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	good := s.spec(t, "true")
	for name, mutate := range map[string]func(*Spec){
		"bad ID":         func(sp *Spec) { sp.ID = "Bad_ID" },
		"long ID":        func(sp *Spec) { sp.ID = strings.Repeat("a", 65) },
		"no memory":      func(sp *Spec) { sp.MemoryBytes = 0 },
		"no CPU":         func(sp *Spec) { sp.CPUMillis = 0 },
		"no pids":        func(sp *Spec) { sp.Pids = 0 },
		"no scratch":     func(sp *Spec) { sp.ScratchBytes = 0 },
		"no wall clock":  func(sp *Spec) { sp.WallClock = 0 },
		"relative paths": func(sp *Spec) { sp.OutputDir, sp.LogPath = "out", "log" },
		"bad env":        func(sp *Spec) { sp.Env = []string{"NOVALUE"} },
	} {
		sp := good
		mutate(&sp)
		if err := s.rt.Start(ctx, sp); err == nil {
			s.rt.Remove(ctx, sp.ID)
			t.Errorf("%s: Start accepted %+v", name, sp)
		}
	}
	sp := good
	sp.Image = "gpunex.test/absent:1"
	if err := s.rt.Start(ctx, sp); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("a missing image: %v, want ErrImageNotFound", err)
	}
	if _, err := s.rt.Wait(ctx, "no-such-job"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Wait on an unknown job: %v, want ErrNotFound", err)
	}
	if err := s.rt.Kill(ctx, "no-such-job", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Kill on an unknown job: %v, want ErrNotFound", err)
	}
	if err := s.rt.Remove(ctx, "no-such-job"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove on an unknown job: %v, want ErrNotFound", err)
	}
	// Two jobs with one ID: the second is refused and the first is untouched.
	if err := s.rt.Start(ctx, good); err != nil {
		t.Fatal(err)
	}
	if err := s.rt.Start(ctx, good); err == nil {
		t.Error("a second job with the same ID was started")
	}
	if exit, err := s.rt.Wait(ctx, good.ID); err != nil || exit.Code != 0 {
		t.Errorf("the first job: %+v, %v", exit, err)
	}
	s.remove(t, s.rt, good.ID)
}

func (s *suite) testRemoveLeavesNothing(t *testing.T) {
	t.Parallel()
	if s.hooks.Leftovers == nil {
		t.Skip("no Leftovers hook")
	}
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	// A running job, removed without Kill or Wait.
	spec := s.spec(t, "sleep", "30")
	if err := s.rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if left := s.hooks.Leftovers(t, spec.ID); len(left) == 0 {
		t.Fatal("Leftovers sees nothing of a running job: this test would prove nothing")
	}
	s.remove(t, s.rt, spec.ID)
	if _, err := s.rt.Wait(ctx, spec.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Wait after Remove: %v, want ErrNotFound", err)
	}
	infos, err := s.rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(infos, func(in Info) bool { return in.ID == spec.ID }) {
		t.Fatal("List still shows a removed job")
	}
}

func (s *suite) testRestart(t *testing.T) {
	t.Parallel()
	if s.hooks.NewInstance == nil {
		t.Skip("no NewInstance hook")
	}
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	before := s.hooks.NewInstance(t)
	// 3 s: long enough to outlive the restart on a loaded machine (with 1 s, a restart that
	// took longer found it ended, in a CI rehearsal at a load of 12 on 2 cores).
	running := s.spec(t, "sh", "-c", "echo STARTED; sleep 3; echo ENDED; exit 4")
	ended := s.spec(t, "sh", "-c", "exit 5")
	for _, sp := range []Spec{running, ended} {
		if err := before.Start(ctx, sp); err != nil {
			t.Fatal(err)
		}
	}
	waitLog(t, running, "STARTED")
	before.Close() // the node stops; its jobs do not
	time.Sleep(300 * time.Millisecond)

	after := s.hooks.NewInstance(t)
	infos, err := after.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]Info{}
	for _, in := range infos {
		found[in.ID] = in
	}
	if in, ok := found[running.ID]; !ok || !in.Running {
		t.Fatalf("after a restart List should show %s running: %+v", running.ID, infos)
	}
	if in, ok := found[ended.ID]; !ok || in.Running || in.Exit == nil || in.Exit.Code != 5 {
		t.Fatalf("after a restart List should show %s ended with code 5: %+v", ended.ID, in)
	}
	exit, err := after.Wait(ctx, running.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, exit, 4, ReasonExited, readLog(t, running))
	if exit, err := after.Wait(ctx, ended.ID); err != nil || exit.Code != 5 || exit.Reason != ReasonExited {
		t.Fatalf("the job that ended while the node was down: %+v, %v", exit, err)
	}
	if !strings.Contains(readLog(t, running), "ENDED") {
		t.Fatal("the job's log lost what it wrote while the node was down")
	}
	s.remove(t, after, running.ID)
	s.remove(t, after, ended.ID)
}

func (s *suite) testTimeoutWhileDown(t *testing.T) {
	t.Parallel()
	if s.hooks.NewInstance == nil {
		t.Skip("no NewInstance hook")
	}
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	before := s.hooks.NewInstance(t)
	spec := s.spec(t, "sleep", "60")
	spec.WallClock = 500 * time.Millisecond
	if err := before.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	before.Close() // nobody enforces the wall clock now
	time.Sleep(time.Second)
	after := s.hooks.NewInstance(t)
	exit, err := after.Wait(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Reason != ReasonTimeout {
		t.Fatalf("a job whose wall clock passed while the node was down: %+v, want reason %q", exit, ReasonTimeout)
	}
	s.remove(t, after, spec.ID)
}

func (s *suite) testConcurrent(t *testing.T) {
	t.Parallel()
	const n = 20
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	specs := make([]Spec, n)
	for i := range specs {
		specs[i] = s.spec(t, "sh", "-c", fmt.Sprintf("echo job-%d; exit %d", i, i%3))
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, sp := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.rt.Start(ctx, sp); err != nil {
				errs[i] = err
				return
			}
			exit, err := s.rt.Wait(ctx, sp.ID)
			if err == nil && (exit.Code != i%3 || exit.Reason != ReasonExited) {
				err = fmt.Errorf("exit %+v, want code %d", exit, i%3)
			}
			if rerr := s.rt.Remove(ctx, sp.ID); err == nil {
				err = rerr
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	t.Logf("%d concurrent jobs started, ended and were removed in %s", n, time.Since(t0))
	for i, err := range errs {
		if err != nil {
			t.Errorf("job %d: %v", i, err)
			continue
		}
		if log := readLog(t, specs[i]); log != fmt.Sprintf("job-%d\n", i) {
			t.Errorf("job %d logged %q", i, log)
		}
	}
}

// testScratchBounded: filling /scratch or /tmp stops at their size (the tmpfs is full, and
// the file size limit is the same: the writer gets SIGXFSZ), and the job goes on.
func (s *suite) testScratchBounded(t *testing.T) {
	t.Parallel()
	spec := s.spec(t, "sh", "-c", `for d in /scratch /tmp; do dd if=/dev/zero of=$d/fill bs=1M count=64 2>/dev/null; echo "$d holds $(du -k $d/fill | cut -f1) KiB"; rm $d/fill; done; echo STILL-RUNNING`)
	spec.ScratchBytes, spec.MemoryBytes = 8*mib, 64*mib
	exit, log := s.run(t, s.rt, spec)
	wantExit(t, exit, 0, ReasonExited, log)
	for _, want := range []string{"/scratch holds 8192 KiB", "/tmp holds 8192 KiB", "STILL-RUNNING"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log should hold %q:\n%s", want, log)
		}
	}
}

func (s *suite) testOutputBounded(t *testing.T) {
	t.Parallel()
	// One file larger than the limit, then many small files adding up past it.
	spec := s.spec(t, "sh", "-c", `dd if=/dev/zero of=/output/big bs=1M count=8 2>/dev/null; echo BIG-EXIT $?
i=0; while :; do dd if=/dev/zero of=/output/f$i bs=1M count=1 2>/dev/null; i=$((i+1)); sleep 0.05; done`)
	spec.ScratchBytes = 4 * mib
	exit, log := s.run(t, s.rt, spec)
	if exit.Reason != ReasonOutputLimit {
		t.Fatalf("a job filling /output past ScratchBytes: %+v, want reason %q; log:\n%s", exit, ReasonOutputLimit, log)
	}
	st, err := os.Stat(filepath.Join(spec.OutputDir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > spec.ScratchBytes {
		t.Errorf("one file in /output grew to %d bytes, over ScratchBytes %d", st.Size(), spec.ScratchBytes)
	}
	var total int64
	filepath.WalkDir(spec.OutputDir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	t.Logf("/output held %d MiB when the job was killed (limit %d MiB)", total/mib, spec.ScratchBytes/mib)
	if total > 64*mib {
		t.Errorf("/output reached %d bytes before the job was stopped", total)
	}
}

// testOutputEntriesBounded: empty files and folders take inodes, not blocks. A job making
// 100,000 of them under a 4 MiB /output is stopped for its output, well before it is done,
// so that a job cannot use up the inodes of the provider's file system.
func (s *suite) testOutputEntriesBounded(t *testing.T) {
	t.Parallel()
	spec := s.spec(t, "sh", "-c", `cd /output && for d in $(seq 1 100); do mkdir $d && (cd $d && seq 1 1000 | xargs touch); done; echo ALL-MADE`)
	spec.ScratchBytes = 4 * mib
	exit, log := s.run(t, s.rt, spec)
	entries := 0
	filepath.WalkDir(spec.OutputDir, func(string, os.DirEntry, error) error { entries++; return nil })
	if exit.Reason != ReasonOutputLimit || strings.Contains(log, "ALL-MADE") {
		t.Fatalf("a job making 100,000 empty files in a 4 MiB /output: %+v with %d entries, want reason %q; log:\n%s", exit, entries, ReasonOutputLimit, log)
	}
	t.Logf("/output held %d entries when the job was killed (limit %d MiB)", entries, spec.ScratchBytes/mib)
}

// testDialPort: a job without egress serves HTTP on a port (busybox httpd, on every address
// of its namespace); Dial reaches it from inside the job's namespace, a port it does not
// listen on is ErrPortClosed, and an ended job is ErrNotFound.
func (s *suite) testDialPort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	spec := s.spec(t, "sh", "-c", "mkdir /tmp/www && echo served-from-the-job > /tmp/www/index.html && echo READY && exec httpd -f -p 8000 -h /tmp/www")
	if err := s.rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, spec, "READY")
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// httpd listens a moment after the job said READY.
		if conn, err = s.rt.Dial(ctx, spec.ID, 8000); err == nil || !errors.Is(err, ErrPortClosed) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("dial the job's port 8000: %v", err)
	}
	fmt.Fprintf(conn, "GET /index.html HTTP/1.0\r\nHost: job\r\n\r\n")
	page, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.Contains(string(page), "200 OK") || !strings.Contains(string(page), "served-from-the-job") {
		t.Fatalf("the job's page through Dial: %q", page)
	}
	if _, err := s.rt.Dial(ctx, spec.ID, 8001); !errors.Is(err, ErrPortClosed) {
		t.Fatalf("a port the job does not listen on: %v, want ErrPortClosed", err)
	}
	if _, err := s.rt.Dial(ctx, "no-such-job", 8000); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a job the runtime does not hold: %v, want ErrNotFound", err)
	}
	if err := s.rt.Kill(ctx, spec.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.rt.Wait(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if c, err := s.rt.Dial(ctx, spec.ID, 8000); err == nil {
		c.Close()
		t.Fatal("an ended job's port was reached")
	}
	s.remove(t, s.rt, spec.ID)
	if _, err := s.rt.Dial(ctx, spec.ID, 8000); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a removed job: %v, want ErrNotFound", err)
	}
}
