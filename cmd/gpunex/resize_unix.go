//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyResize sends c a signal each time the terminal's window changes size (SIGWINCH).
func notifyResize(c chan os.Signal) { signal.Notify(c, syscall.SIGWINCH) }
