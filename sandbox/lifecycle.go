package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
)

// maxReasonLen bounds the kill reason kept in a label.
const maxReasonLen = 256

// Wait blocks until the job's process has ended and returns its Exit, which is also
// recorded on the container so that later calls return the same. It fails for a job
// whose task is gone without a recorded exit (the host rebooted, or containerd lost it).
func (c *Containerd) Wait(ctx context.Context, id string) (Exit, error) {
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return Exit{}, err
	}
	if e, ok, err := recordedExit(ctx, ctr); err != nil || ok {
		return e, err
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		if e, ok, err := recordedExit(ctx, ctr); err != nil || ok {
			return e, err
		}
		return Exit{}, fmt.Errorf("job %s: its process is gone and its end was not recorded (did the host or containerd restart?)", id)
	}
	if err != nil {
		return Exit{}, fmt.Errorf("job %s: %w", id, err)
	}
	c.watch(id)
	exitC, err := task.Wait(ctx)
	if err != nil {
		return Exit{}, fmt.Errorf("wait for job %s: %w", id, err)
	}
	select {
	case st := <-exitC:
		if err := st.Error(); err != nil {
			if ctx.Err() != nil {
				return Exit{}, ctx.Err()
			}
			return Exit{}, fmt.Errorf("wait for job %s: %w", id, err)
		}
		e, err := c.exitOf(ctx, ctr, task, st.ExitCode(), st.ExitTime())
		if err != nil {
			return e, err
		}
		// Deleting the ended task makes the shim finish copying the job's output into
		// its log: without it a reader right after Wait may find the log short. The exit
		// is recorded in a label, so later Waits still report it.
		if _, derr := task.Delete(ctx); derr != nil && !errdefs.IsNotFound(derr) && ctx.Err() == nil {
			c.log.Warn("deleting an ended job's task failed", "job", id, "err", derr)
		}
		return e, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// Kill stops a running job: SIGTERM to all its processes, SIGKILL after KillGrace, and
// returns once it has ended. The first reason given (ReasonCancelled when empty) is what
// Wait reports. Killing an ended job does nothing.
func (c *Containerd) Kill(ctx context.Context, id, reason string) error {
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return err
	}
	return c.kill(ctx, ctr, reason, c.opts.KillGrace)
}

// kill records the reason and ends the task: SIGTERM, then SIGKILL after grace (at once
// when grace is 0).
func (c *Containerd) kill(ctx context.Context, ctr client.Container, reason string, grace time.Duration) error {
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	st, err := task.Status(ctx)
	if errdefs.IsNotFound(err) || (err == nil && st.Status == client.Stopped) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	if reason == "" {
		reason = ReasonCancelled
	}
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	if labels[labelKillReason] == "" {
		if _, err := ctr.SetLabels(ctx, map[string]string{labelKillReason: reason}); err != nil {
			return fmt.Errorf("kill job %s: record the reason: %w", ctr.ID(), err)
		}
	}
	c.log.Info("stopping a job", "job", ctr.ID(), "reason", reason, "sigterm_grace", grace)
	exitC, err := task.Wait(ctx)
	if err != nil {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	gone := func(err error) bool { return errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) }
	if grace > 0 {
		if err := task.Kill(ctx, syscall.SIGTERM, client.WithKillAll); err != nil && !gone(err) {
			return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-exitC:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	if err := task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil && !gone(err) {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	select {
	case <-exitC:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Remove kills the job if it still runs, deletes its task, its container and its
// snapshot, and checks that containerd holds none of them any more.
func (c *Containerd) Remove(ctx context.Context, id string) error {
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return err
	}
	c.unwatch(id)
	c.dialNS.forget(id)
	if task, err := ctr.Task(ctx, nil); err == nil {
		if st, err := task.Status(ctx); err == nil && st.Status != client.Stopped {
			c.log.Warn("removing a job that still runs: SIGKILL", "job", id)
		}
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove job %s: delete its task: %w", id, err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove job %s: %w", id, err)
	}
	labels, err := ctr.Labels(ctx)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove job %s: %w", id, err)
	}
	if labels[labelNetns] != "" {
		if err := c.net.detach(ctx, labels[labelNetns]); err != nil {
			return fmt.Errorf("remove job %s: %w", id, err)
		}
	}
	if labels[labelUserns] != "" {
		if err := c.net.pins.unpinNetns(labels[labelUserns]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove job %s: its user namespace: %w", id, err)
		}
	}
	if base, ok := parseUIDBase(labels); ok {
		defer c.releaseUserns(base, id)
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove job %s: delete its container: %w", id, err)
	}
	var left []string
	if _, err := c.client.LoadContainer(ctx, id); !errdefs.IsNotFound(err) {
		left = append(left, "container")
	}
	if _, err := c.client.TaskService().Get(ctx, &tasksapi.GetRequest{ContainerID: id}); !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		left = append(left, "task")
	}
	if _, err := c.client.SnapshotService(c.opts.Snapshotter).Stat(ctx, id); !errdefs.IsNotFound(err) {
		left = append(left, "snapshot")
	}
	if len(left) > 0 {
		return fmt.Errorf("remove job %s: its %s still in containerd namespace %s", id, strings.Join(left, ", "), c.opts.Namespace)
	}
	return nil
}

// List returns every container in the namespace, sorted by ID, with the exit of those
// that ended. Ended tasks have their exit recorded; running ones get a monitor, which
// kills at once those whose wall clock ran out while nobody watched.
func (c *Containerd) List(ctx context.Context) ([]Info, error) {
	ctx = c.ns(ctx)
	ctrs, err := c.client.Containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var out []Info
	for _, ctr := range ctrs {
		in := Info{ID: ctr.ID()}
		info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
		if err != nil {
			return nil, err
		}
		if !c.owns(info.Labels) {
			continue
		}
		if base, ok := parseUIDBase(info.Labels); ok {
			c.mu.Lock()
			if c.uidBases[base] != ctr.ID() {
				c.uidBases[base] = ctr.ID()
				claimUserns(base, c.opts.Namespace+"/"+ctr.ID()) // again after a restart (or still claimed)
			}
			c.mu.Unlock()
		}
		if e, ok, err := exitLabel(info.Labels); err == nil && ok {
			in.Exit = &e
			out = append(out, in)
			continue
		}
		task, err := ctr.Task(ctx, nil)
		if err == nil {
			st, serr := task.Status(ctx)
			switch {
			case serr == nil && st.Status == client.Stopped:
				if e, err := c.exitOf(ctx, ctr, task, st.ExitStatus, st.ExitTime); err == nil {
					in.Exit = &e
				}
			case serr == nil:
				in.Running = true
				c.watch(ctr.ID())
			}
		} else if !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("job %s: %w", ctr.ID(), err)
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
