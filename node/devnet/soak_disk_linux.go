//go:build linux

package devnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fillDisk fills the file system of a provider's home (a tmpfs of its own, mountHomes) to
// its last MiB for the fault's time, then frees it.
func (s *soak) fillDisk(ctx context.Context, f Fault) {
	home := filepath.Join(s.dir, f.Target)
	var st unix.Statfs_t
	if err := unix.Statfs(home, &st); err != nil {
		s.breaks("disk full", fmt.Sprintf("%s: %v", f.Target, err))
		return
	}
	free := int64(st.Bavail)*int64(st.Bsize) - 1<<20
	filler := filepath.Join(home, "soak-filler")
	file, err := os.Create(filler)
	if err == nil {
		err = unix.Fallocate(int(file.Fd()), 0, 0, max(free, 1))
		file.Close()
	}
	defer os.Remove(filler)
	if err != nil {
		s.breaks("disk full", fmt.Sprintf("%s: filling its disk: %v", f.Target, err))
		return
	}
	s.count(s.report.Applied, f.Kind)
	sleepCtx(context.WithoutCancel(ctx), f.For)
}

// mountHomes gives each provider's home a 256 MiB file system of its own (tmpfs), so that
// the disk-full fault fills one provider's disk and nothing else.
func (s *soak) mountHomes() error {
	for i := 1; i <= s.o.Providers; i++ {
		dir := filepath.Join(s.dir, fmt.Sprintf("provider-%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		unix.Unmount(dir, unix.MNT_DETACH) // a soak before this one that did not end
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256m,mode=0755"); err != nil {
			return fmt.Errorf("a file system of its own for %s (the disk-full fault; the soak runs as root): %w", dir, err)
		}
		s.mounts = append(s.mounts, dir)
	}
	return nil
}

// unmountHomes undoes mountHomes once the nodes stopped.
func (s *soak) unmountHomes() {
	for _, dir := range s.mounts {
		unix.Unmount(dir, unix.MNT_DETACH)
	}
}
