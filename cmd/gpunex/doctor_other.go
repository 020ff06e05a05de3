//go:build !unix

package main

import "errors"

// freeGiB: this build cannot tell a file system's free space.
func freeGiB(string) (int64, error) {
	return 0, errors.New("free space not measured on this system")
}
