package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// jobNetNamespaces holds a handle on the network namespace of each job dialled into, from
// the first Dial until Remove: a Dial then costs no call to containerd.
type jobNetNamespaces struct {
	mu  sync.Mutex
	fds map[string]*os.File
}

// get returns the handle of job id's network namespace, opened the first time through
// the job's first process (pid asks the runtime for it).
func (n *jobNetNamespaces) get(id string, pid func() (int, error)) (*os.File, error) {
	n.mu.Lock()
	f := n.fds[id]
	n.mu.Unlock()
	if f != nil {
		return f, nil
	}
	p, err := pid()
	if err != nil {
		return nil, err
	}
	f, err = os.Open(fmt.Sprintf("/proc/%d/ns/net", p))
	if err != nil {
		return nil, fmt.Errorf("%w: job %s: its network namespace: %v", ErrNotFound, id, err)
	}
	// A pid is given to another process once its own ended: the job still runs with it
	// after the namespace was opened, so that namespace is the job's.
	if again, err := pid(); err != nil || again != p {
		f.Close()
		return nil, fmt.Errorf("%w: job %s ended", ErrNotFound, id)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if held := n.fds[id]; held != nil {
		f.Close()
		return held, nil
	}
	if n.fds == nil {
		n.fds = map[string]*os.File{}
	}
	n.fds[id] = f
	return f, nil
}

// forget lets a removed job's namespace go.
func (n *jobNetNamespaces) forget(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f := n.fds[id]; f != nil {
		f.Close() // the descriptor closes once no Dial holds it (dialIn holds it through Control)
		delete(n.fds, id)
	}
}

// closeAll lets every namespace go (Close).
func (n *jobNetNamespaces) closeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, f := range n.fds {
		f.Close()
		delete(n.fds, id)
	}
}

// dialIn connects to addr from inside the network namespace ns: the socket is made there
// by a thread that enters the namespace for the dial only.
func dialIn(ctx context.Context, ns *os.File, addr string) (net.Conn, error) {
	raw, err := ns.SyscallConn()
	if err != nil {
		return nil, err
	}
	var conn net.Conn
	var dialErr error
	// Control keeps the handle open (forget waits) while the namespace is entered.
	if err := raw.Control(func(fd uintptr) { conn, dialErr = dialInNamespace(ctx, int(fd), addr) }); err != nil {
		return nil, fmt.Errorf("%w: the job's network namespace was let go", ErrNotFound)
	}
	return conn, dialErr
}

// dialInNamespace enters the network namespace nsfd on a thread of its own, dials addr
// there and comes back. It runs on a goroutine of its own: a thread that cannot come back
// stays locked, so that it ends with that goroutine rather than serve others (or the
// caller) from the job's namespace. (The Go runtime starts new threads from a clean
// template thread, never from a locked one.)
func dialInNamespace(ctx context.Context, nsfd int, addr string) (net.Conn, error) {
	type dialed struct {
		conn net.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- dialed{nil, fmt.Errorf("the node's network namespace: %w", err)}
			return
		}
		defer own.Close()
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- dialed{nil, fmt.Errorf("enter the job's network namespace: %w", err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp4", addr)
		if serr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); serr != nil {
			if conn != nil {
				conn.Close()
			}
			done <- dialed{nil, fmt.Errorf("come back from the job's network namespace: %w", serr)}
			return
		}
		runtime.UnlockOSThread()
		done <- dialed{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
