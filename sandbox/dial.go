package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
)

// A job's ports are reached from inside its own network namespace: the runtime makes the
// socket there (dialIn) and connects it to 127.0.0.1:PORT of that namespace, so that a job
// listening on 0.0.0.0 or on 127.0.0.1 is reached alike, with or without egress. Nothing
// is published on the host's network and no firewall rule is added: the socket belongs to
// the job's namespace, and only the process that made it holds it.

// ErrPortClosed is returned by Dial when nothing in the job listens on the port.
var ErrPortClosed = errors.New("nothing in the job listens on that port")

// Dial connects to a TCP port of a running job, inside the job's network namespace.
func (c *Containerd) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: out of range 1-65535", port)
	}
	ns, err := c.dialNS.get(id, func() (int, error) { return c.runningPid(ctx, id) })
	if err != nil {
		return nil, err
	}
	conn, err := dialIn(ctx, ns, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if isRefused(err) {
			return nil, fmt.Errorf("job %s, port %d: %w", id, port, ErrPortClosed)
		}
		return nil, fmt.Errorf("job %s, port %d: %w", id, port, err)
	}
	return conn, nil
}

// runningPid returns the pid of a running job's first process (ErrNotFound when the
// runtime does not hold the job or it has ended).
func (c *Containerd) runningPid(ctx context.Context, id string) (int, error) {
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return 0, err
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return 0, fmt.Errorf("%w: job %s has ended", ErrNotFound, id)
	}
	if err != nil {
		return 0, fmt.Errorf("job %s: %w", id, err)
	}
	st, err := task.Status(ctx)
	if err != nil || st.Status != client.Running {
		return 0, fmt.Errorf("%w: job %s is not running", ErrNotFound, id)
	}
	return int(task.Pid()), nil
}
