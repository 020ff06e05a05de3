package devnet

import "syscall"

// procAttr puts each devnet node in its own process group (Ctrl-C reaches the devnet,
// which stops the nodes in order) and has the kernel kill it if the devnet dies, even by
// SIGKILL.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
