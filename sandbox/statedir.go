package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// ErrStateNotTraversable says that a folder above containerd's state does not let other
// users through: runc prepares a job's root file system (in the state folder) as the
// job's mapped root, an unprivileged host user, and fails every job in a user namespace
// with "permission denied".
var ErrStateNotTraversable = errors.New("jobs in user namespaces cannot reach containerd's state folder")

// defaultContainerdState and defaultContainerdConfig are containerd's own defaults.
const (
	defaultContainerdState  = "/run/containerd"
	defaultContainerdConfig = "/etc/containerd/config.toml"
)

// CheckStateTraversable finds where the containerd daemon at address keeps its state (the
// jobs' bundles and root file systems: its --state flag, the state of its config file, or
// containerd's default /run/containerd) and checks that every folder from there up to /
// lets other users through (ErrStateNotTraversable, saying which folder and how to fix
// it). It needs to run on the daemon's host, as root (`gpunex doctor`; NewContainerd runs it
// when jobs get user namespaces). It says what it found.
func CheckStateTraversable(ctx context.Context, address string) (string, error) {
	dir, err := containerdStateDir(address)
	if err != nil {
		return "", fmt.Errorf("cannot tell where containerd at %s keeps its state: %w", address, err)
	}
	if err := stateTraversable(dir); err != nil {
		return "", err
	}
	return "containerd's state " + dir + " is reachable by the jobs' users", nil
}

// containerdStateDir finds the state folder of the daemon listening on address, from its
// command line and config file (/proc/PID/cmdline of the socket's peer).
func containerdStateDir(address string) (string, error) {
	pid, err := socketPeerPID(address)
	if err != nil {
		return "", err
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "", err
	}
	cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	abs := func(p string) string {
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		return filepath.Clean(p)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	config, state := defaultContainerdConfig, ""
	for i := 1; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !hasValue && i+1 < len(args) && (name == "config" || name == "c" || name == "state") {
			i++
			value = args[i]
		}
		switch name {
		case "config", "c":
			config = abs(value)
		case "state":
			state = abs(value)
		}
	}
	if state != "" {
		return state, nil
	}
	var cfg struct {
		State string `toml:"state"`
	}
	if _, err := toml.DecodeFile(config, &cfg); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read containerd's config %s: %w", config, err)
	}
	if cfg.State == "" {
		return defaultContainerdState, nil
	}
	return abs(cfg.State), nil
}

// stateTraversable checks that others may go through every folder from the state folder
// up to /, and through the task folders below it that containerd made already.
func stateTraversable(state string) error {
	dirs := []string{filepath.Join(state, "io.containerd.runtime.v2.task")}
	for d := state; ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for _, d := range dirs {
		st, err := os.Stat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue // made by containerd at its first job, with the right mode
		}
		if err != nil {
			return fmt.Errorf("containerd's state folder %s: %w", state, err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: containerd keeps its state in %s, and %s (mode %s) does not let other users through, "+
				"so runc fails every job with \"permission denied\": let them through (chmod o+x %s), "+
				"or move containerd's state to a folder they can go through (state = %s in its config.toml), "+
				"or run jobs without user namespaces (jobs.user_namespaces = false)",
				ErrStateNotTraversable, state, d, st.Mode().Perm(), d, strconv.Quote(defaultContainerdState))
		}
	}
	return nil
}
