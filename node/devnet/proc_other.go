//go:build !linux && !windows

package devnet

import "syscall"

// procAttr puts each devnet node in its own process group. Outside Linux nothing kills
// the nodes if the devnet itself is killed with SIGKILL.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
