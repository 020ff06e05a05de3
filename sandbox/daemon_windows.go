package sandbox

import "syscall"

// daemonProcAttr: Windows runs no jobs; StartContainerd fails when it looks for the binaries.
func daemonProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
