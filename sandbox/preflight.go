package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
)

// Preflight checks of the host a provider's jobs run on (`gpunex doctor`): each says what
// it found, and an error says what is missing.

// ContainerdVersion connects to the containerd daemon at address and returns its version
// and revision.
func ContainerdVersion(ctx context.Context, address string) (string, error) {
	if _, err := os.Stat(address); err != nil {
		return "", fmt.Errorf("no containerd socket at %s: %w", address, err)
	}
	c, err := client.New(address, client.WithTimeout(3*time.Second))
	if err != nil {
		return "", fmt.Errorf("containerd at %s: %w", address, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := c.Version(ctx)
	if err != nil {
		return "", fmt.Errorf("containerd at %s does not answer: %w", address, err)
	}
	return fmt.Sprintf("containerd %s (%s)", v.Version, v.Revision), nil
}

// ErrCgroupV1 says the host mounts the legacy cgroup v1 hierarchies: jobs run, with their
// CPU, memory and process limits, but cgroup v2 is what the sandbox is built and measured
// on.
var ErrCgroupV1 = errors.New("cgroup v1: jobs run with their limits, but cgroup v2 is recommended")

// CgroupV2 says whether the unified cgroup hierarchy (cgroup v2) is mounted, with the
// controllers it offers (ErrCgroupV1 where the legacy hierarchies are).
func CgroupV2() (string, error) {
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil {
		if _, v1 := os.Stat("/sys/fs/cgroup/memory"); v1 == nil {
			return "", ErrCgroupV1
		}
		return "", fmt.Errorf("no cgroup hierarchy at /sys/fs/cgroup (%v): jobs' limits need one", err)
	}
	ctrl := strings.Fields(string(b))
	for _, want := range []string{"cpu", "memory", "pids"} {
		found := false
		for _, c := range ctrl {
			found = found || c == want
		}
		if !found {
			return "", fmt.Errorf("cgroup v2 lacks the %s controller (has %s)", want, strings.Join(ctrl, " "))
		}
	}
	return "cgroup v2 with " + strings.Join(ctrl, " "), nil
}

// UserNamespacesAvailable says whether the kernel lets the node make user namespaces for
// jobs.
func UserNamespacesAvailable() (string, error) {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return "", fmt.Errorf("the kernel has no user namespaces (%v)", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return "", fmt.Errorf("user namespaces are off: user.max_user_namespaces is %q", strings.TrimSpace(string(b)))
	}
	return fmt.Sprintf("user namespaces on (user.max_user_namespaces %d)", n), nil
}

// NVIDIACDISpec finds a CDI spec naming NVIDIA GPUs (nvidia.com/gpu) in the directories
// containerd reads them from.
func NVIDIACDISpec() (string, error) {
	for _, dir := range []string{"/etc/cdi", "/var/run/cdi"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".yaml") && !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			p := dir + "/" + e.Name()
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "nvidia.com/gpu") {
				return "CDI spec " + p, nil
			}
		}
	}
	return "", fmt.Errorf("no CDI spec of nvidia.com/gpu in /etc/cdi or /var/run/cdi")
}
