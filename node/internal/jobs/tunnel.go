package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// The job-tunnel stream (/gpunex/job-tunnel/1.0.0), both ends: one TCP connection between
// a job's renter and a port the job declared (docs/protocols/jobs.md, "Job tunnels"). The
// renter opens one stream per connection (DialPort; Forward listens on its loopback and
// dials one per connection it accepts); the provider serves it only to the job's renter,
// while the job runs, to a declared port, within the job's tunnels and transfer budget and
// the peer's rate of opens (HandleTunnel), and connects inside the job's own network
// namespace (sandbox.Runtime.Dial). Then both carry the bytes (pipe), until both sides
// closed their writing half, one side failed, or the job ended.

const (
	// tunnelOpenTimeout bounds a tunnel's opening: the renter's frame, the dial into the
	// job, the answer.
	tunnelOpenTimeout = 10 * time.Second
	// tunnelGrace is how long a tunnel may outlive its job's lease: the job is stopped
	// at the lease's end, which closes its tunnels; this bounds one that was not.
	tunnelGrace = time.Minute
	// tunnelBuffer is what each direction of a tunnel reads at once.
	tunnelBuffer = 64 << 10
)

// tunnelGuard bounds the tunnels each peer and each network opens, before anything is read
// of them.
type tunnelGuard struct {
	peers *p2p.PeerBudget
	nets  *p2p.NetworkBudget
}

func newTunnelGuard(cfg config.JobsConfig, trusted []peer.ID) *tunnelGuard {
	n := max(cfg.TunnelsPerMinute, 1)
	return &tunnelGuard{peers: p2p.NewPeerBudget(n, n), nets: p2p.NewNetworkBudget(float64(4*n), float64(4*n), trusted...)}
}

// errTunnelRate and errNotDeclared are refusals counted under outcomes of their own.
var (
	errTunnelRate  = errors.New("too many tunnels opened in the last minute: slow down")
	errNotDeclared = errors.New("not a port the job declared")
)

// The provider's end.

// HandleTunnel serves a renter's connection to a port its running job declared.
func (r *Runner) HandleTunnel(s network.Stream) {
	remote := s.Conn().RemotePeer()
	s.SetDeadline(time.Now().Add(tunnelOpenTimeout))
	refuse := func(code string, err error) {
		switch {
		case errors.Is(err, errTunnelRate):
			r.metrics.JobSessions.WithLabelValues("tunnel", "rate_limited").Inc()
		case errors.Is(err, errNotDeclared):
			r.metrics.JobSessions.WithLabelValues("tunnel", "port").Inc()
		case errors.Is(err, sandbox.ErrPortClosed):
			r.metrics.JobSessions.WithLabelValues("tunnel", "closed").Inc()
		default:
			r.refuseSession("tunnel", err)
		}
		protocol.WriteJSONFrame(s, protocol.TunnelAnswer{Code: code, Error: err.Error()})
		s.Close()
	}
	now := time.Now()
	if !r.tunnels.peers.Spend(remote, now) || !r.tunnels.nets.Take(s.Conn(), now, 1) {
		refuse(protocol.TunnelRateLimited, errTunnelRate)
		return
	}
	in := bufio.NewReader(s)
	o, err := protocol.ReadTunnelOpen(in)
	if err != nil {
		refuse(protocol.TunnelError, err)
		return
	}
	j, lease, err := r.tunnelJob(remote, o)
	if err != nil {
		refuse(tunnelCode(err), err)
		return
	}
	budget := r.cfg.TunnelGBPerJob * 1e9
	if !r.sessions.spend(j.ID, 0, budget) {
		refuse(protocol.TunnelLimit, fmt.Errorf("%w: the job's tunnels carried the %d GB this provider allows a job", ErrSessionLimit, r.cfg.TunnelGBPerJob))
		return
	}
	release, err := r.sessions.acquire(j.ID, "tunnel", r.cfg.MaxTunnels)
	if err != nil {
		refuse(protocol.TunnelLimit, err)
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), tunnelOpenTimeout)
	conn, err := r.rt.Dial(ctx, j.ID, o.Port)
	cancel()
	if err != nil {
		if !errors.Is(err, sandbox.ErrPortClosed) {
			r.log.Info("a tunnel into a job failed", "job", j.ID, "port", o.Port, "err", err)
			err = fmt.Errorf("the job's port %d cannot be reached", o.Port)
		}
		refuse(protocol.TunnelClosed, err)
		return
	}
	defer conn.Close()
	// The job's end closes its tunnels; one that ended while this one opened was
	// forgotten before its closer was there, hence the second look.
	drop := r.sessions.onEnd(j.ID, func() { s.Reset(); conn.Close() })
	defer drop()
	if _, err := r.sessionJob(remote, j.ID); err != nil {
		refuse(tunnelCode(err), err)
		return
	}
	// Counted before the answer, so that a renter that has its tunnel finds it counted.
	r.metrics.JobSessions.WithLabelValues("tunnel", "opened").Inc()
	if err := protocol.WriteJSONFrame(s, protocol.TunnelAnswer{OK: true}); err != nil {
		s.Reset()
		return
	}
	// An idle tunnel may stay (a notebook left open), until the lease ends.
	s.SetDeadline(time.Now().Add(lease.EndsAt.Sub(r.clock.Now()) + tunnelGrace))
	err = pipe(s, in, conn, func(n int64) bool { return r.sessions.spend(j.ID, n, budget) })
	if errors.Is(err, errTunnelBudget) {
		r.log.Info("a job's tunnels spent its transfer budget", "job", j.ID, "gb", r.cfg.TunnelGBPerJob)
	}
}

// tunnelJob returns the running job a tunnel names, with its lease, when remote rents it
// and it declared the port.
func (r *Runner) tunnelJob(remote peer.ID, o protocol.TunnelOpen) (ledger.Job, *protocol.Lease, error) {
	j, err := r.sessionJob(remote, o.Job)
	if err != nil {
		return j, nil, err
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return j, nil, err
	}
	if !slices.Contains(l.Ports, o.Port) {
		return j, nil, fmt.Errorf("%w: port %d (job %s declared %s)", errNotDeclared, o.Port, j.ID, portList(l.Ports))
	}
	return j, l, nil
}

// tunnelCode is the refusal code of a session error.
func tunnelCode(err error) string {
	switch {
	case errors.Is(err, ErrNotYourJob):
		return protocol.TunnelNotRenter
	case errors.Is(err, ErrJobNotRunning):
		return protocol.TunnelNotRunning
	case errors.Is(err, errNotDeclared):
		return protocol.TunnelPort
	case errors.Is(err, ErrSessionLimit):
		return protocol.TunnelLimit
	}
	return protocol.TunnelError
}

func portList(ports []int) string {
	if len(ports) == 0 {
		return "no port"
	}
	return fmt.Sprint(ports)
}

// Both ends.

// errTunnelBudget ends a tunnel whose job spent its transfer budget.
var errTunnelBudget = errors.New("the job's tunnels spent their transfer budget")

// pipe carries a tunnel's bytes between its stream s (read through in) and the connection
// conn, both ways, until both directions ended: the end of one side's writing is passed on
// to the other (half-close). An error in either direction, or count refusing the bytes of
// a read (nil counts nothing), resets both. It returns the first error.
func pipe(s network.Stream, in io.Reader, conn net.Conn, count func(n int64) bool) error {
	errs := make(chan error, 2)
	go func() { errs <- copyHalf(conn, in, count, func() error { return closeWrite(conn) }) }()
	go func() { errs <- copyHalf(s, conn, count, s.CloseWrite) }()
	var first error
	for range 2 {
		if err := <-errs; err != nil && first == nil {
			first = err
			s.Reset()
			conn.Close()
		}
	}
	if first == nil {
		s.Close()
		conn.Close()
	}
	return first
}

// copyHalf copies one direction of a tunnel and, at the end of src, closes dst for writing.
func copyHalf(dst io.Writer, src io.Reader, count func(n int64) bool, closeWrite func() error) error {
	buf := make([]byte, tunnelBuffer)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if count != nil && !count(int64(n)) {
				return errTunnelBudget
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return closeWrite()
		}
		if err != nil {
			return err
		}
	}
}

// closeWrite closes a connection for writing where it can be (TCP, a tunnel), and whole
// where it cannot.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// The renter's end.

// DialPort opens a tunnel to a port of a running job this node rented, and returns it as
// a connection.
func (r *Renter) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	j, prov, err := r.tunnelTarget(id, port)
	if err != nil {
		return nil, err
	}
	s, err := r.peer.OpenStream(ctx, prov, protocol.JobTunnelProtocol)
	if err != nil {
		return nil, fmt.Errorf("reach provider %s: %w", prov, err)
	}
	s.SetDeadline(time.Now().Add(tunnelOpenTimeout))
	if err := protocol.WriteJSONFrame(s, protocol.TunnelOpen{Job: j.ID, Port: port}); err != nil {
		s.Reset()
		return nil, err
	}
	in := bufio.NewReader(s)
	if err := protocol.ReadTunnelAnswer(in); err != nil {
		s.Reset()
		return nil, err
	}
	s.SetDeadline(time.Time{})
	return &tunnelConn{Stream: s, in: in, port: port}, nil
}

// CheckPort says whether a tunnel to the job's port may be asked for now: a job this node
// rented, running, that declared the port (the dashboard checks before it opens a page).
func (r *Renter) CheckPort(id string, port int) error {
	_, _, err := r.tunnelTarget(id, port)
	return err
}

// tunnelTarget returns a job this node rented, running and declaring port, and its
// provider.
func (r *Renter) tunnelTarget(id string, port int) (ledger.Job, peer.ID, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return j, "", err
	}
	if j.Side != "renter" {
		return j, "", api.Invalid(fmt.Errorf("job %s runs here: only its renter reaches its ports", id))
	}
	p, err := openProposal(j.Proposal)
	if err != nil {
		return j, "", err
	}
	if !slices.Contains(p.Ports, port) {
		return j, "", api.Invalid(fmt.Errorf("job %s declared %s, not port %d (gpunex job run --port %d)", id, portList(p.Ports), port, port))
	}
	if j.State != ledger.JobRunning {
		return j, "", api.Conflict(fmt.Errorf("job %s is %s: its ports are reached while it runs", id, j.State))
	}
	prov, err := peer.Decode(j.Peer)
	return j, prov, err
}

// tunnelConn is a tunnel as a connection: reads come through the reader that took the
// provider's answer (it may hold the first bytes of the job's).
type tunnelConn struct {
	network.Stream
	in   *bufio.Reader
	port int
}

func (c *tunnelConn) Read(b []byte) (int, error) { return c.in.Read(b) }
func (c *tunnelConn) LocalAddr() net.Addr        { return tunnelAddr("local") }
func (c *tunnelConn) RemoteAddr() net.Addr {
	return tunnelAddr(fmt.Sprintf("%s/port/%d", c.Conn().RemotePeer(), c.port))
}

// tunnelAddr names an end of a tunnel.
type tunnelAddr string

func (a tunnelAddr) Network() string { return protocol.JobTunnelProtocol }
func (a tunnelAddr) String() string  { return string(a) }

// forwardCheck is how often a forward looks whether its job still runs.
const forwardCheck = 5 * time.Second

// ErrForwardEnded ends a forward whose job no longer runs (or is no longer this renter's).
var ErrForwardEnded = errors.New("the job's port can no longer be reached")

// Forward listens on local, a loopback address ("": 127.0.0.1 and the job's port number,
// or any free port when that one is taken), until ctx ends or the job stops running, and
// carries each connection accepted there over its own tunnel to port of job id. ready is
// called with the address listened on once connections are accepted. It returns nil when
// ctx ends, and why otherwise.
func (r *Renter) Forward(ctx context.Context, id string, port int, local string, ready func(addr string)) error {
	if _, _, err := r.tunnelTarget(id, port); err != nil {
		return err
	}
	ln, err := listenLoopback(local, port)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	context.AfterFunc(ctx, func() { ln.Close() })
	ready(ln.Addr().String())
	go r.watchForward(ctx, id, stop)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				return err
			}
			if cause := context.Cause(ctx); errors.Is(cause, ErrForwardEnded) {
				return cause
			}
			return nil // the caller is gone
		}
		go r.forwardOne(ctx, id, port, c, stop)
	}
}

// listenLoopback listens on local, which must be a loopback address; "" tries 127.0.0.1
// and port, then any free port.
func listenLoopback(local string, port int) (net.Listener, error) {
	if local == "" {
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return ln, nil
		}
		local = "127.0.0.1:0"
	}
	if err := config.CheckLoopback(local); err != nil {
		return nil, api.Invalid(fmt.Errorf("forward from %s: %w", local, err))
	}
	ln, err := net.Listen("tcp", local)
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("forward from %s: %w", local, err))
	}
	return ln, nil
}

// forwardOne carries one accepted connection over its own tunnel. A provider saying the
// job is no longer this renter's or no longer runs ends the whole forward.
func (r *Renter) forwardOne(ctx context.Context, id string, port int, c net.Conn, stop context.CancelCauseFunc) {
	dctx, cancel := context.WithTimeout(ctx, tunnelOpenTimeout+jobStepTimeout)
	t, err := r.DialPort(dctx, id, port)
	cancel()
	if err != nil {
		c.Close()
		var refusal *protocol.TunnelRefusal
		if errors.As(err, &refusal) && (refusal.Code == protocol.TunnelNotRunning || refusal.Code == protocol.TunnelNotRenter) ||
			errors.Is(err, api.ErrConflict) {
			stop(fmt.Errorf("%w: %v", ErrForwardEnded, err))
		} else if ctx.Err() == nil {
			r.log.Info("a forwarded connection could not be carried", "job", id, "port", port, "err", err)
		}
		return
	}
	tc := t.(*tunnelConn)
	unhook := context.AfterFunc(ctx, func() { tc.Reset(); c.Close() })
	defer unhook()
	pipe(tc.Stream, tc.in, c, nil)
}

// watchForward ends a forward once the renter's ledger says its job stopped running.
func (r *Renter) watchForward(ctx context.Context, id string, stop context.CancelCauseFunc) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(forwardCheck):
		}
		if j, err := r.ledger.GetJob(id); err != nil || j.State != ledger.JobRunning {
			state := "gone"
			if err == nil {
				state = j.State
			}
			stop(fmt.Errorf("%w: job %s is %s", ErrForwardEnded, id, state))
			return
		}
	}
}
