package sandbox

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// pinNetns bind-mounts a network namespace (/proc/PID/ns/net) on a file, which keeps the
// namespace alive after its last process ends.
func pinNetns(src, pin string) error {
	if err := os.MkdirAll(filepath.Dir(pin), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(pin, os.O_CREATE|os.O_RDONLY, 0o400)
	if err != nil {
		return err
	}
	f.Close()
	if err := unix.Mount(src, pin, "", unix.MS_BIND, ""); err != nil {
		os.Remove(pin)
		return &os.PathError{Op: "bind-mount " + src, Path: pin, Err: err}
	}
	return nil
}

// unpinNetns undoes pinNetns.
func unpinNetns(pin string) error {
	if err := unix.Unmount(pin, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return &os.PathError{Op: "unmount", Path: pin, Err: err}
	}
	return os.Remove(pin)
}
