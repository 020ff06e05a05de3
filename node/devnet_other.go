//go:build !linux && !windows

package node

import "syscall"

// devnetProcAttr puts each devnet node in its own process group. Outside Linux nothing kills
// the nodes if the devnet itself is killed with SIGKILL.
func devnetProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
