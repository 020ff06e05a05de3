package sandbox

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// How often the monitor of a running job measures its log (a stat) and its /output (a
// walk of the folder).
const (
	logCheckEvery    = 200 * time.Millisecond
	outputCheckEvery = time.Second
	// outputWalkShare: the next walk of /output waits at least this many times as long as
	// the last one took, so that walking a large tree takes a tenth of a CPU at most.
	outputWalkShare = 10
)

// minEntryBytes is what each file, folder or link in /output counts at least: one block,
// what most file systems allocate for a small file, and a bound on the inodes a job
// takes: at most ScratchBytes/4096 entries (an empty file allocates no block at all).
const minEntryBytes = 4096

type monitor struct{ cancel context.CancelFunc }

// watch starts the monitor of a job unless one runs.
func (c *Containerd) watch(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil || c.monitors[id] != nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	m := &monitor{cancel: cancel}
	c.monitors[id] = m
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			cancel()
			c.mu.Lock()
			if c.monitors[id] == m {
				delete(c.monitors, id)
			}
			c.mu.Unlock()
		}()
		if err := c.monitor(ctx, id); err != nil && ctx.Err() == nil {
			c.log.Warn("watching a job failed: its limits are enforced again by the next Wait or List", "job", id, "err", err)
		}
	}()
}

// unwatch stops the monitor of a job.
func (c *Containerd) unwatch(id string) {
	c.mu.Lock()
	m := c.monitors[id]
	delete(c.monitors, id)
	c.mu.Unlock()
	if m != nil {
		m.cancel()
	}
}

// monitor enforces a running job's wall clock and output limit, and records its exit.
func (c *Containerd) monitor(ctx context.Context, id string) error {
	ctr, err := c.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	info, err := ctr.Info(ctx)
	if err != nil {
		return err
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return err
	}
	exitC, err := task.Wait(ctx)
	if err != nil {
		return err
	}
	if info.Labels[labelJob] == "" || !c.owns(info.Labels) {
		return nil // not ours: nothing to enforce
	}
	wall, err := time.ParseDuration(info.Labels[labelWallClock])
	if err != nil {
		return fmt.Errorf("the job's %s label is unreadable: %w", labelWallClock, err)
	}
	deadline := time.NewTimer(time.Until(startedAt(info.Labels, info.CreatedAt).Add(wall)))
	defer deadline.Stop()
	outDir, logPath := info.Labels[labelOutputDir], info.Labels[labelLogPath]
	outMax, _ := strconv.ParseInt(info.Labels[labelOutputMax], 10, 64)
	logMax, _ := strconv.ParseInt(info.Labels[labelLogMax], 10, 64)
	ticker := time.NewTicker(logCheckEvery)
	defer ticker.Stop()
	tick := ticker.C
	nextOutputCheck := time.Now().Add(outputCheckEvery)
	for {
		select {
		case <-ctx.Done():
			return nil
		case st := <-exitC:
			if err := st.Error(); err != nil {
				return err
			}
			_, err := c.exitOf(ctx, ctr, task, st.ExitCode(), st.ExitTime())
			return err
		case <-deadline.C:
			c.log.Info("killing a job at its wall-clock limit", "job", id, "wallclock", wall)
			if err := c.kill(ctx, ctr, ReasonTimeout, c.opts.KillGrace); err != nil {
				return err
			}
		case <-tick:
			reason := ""
			if outDir != "" && outMax > 0 && time.Now().After(nextOutputCheck) {
				began := time.Now()
				used, entries := diskUsage(outDir, outMax)
				nextOutputCheck = time.Now().Add(max(outputCheckEvery, outputWalkShare*time.Since(began)))
				if used > outMax {
					reason = ReasonOutputLimit
					c.log.Info("killing a job whose output is over its limit", "job", id, "bytes", used, "entries", entries, "limit", outMax)
				}
			}
			if logPath != "" {
				state := readLogState(logPath)
				// (Jobs logged by an earlier build of the logger leave mark files instead.)
				if why, err := os.ReadFile(logPath + ".error"); err == nil && state == "" {
					state = stateError + string(why)
				} else if _, err := os.Stat(logPath + ".over"); err == nil && state == "" {
					state = stateOver
				}
				if strings.HasPrefix(state, stateError) {
					reason = ReasonLogFailed
					c.log.Warn("killing a job whose log cannot be written", "job", id, "log", logPath, "err", strings.TrimPrefix(state, stateError))
				} else if state == stateOver {
					reason = ReasonLogLimit
					c.log.Info("killing a job that printed more than its log limit", "job", id, "limit", logMax)
				} else if st, err := os.Stat(logPath); err == nil && logMax > 0 && st.Size() > logMax {
					// A job started by a version whose shim wrote the log itself.
					reason = ReasonLogLimit
					c.log.Info("killing a job whose log is over its limit", "job", id, "bytes", st.Size(), "limit", logMax)
				}
			}
			if reason != "" { // abuse: no grace
				tick = nil
				if err := c.kill(ctx, ctr, reason, 0); err != nil {
					return err
				}
			}
		}
	}
}

// diskUsage returns the disk space the files below dir use, each file, folder or link
// counted at least minEntryBytes, and how many there are, counting up to just past limit.
// Symbolic links are not followed.
func diskUsage(dir string, limit int64) (used, entries int64) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		entries++
		size := int64(minEntryBytes)
		if info, err := d.Info(); err == nil {
			size = max(size, allocated(info))
		}
		if used += size; used > limit {
			return filepath.SkipAll
		}
		return nil
	})
	return used, entries
}
