//go:build linux

// Command probe is the sandbox tests' red-team tool: run inside a job (statically
// linked, copied into the job's /output), it tries one thing a job must not be able to
// do and prints one line, "<what> allowed" or "<what> refused <ERRNO>: <message>", so that
// a test asserts both the refusal and its reason.
//
//	probe tcp HOST:PORT       connect (2 s) and send a line
//	probe abstract NAME       connect to the abstract Unix socket @NAME
//	probe mount | ptrace | bpf | keyctl | unshare | mknod | sysctl | setuid0 | chown
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe WHAT [ARG]")
		os.Exit(2)
	}
	what, arg := os.Args[1], ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	err := try(what, arg)
	if err == nil {
		fmt.Printf("%s allowed\n", what)
		return
	}
	name := "ERROR"
	var errno syscall.Errno
	if errors.As(err, &errno) {
		name = unix.ErrnoName(errno)
	}
	fmt.Printf("%s refused %s: %v\n", what, name, err)
}

func try(what, arg string) error {
	switch what {
	case "tcp":
		c, err := net.DialTimeout("tcp", arg, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello-from-job\n"))
		return err
	case "abstract":
		c, err := net.Dial("unix", "@"+arg)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello-from-job\n"))
		return err
	case "mount":
		return unix.Mount("tmpfs", "/scratch", "tmpfs", 0, "")
	case "ptrace":
		return unix.PtraceAttach(1)
	case "bpf":
		// BPF_MAP_CREATE of a 1-entry array map.
		attr := [5]uint32{2, 4, 4, 1, 0}
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
		if e != 0 {
			return e
		}
		return nil
	case "keyctl":
		_, err := unix.KeyctlJoinSessionKeyring("gpunex-probe")
		return err
	case "unshare":
		return unix.Unshare(unix.CLONE_NEWUSER | unix.CLONE_NEWNS)
	case "mknod":
		return unix.Mknod("/scratch/sda", unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0)))
	case "sysctl":
		return os.WriteFile("/proc/sys/kernel/hostname", []byte("escaped"), 0)
	case "setuid0":
		return unix.Setuid(0)
	case "chown":
		return os.Chown("/output", 0, 0)
	}
	return fmt.Errorf("unknown probe %q", what)
}
