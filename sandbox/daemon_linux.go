package sandbox

import "syscall"

// daemonProcAttr: containerd in its own process group, and SIGTERM if the caller dies.
func daemonProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
