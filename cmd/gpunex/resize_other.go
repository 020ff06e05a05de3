//go:build !unix

package main

import "os"

// notifyResize: Windows has no SIGWINCH; the command's terminal keeps the size it started
// with.
func notifyResize(chan os.Signal) {}
