//go:build !linux && !windows

package sandbox

import "syscall"

// daemonProcAttr: containerd in its own process group. Jobs run on Linux only; elsewhere
// StartContainerd fails when it looks for the binaries.
func daemonProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
