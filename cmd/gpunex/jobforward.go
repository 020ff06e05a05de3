package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

// `gpunex job forward`: a running job's declared port on this machine's loopback. Each
// connection accepted there travels through the node's API (a tunnel upgrade, one per
// connection) and its own job tunnel to the provider, which connects it inside the job.

func jobForwardCommand() *cobra.Command {
	var local string
	c := &cobra.Command{
		Use:   "forward JOB PORT [--local 127.0.0.1:N]",
		Short: "Reach a port your running job declared (--port) from this machine's loopback, until the job ends",
		Long: "Listen on this machine's loopback (127.0.0.1 and the job's port number, or a free port when that one is\n" +
			"taken) and carry each connection to the job's port over the peer-to-peer link to its provider: nothing is\n" +
			"published on the provider's network and only you, the job's renter, reach it. Ends with the job, or Ctrl-C.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return fmt.Errorf("port %q: a number 1-65535", args[1])
			}
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			return forwardPort(cmd.Context(), cl, args[0], port, local, cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&local, "local", "", "loopback address to listen on (default 127.0.0.1:PORT, or a free port when it is taken)")
	return c
}

// jobRunning is a running job's state (ledger.JobRunning: the CLI links no ledger).
const jobRunning = "running"

// errForwardEnded ends a forward whose job is no longer running.
var errForwardEnded = errors.New("the job is no longer running")

// forwardPort listens on local (a loopback address; "": 127.0.0.1:port, or any free port)
// and carries each connection to port of job id, until ctx ends (nil) or the job is no
// longer running. It says the address listened on to errOut.
func forwardPort(ctx context.Context, cl *api.Client, id string, port int, local string, errOut io.Writer) error {
	v, err := cl.Job(ctx, id)
	if err != nil {
		return err
	}
	if v.State != jobRunning {
		return fmt.Errorf("job %s is %s: its ports are reached while it runs", id, v.State)
	}
	ln, err := listenLocal(local, port)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	context.AfterFunc(ctx, func() { ln.Close() })
	fmt.Fprintf(errOut, "port %d of job %s: http://%s (forwarded from %s)\n", port, id, ln.Addr(), ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				return err
			}
			if cause := context.Cause(ctx); errors.Is(cause, errForwardEnded) {
				fmt.Fprintf(errOut, "port %d of job %s: no longer forwarded: %v\n", port, id, cause)
				return cause
			}
			return nil
		}
		go func() {
			t, err := cl.DialTunnel(ctx, id, port)
			if err != nil {
				c.Close()
				if v, jerr := cl.Job(ctx, id); jerr == nil && v.State != jobRunning {
					stop(fmt.Errorf("%w (it is %s)", errForwardEnded, v.State))
				} else if ctx.Err() == nil {
					fmt.Fprintf(errOut, "port %d of job %s: a connection could not be carried: %v\n", port, id, err)
				}
				return
			}
			unhook := context.AfterFunc(ctx, func() { t.Close(); c.Close() })
			defer unhook()
			api.Splice(c, t)
		}()
	}
}

// listenLocal listens on local, which must be a loopback address; "" tries 127.0.0.1:port,
// then any free port.
func listenLocal(local string, port int) (net.Listener, error) {
	if local == "" {
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return ln, nil
		}
		local = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(local)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		return nil, fmt.Errorf("--local %s: a loopback address and port, such as 127.0.0.1:18000", local)
	}
	return net.Listen("tcp", local)
}
