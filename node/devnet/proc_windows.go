package devnet

import "syscall"

// procAttr: Windows has no process groups of the POSIX kind; the devnet stops its
// nodes itself, and nothing kills them if the devnet is killed.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
