package sandbox

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/gpunex/gpunex/sandbox/internal/nshold"
	"golang.org/x/sys/unix"
)

// pinner makes the bind mounts that pin jobs' namespaces (pinNetns) in the mount namespace
// containerd runs in, where runc opens the pins. That is the node's own, except for a node
// that systemd gave a mount namespace of its own (the provider unit's ProtectSystem= and
// friends, docs/operations.md): systemd cuts the propagation of its mounts to the host, so
// a pin mounted there would be invisible to runc. Mounts made in containerd's namespace
// still reach the node's (systemd keeps that direction), where the CNI plugins open them.
// A nil pinner pins in the node's own namespace.
type pinner struct {
	ns *os.File // containerd's mount namespace (/proc/PID/ns/mnt)
}

// newPinner finds where to pin for the containerd daemon listening on address: nil when
// it runs in the node's own mount namespace, or when that cannot be told (the daemon's
// process is not visible here, or the node lacks CAP_SYS_PTRACE to open its namespace).
func newPinner(address string) (*pinner, error) {
	pid, err := socketPeerPID(address)
	if err != nil {
		return nil, err
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return nil, err
	}
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &theirs); err != nil {
		ns.Close()
		return nil, err
	}
	if err := unix.Stat("/proc/self/ns/mnt", &ours); err != nil || (theirs.Dev == ours.Dev && theirs.Ino == ours.Ino) {
		ns.Close()
		return nil, err
	}
	return &pinner{ns: ns}, nil
}

// in runs f in the pinner's mount namespace, on a thread of its own that joins it and
// is never given back to the Go runtime (locked and not unlocked: it ends with the
// goroutine), so no other code ever runs there. unshare(CLONE_FS) first, because setns
// refuses a mount namespace to a thread that shares its root and working folder with
// others, as every Go thread does. It needs CAP_SYS_ADMIN and CAP_SYS_CHROOT.
func (p *pinner) in(f func() error) error {
	if p == nil {
		return f()
	}
	return onSpentThread(func() error {
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unshare the file-system context: %w", err)
		}
		if err := unix.Setns(int(p.ns.Fd()), unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("join containerd's mount namespace: %w", err)
		}
		return f()
	})
}

// onSpentThread runs f on a thread locked to it that ends with it, and that is not the
// process's main thread. The runtime does not end the main thread when a goroutine locked
// to it exits (it parks it for good instead), and what the main thread joins shows as the
// whole process's: /proc/PID/ns/mnt and /proc/PID/mountinfo would then name containerd's
// namespace, and every later pin would be compared against the wrong one.
func onSpentThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// This goroutine holds the main thread, so the one started now cannot get it.
			done <- onSpentThread(f)
			runtime.UnlockOSThread()
			return
		}
		done <- f()
	}()
	return <-done
}

// close lets go of containerd's namespace.
func (p *pinner) close() {
	if p != nil {
		p.ns.Close()
	}
}

// pinNetns bind-mounts a namespace (/proc/PID/ns/net or user) on a file, which keeps the
// namespace alive after its last process ends. With a pinner, it checks that the pin also
// shows in the node's namespace, where the CNI plugins open it.
func (p *pinner) pinNetns(src, pin string) error {
	err := p.in(func() error {
		if err := os.MkdirAll(filepath.Dir(pin), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(pin, os.O_CREATE|os.O_RDONLY, 0o400)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount(src, pin, "", unix.MS_BIND, ""); err != nil {
			os.Remove(pin)
			return &os.PathError{Op: "bind-mount " + src, Path: pin, Err: err}
		}
		return nil
	})
	if err != nil || p == nil {
		return err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(pin, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		p.unpinNetns(pin)
		return fmt.Errorf("the pin %s, mounted in containerd's mount namespace, does not show in the node's (%v): "+
			"the folder must have shared mount propagation on the host, as systemd sets it up", pin, err)
	}
	return nil
}

// unpinNetns undoes pinNetns.
func (p *pinner) unpinNetns(pin string) error {
	return p.in(func() error {
		if err := unix.Unmount(pin, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return &os.PathError{Op: "unmount", Path: pin, Err: err}
		}
		return os.Remove(pin)
	})
}

// holderWait is how long a namespace holder has to say it is ready.
const holderWait = 10 * time.Second

// holdNamespaces starts exe as a namespace holder (sandbox/internal/nshold) in a new
// network namespace, and a new user namespace mapping 0-65535 to base when userns, then
// pins them on userPin and netPin. The holder brings the loopback up (with CAP_NET_ADMIN
// in its user namespace, the only capability it keeps) and exits once they are pinned.
func (p *pinner) holdNamespaces(exe string, userns bool, base uint32, userPin, netPin string) error {
	cmd := exec.Command(exe, nshold.Arg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if userns {
		m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: UsernsSize}}
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = m, m
		cmd.SysProcAttr.GidMappingsEnableSetgroups = true // runc sets the job's groups
		// The holder is the host's root, which the user namespace does not map: without
		// this it would have no privilege in its namespaces after exec.
		cmd.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_NET_ADMIN}
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the namespace holder %s: %w", exe, err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	// A holder that says nothing (a binary without the holder, a hung start) is killed
	// after holderWait rather than hang the job's start and the runtime's Close.
	timer := time.AfterFunc(holderWait, func() { cmd.Process.Kill() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	timer.Stop()
	if strings.TrimSpace(line) != nshold.Ready {
		return fmt.Errorf("the namespace holder %s: %q", exe, strings.TrimSpace(line))
	}
	proc := fmt.Sprintf("/proc/%d/ns/", cmd.Process.Pid)
	if err := p.pinNetns(proc+"net", netPin); err != nil {
		return err
	}
	if userns {
		if err := p.pinNetns(proc+"user", userPin); err != nil {
			p.unpinNetns(netPin)
			return err
		}
	}
	return nil
}

// processAlive tells whether a process with this pid exists.
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

// setThreadPriority sets the nice value of the calling thread, which the processes it
// starts inherit. (The thread must be locked to the goroutine, and given back to the
// runtime, not ended: a process started with Pdeathsig, as the tests' and the devnet's
// containerd, is killed when the thread that started it ends.)
func setThreadPriority(nice int) error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
}

// socketPeerPID returns the process listening on a Unix socket (SO_PEERCRED of a connection
// to it).
func socketPeerPID(address string) (int, error) {
	conn, err := net.Dial("unix", address)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return 0, cerr
	}
	if err != nil {
		return 0, err
	}
	return int(cred.Pid), nil
}
