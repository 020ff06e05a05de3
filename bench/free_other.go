//go:build !unix

package bench

import "errors"

// FreeGiB: this build cannot tell a file system's free space.
func FreeGiB(string) (int64, error) {
	return 0, errors.New("free space not measured on this system")
}
