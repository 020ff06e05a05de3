package sandbox

import (
	"context"
	"fmt"
	"time"
)

// ExtendWallClock lets a running job run by longer than its Spec.WallClock: a lease that
// grew (node/internal/jobs/extend.go). The container's wall-clock label grows by by, and
// the job's monitor, which read the label once when it began, begins again with it.
func (c *Containerd) ExtendWallClock(ctx context.Context, id string, by time.Duration) error {
	if by <= 0 {
		return fmt.Errorf("extend job %s: %s is not a positive duration", id, by)
	}
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return err
	}
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return fmt.Errorf("extend job %s: %w", id, err)
	}
	if labels[labelKillReason] != "" {
		return fmt.Errorf("extend job %s: it is ending (%s)", id, labels[labelKillReason])
	}
	if _, ok, _ := exitLabel(labels); ok {
		return fmt.Errorf("extend job %s: it ended", id)
	}
	wall, err := time.ParseDuration(labels[labelWallClock])
	if err != nil {
		return fmt.Errorf("extend job %s: its %s label is unreadable: %w", id, labelWallClock, err)
	}
	if _, err := ctr.SetLabels(ctx, map[string]string{labelWallClock: (wall + by).String()}); err != nil {
		return fmt.Errorf("extend job %s: %w", id, err)
	}
	c.unwatch(id)
	c.watch(id)
	return nil
}
