package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
)

// ContainerdBinary is the daemon StartContainerd runs.
const ContainerdBinary = "/usr/bin/containerd"

// Daemon is a private containerd started by StartContainerd: its root, state, sockets and
// plugin folders all live in the folder it was given, so it neither sees nor disturbs a
// system containerd. Tests and the devnet use it; a production node talks to the system
// daemon instead (jobs.containerd_address).
type Daemon struct {
	dir string // root of everything the daemon writes
	// sockDir holds the sockets and the state (the jobs' bundles): dir, or a folder in /tmp
	// when dir is too long for a socket path or not traversable by the jobs' mapped users.
	sockDir string
	ownSock bool // sockDir was created for us and is removed by Stop
	address string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed when the daemon process has ended
	waitErr error

	stopOnce sync.Once
	stopErr  error
}

// maxSocketPath is the longest unix socket path we use (the kernel's limit is 108 bytes
// including the terminating NUL, and containerd derives longer names from the address).
const maxSocketPath = 90

// StartContainerd starts a private containerd whose root, state, gRPC and ttrpc sockets and
// plugin folders are inside dir, and returns once it answers on its socket. Stop it with
// Stop, which also ends the shims of tasks still running. It needs root, containerd and
// runc: on Debian, apt-get install containerd runc.
func StartContainerd(ctx context.Context, dir string) (*Daemon, error) {
	if _, err := os.Stat(ContainerdBinary); err != nil {
		return nil, fmt.Errorf("containerd is not installed (%s: %w): install it with apt-get install containerd runc", ContainerdBinary, err)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return nil, fmt.Errorf("runc is not installed (%w): install it with apt-get install containerd runc", err)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("a private containerd needs root: run as root (or use the system containerd through jobs.containerd_address)")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"root", "opt"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("prepare the containerd folder: %w", err)
		}
	}
	// A job in a user namespace is an unprivileged host user while runc prepares its root
	// file system, which lies in the state folder: every folder above it must let others
	// through (0711), as /run/containerd does.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	d := &Daemon{dir: dir, sockDir: dir, logPath: filepath.Join(dir, "containerd.log"), exited: make(chan struct{})}
	if len(filepath.Join(dir, "containerd.sock.ttrpc")) > maxSocketPath || !traversable(filepath.Dir(dir)) {
		if d.sockDir, err = os.MkdirTemp("/tmp", "gpunex-ctrd-"); err != nil {
			return nil, fmt.Errorf("make a short folder for the containerd socket: %w", err)
		}
		d.ownSock = true
		if err := os.Chmod(d.sockDir, 0o711); err != nil {
			return nil, err
		}
	}
	// (A state folder an earlier version made is 0700: chmod, not only MkdirAll.)
	if err := os.MkdirAll(filepath.Join(d.sockDir, "state"), 0o711); err != nil {
		return nil, fmt.Errorf("prepare the containerd folder: %w", err)
	}
	if err := os.Chmod(filepath.Join(d.sockDir, "state"), 0o711); err != nil {
		return nil, fmt.Errorf("prepare the containerd folder: %w", err)
	}
	d.address = filepath.Join(d.sockDir, "containerd.sock")

	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(daemonConfig(dir, d.address)), 0o600); err != nil {
		return nil, fmt.Errorf("write the containerd config: %w", err)
	}
	logf, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(ContainerdBinary, "--config", config)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.Dir = dir
	// Own process group: a Ctrl-C meant for the caller does not reach the daemon before Stop
	// has cleaned up; Pdeathsig ends it if the caller dies without calling Stop.
	d.cmd.SysProcAttr = daemonProcAttr()
	// Pdeathsig fires when the thread that started the daemon ends, not the process: a
	// goroutine that exits with its thread locked (the namespace pinner's, which joins
	// containerd's mount namespace) ends that thread, and the runtime may have started the
	// daemon from it. So the daemon is started, and waited for, on a thread locked for its
	// whole life.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := d.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	if err := <-started; err != nil {
		d.cleanupSock()
		return nil, fmt.Errorf("start containerd: %w", err)
	}

	if err := d.waitReady(ctx, 30*time.Second); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// daemonConfig is the config.toml of a private daemon. The CRI plugin (Kubernetes) and the
// snapshotters we do not use are disabled; everything else writes below dir.
func daemonConfig(dir, address string) string {
	q := strconv.Quote
	return fmt.Sprintf(`version = 2
root = %s
state = %s
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %s

[ttrpc]
  address = %s

[debug]
  address = ""
  level = "warn"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %s
`, q(filepath.Join(dir, "root")), q(filepath.Join(filepath.Dir(address), "state")), q(address), q(address+".ttrpc"), q(filepath.Join(dir, "opt")))
}

// waitReady polls the socket until the daemon serves, the daemon dies, or the time is up.
func (d *Daemon) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		if _, err := os.Stat(d.address); err == nil {
			c, err := client.New(d.address, client.WithTimeout(time.Second))
			if err == nil {
				ok, err := c.IsServing(ctx)
				c.Close()
				if err == nil && ok {
					return nil
				}
			}
		}
		select {
		case <-d.exited:
			return fmt.Errorf("containerd exited while starting (%v); its log %s ends with:\n%s", d.waitErr, d.logPath, tail(d.logPath, 2000))
		case <-ctx.Done():
			return fmt.Errorf("containerd did not answer on %s within %s; its log %s ends with:\n%s", d.address, limit, d.logPath, tail(d.logPath, 2000))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Address is the daemon's gRPC socket, for ContainerdOptions.Address.
func (d *Daemon) Address() string { return d.address }

// Stop ends the daemon and leaves no process behind. Shims of running tasks outlive a
// containerd daemon by design, so Stop first kills and deletes every task in every
// namespace through the API (a shim exits once its last task is deleted), then sends the
// daemon SIGTERM (SIGKILL after 10 s), and finally kills by PID any shim still started
// with this daemon's address (found in /proc by its -address argument). Containers,
// images and snapshots stay in the folder, which the caller may delete.
func (d *Daemon) Stop() error {
	d.stopOnce.Do(func() { d.stopErr = d.stop() })
	return d.stopErr
}

func (d *Daemon) stop() error {
	var errs []error
	select {
	case <-d.exited:
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := d.deleteAllTasks(ctx); err != nil {
			errs = append(errs, fmt.Errorf("delete tasks: %w", err))
		}
		cancel()
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			<-d.exited
		}
	}
	for _, pid := range shimPIDs(d.address) {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}
	d.cleanupSock()
	return errors.Join(errs...)
}

// deleteAllTasks kills and deletes every task the daemon holds.
func (d *Daemon) deleteAllTasks(ctx context.Context) error {
	c, err := client.New(d.address, client.WithTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	nss, err := c.NamespaceService().List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		cs, err := c.Containers(nctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ctr := range cs {
			t, err := ctr.Task(nctx, nil)
			if err != nil {
				continue
			}
			if _, err := t.Delete(nctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("%s/%s: %w", ns, ctr.ID(), err))
			}
		}
	}
	return errors.Join(errs...)
}

func (d *Daemon) cleanupSock() {
	if d.ownSock {
		os.RemoveAll(d.sockDir)
	}
}

// shimPIDs finds the shims started by the daemon listening on address: their command line
// holds "-address <address>".
func shimPIDs(address string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte("\x00-address\x00" + address + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte("containerd-shim")) {
			continue
		}
		if bytes.Contains(append(cmd, 0), want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	f.ReadAt(b, off)
	return strings.TrimSpace(string(b))
}

// traversable tells whether every folder from dir up to / lets others through.
func traversable(dir string) bool {
	for {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}
