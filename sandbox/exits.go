package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1/stats"
	statsv2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
)

// recordedExit returns the exit recorded on a container, if any.
func recordedExit(ctx context.Context, ctr client.Container) (Exit, bool, error) {
	labels, err := ctr.Labels(ctx)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return Exit{}, false, fmt.Errorf("%w: %s", ErrNotFound, ctr.ID())
		}
		return Exit{}, false, err
	}
	return exitLabel(labels)
}

func exitLabel(labels map[string]string) (Exit, bool, error) {
	raw, ok := labels[labelExit]
	if !ok {
		return Exit{}, false, nil
	}
	var e Exit
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return Exit{}, false, fmt.Errorf("the recorded exit %q is unreadable: %w", raw, err)
	}
	return e, true, nil
}

// exitOf works out how an ended job ended and records it: the reason given to Kill (or
// the monitor's timeout) when it was killed, oom when the kernel's OOM killer killed a
// process of the job and it exited with an error, or exited.
func (c *Containerd) exitOf(ctx context.Context, ctr client.Container, task client.Task, code uint32, at time.Time) (Exit, error) {
	info, err := ctr.Info(ctx)
	if err != nil {
		return Exit{}, fmt.Errorf("job %s: %w", ctr.ID(), err)
	}
	if e, ok, err := exitLabel(info.Labels); err != nil || ok {
		return e, err
	}
	e := Exit{Code: int(code), StartedAt: startedAt(info.Labels, info.CreatedAt), EndedAt: at.UTC(), Reason: ReasonExited}
	if r := info.Labels[labelKillReason]; r != "" {
		e.Reason = r
	} else if code != 0 && c.oomKilled(ctx, task, info.Spec) {
		e.Reason = ReasonOOM
	} else if code > 128 && code < 128+65 {
		// The job's first process cannot be killed by its own processes (it is the init of
		// its PID namespace), so this is either its own exit code or a signal sent from the
		// host by something other than gpunex: containerd's exit status cannot tell which.
		c.log.Warn("a job ended with a signal's exit code that no gpunex node sent and the OOM killer did not: either the job exited so, or a process on the host outside gpunex killed it",
			"job", ctr.ID(), "code", code, "signal", syscall.Signal(code-128).String())
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return e, err
	}
	if _, err := ctr.SetLabels(ctx, map[string]string{labelExit: string(raw)}); err != nil && !errdefs.IsNotFound(err) && ctx.Err() == nil {
		c.log.Warn("recording a job's exit failed", "job", ctr.ID(), "err", err)
	}
	return e, nil
}

// startedAt is when the job's task was started, or, if that was not recorded, when its
// container was created.
func startedAt(labels map[string]string, created time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, labels[labelStartedAt]); err == nil {
		return t
	}
	return created.UTC()
}

// oomKilled tells whether the kernel's OOM killer killed a process in the job's memory
// cgroup: its oom_kill counter, read from the task's metrics (cgroup v1
// memory.oom_control, v2 memory.events), or from cgroupfs directly when the daemon does
// not report it. The cgroup and its counter live until the task is deleted.
func (c *Containerd) oomKilled(ctx context.Context, task client.Task, rawSpec typeurl.Any) bool {
	if m, err := task.Metrics(ctx); err == nil && m.Data != nil {
		switch {
		case strings.HasSuffix(m.Data.GetTypeUrl(), "io.containerd.cgroups.v1.Metrics"):
			var v1 stats.Metrics
			if proto.Unmarshal(m.Data.GetValue(), &v1) == nil && v1.MemoryOomControl != nil {
				return v1.MemoryOomControl.OomKill > 0
			}
		case strings.HasSuffix(m.Data.GetTypeUrl(), "io.containerd.cgroups.v2.Metrics"):
			var v2 statsv2.Metrics
			if proto.Unmarshal(m.Data.GetValue(), &v2) == nil && v2.MemoryEvents != nil {
				return v2.MemoryEvents.OomKill > 0
			}
		}
	}
	return oomKillsFromCgroupfs(cgroupsPath(rawSpec)) > 0
}

// oomKillsFromCgroupfs reads the oom_kill counter of a cgroup (cgroup v1 or v2); 0 when
// it cannot.
func oomKillsFromCgroupfs(path string) int64 {
	if path == "" || strings.Contains(path, ":") { // systemd cgroup paths are not handled
		return 0
	}
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", path, "memory.oom_control"),
		filepath.Join("/sys/fs/cgroup", path, "memory.events"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return 0
}

// cgroupsPath is the cgroup of a container, from its stored runtime spec.
func cgroupsPath(spec typeurl.Any) string {
	if spec == nil {
		return ""
	}
	var s specs.Spec
	if json.Unmarshal(spec.GetValue(), &s) != nil || s.Linux == nil {
		return ""
	}
	return s.Linux.CgroupsPath
}
