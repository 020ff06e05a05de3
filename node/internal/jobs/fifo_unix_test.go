//go:build unix

package jobs

import "syscall"

// mkfifo makes a named pipe, as a job can in its /output.
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
