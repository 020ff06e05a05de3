//go:build unix

package bench

import "syscall"

// FreeGiB is the space left to unprivileged users on dir's file system, in GiB.
func FreeGiB(dir string) (int64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Bavail) * int64(fs.Bsize) >> 30, nil
}
