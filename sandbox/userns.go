package sandbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// User namespaces: every job gets 65,536 host uids and gids of its own, mapped to 0-65535
// in the container, so that its uid 65534 (and root, were it to become root) is an
// unprivileged host uid no other job and no host account has. A process that escapes the
// container lands as that uid.
const (
	// UsernsFirstID is the first host uid and gid given to jobs.
	UsernsFirstID = 1 << 30
	// UsernsSize is how many ids each job gets.
	UsernsSize = 1 << 16
	// usernsSlots is how many ranges there are (host ids 2^30 to 2^30 + 2^28).
	usernsSlots = 1 << 12
)

// labelUIDBase records the first host uid of a job's range.
const labelUIDBase = "gpunex/uid-base"

// usernsSupport says whether this host can give jobs user namespaces, and why not.
func usernsSupport() (bool, string) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false, "the kernel has no user namespaces (no /proc/self/uid_map; CONFIG_USER_NS)"
	}
	if f := strings.Fields(string(b)); len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] != "4294967295" {
		return false, "this node runs in a user namespace of its own: it cannot map more ids into jobs"
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return false, "user namespaces are turned off (sysctl user.max_user_namespaces = 0)"
	}
	return true, ""
}

// pickUserns chooses a job's range: the slot its ID hashes to, or the next one that no job
// of this runtime uses (used) and that claim gets.
func pickUserns(id string, used map[uint32]bool, claim func(base uint32) bool) (uint32, error) {
	h := fnv.New32a()
	h.Write([]byte(id))
	start := h.Sum32() % usernsSlots
	for i := uint32(0); i < usernsSlots; i++ {
		base := UsernsFirstID + ((start+i)%usernsSlots)*UsernsSize
		if !used[base] && claim(base) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("all %d user-namespace ranges are in use", usernsSlots)
}

// usernsClaimDir holds one file per range in use on this host, named by its first id, so
// that nodes sharing a host never give two jobs one range. It is under /run: gone with a
// reboot, as the jobs are.
var usernsClaimDir = "/run/gpunex/userns"

// claimUserns claims a range for a job (holder names it); false when another holds it.
func claimUserns(base uint32, holder string) bool {
	if err := os.MkdirAll(usernsClaimDir, 0o700); err != nil {
		return false
	}
	f, err := os.OpenFile(filepath.Join(usernsClaimDir, strconv.FormatUint(uint64(base), 10)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	f.WriteString(holder + "\n")
	f.Close()
	return true
}

// unclaimUserns frees a range on the host.
func unclaimUserns(base uint32) {
	os.Remove(filepath.Join(usernsClaimDir, strconv.FormatUint(uint64(base), 10)))
}

// withUserns maps container ids 0-65535 to the host's base to base+65535, and gives the job
// a cgroup namespace (it sees its own cgroup as the root of the hierarchy).
func withUserns(base uint32) oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, ctr *containers.Container, s *oci.Spec) error {
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: base, Size: UsernsSize}}
		if err := oci.WithUserNamespace(m, m)(ctx, c, ctr, s); err != nil {
			return err
		}
		return oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.CgroupNamespace})(ctx, c, ctr, s)
	}
}

func parseUIDBase(labels map[string]string) (uint32, bool) {
	v, err := strconv.ParseUint(labels[labelUIDBase], 10, 32)
	return uint32(v), err == nil
}

// prepareRootfs creates, in a job's own writable snapshot, the mount points its spec
// needs and its image lacks (/run, /scratch, /output, /etc/resolv.conf...). runc would
// create them itself, but in a user namespace it does so as the job's mapped root, an
// unprivileged host user who may not write the image's folders. Paths are resolved
// inside the snapshot (os.Root): an image's symbolic link cannot lead outside it.
func (c *Containerd) prepareRootfs(ctx context.Context, ctr client.Container) error {
	spec, err := ctr.Spec(ctx)
	if err != nil {
		return err
	}
	mounts, err := c.client.SnapshotService(c.opts.Snapshotter).Mounts(ctx, ctr.ID())
	if err != nil {
		return err
	}
	return mount.WithTempMount(ctx, mounts, func(dir string) error {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return err
		}
		defer root.Close()
		for _, m := range spec.Mounts {
			p := strings.TrimPrefix(filepath.Clean(m.Destination), "/")
			if p == "" || p == "." {
				continue
			}
			if _, err := root.Lstat(p); err == nil {
				continue
			}
			file := false
			if m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") {
				if st, err := os.Stat(m.Source); err == nil && !st.IsDir() {
					file = true
				}
			}
			if err := root.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("mount point %s: %w", m.Destination, err)
			}
			if file {
				f, err := root.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
				if err != nil {
					return fmt.Errorf("mount point %s: %w", m.Destination, err)
				}
				f.Close()
			} else if err := root.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("mount point %s: %w", m.Destination, err)
			}
		}
		return nil
	})
}

// reserveUserns picks and holds a user-namespace range for a job.
func (c *Containerd) reserveUserns(id string) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	used := make(map[uint32]bool, len(c.uidBases))
	for b := range c.uidBases {
		used[b] = true
	}
	base, err := pickUserns(id, used, func(b uint32) bool { return claimUserns(b, c.opts.Namespace+"/"+id) })
	if err == nil {
		c.uidBases[base] = id
	}
	return base, err
}

// releaseUserns frees a job's range.
func (c *Containerd) releaseUserns(base uint32, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.uidBases[base] == id {
		delete(c.uidBases, base)
		unclaimUserns(base)
	}
}
