package sandbox

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpunex/gpunex/sandbox/internal/nshold"
	"golang.org/x/sys/unix"
)

// pinNetns bind-mounts a network namespace (/proc/PID/ns/net) on a file, which keeps the
// namespace alive after its last process ends.
func pinNetns(src, pin string) error {
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
}

// unpinNetns undoes pinNetns.
func unpinNetns(pin string) error {
	if err := unix.Unmount(pin, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return &os.PathError{Op: "unmount", Path: pin, Err: err}
	}
	return os.Remove(pin)
}

// holderWait is how long a namespace holder has to say it is ready.
const holderWait = 10 * time.Second

// holdNamespaces starts exe as a namespace holder (sandbox/internal/nshold) in a new
// network namespace, and a new user namespace mapping 0-65535 to base when userns, then
// pins them on userPin and netPin. The holder brings the loopback up (with CAP_NET_ADMIN
// in its user namespace, the only capability it keeps) and exits once they are pinned.
func holdNamespaces(exe string, userns bool, base uint32, userPin, netPin string) error {
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
	if err := pinNetns(proc+"net", netPin); err != nil {
		return err
	}
	if userns {
		if err := pinNetns(proc+"user", userPin); err != nil {
			unpinNetns(netPin)
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
