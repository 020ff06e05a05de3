package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// ExecUpgrade is the protocol the local API's exec route switches to (POST
// /v1/jobs/{id}/exec with Connection: Upgrade): past the 101 answer, the connection carries
// the frames of /gpunex/job-exec/1.0.0 after the start frame, relayed by the node to and
// from the job's provider (docs/protocols/jobs.md, "Shells").
const ExecUpgrade = "gpunex-exec"

// ConsoleView answers POST /v1/jobs/{id}/console: the dashboard's shell in the job, whose
// output GET /v1/jobs/{id}/console/{id} streams.
type ConsoleView struct {
	ID string `json:"id"`
}

// ConsoleInput is the body of POST /v1/jobs/{id}/console/{cid}/input: text for the shell's
// standard input (a line ends with "\n").
type ConsoleInput struct {
	Data string `json:"data"`
}

// ExecRequest is the body of POST /v1/jobs/{id}/exec: what to run in the job, and whether
// with a terminal of Cols x Rows.
type ExecRequest struct {
	Args []string `json:"args"`
	TTY  bool     `json:"tty,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
}

// ExecIO is where an exec'd process's input comes from and its output goes, and what
// reaches it while it runs.
type ExecIO struct {
	Stdin          io.Reader // nil: empty
	Stdout, Stderr io.Writer
	Resize         <-chan [2]uint16 // a terminal's new columns and rows
	Signal         <-chan string    // a signal's name, one of protocol.ExecSignals
}

// Exec runs a process in a job this node rents, through the node, and returns its exit
// status once it ended (128+N when signal N killed it). The process's input ends when
// x.Stdin does. A refusal is an error of the API's kinds (not found, conflict, rate
// limited).
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest, x ExecIO) (int, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	path := "/v1/jobs/" + url.PathEscape(id) + "/exec"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	hreq.Header.Set("Authorization", "Bearer "+c.token)
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Connection", "Upgrade")
	hreq.Header.Set("Upgrade", ExecUpgrade)
	resp, err := (&http.Client{}).Do(hreq)
	if err != nil {
		return 0, fmt.Errorf("%w: %v (is `gpunex node run` still running?)", ErrNotRunning, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, answerError(http.MethodPost, path, resp, data)
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return 0, errors.New("the node did not open the exec session")
	}
	defer rw.Close()
	return RunExec(rw, x)
}

// RunExec drives an exec session's frames on rw: the renter's input, resizes, signals and
// keepalives out, the process's output and end in. It returns the process's exit code.
func RunExec(rw io.ReadWriteCloser, x ExecIO) (int, error) {
	var mu sync.Mutex
	send := func(typ byte, data []byte) error {
		mu.Lock()
		defer mu.Unlock()
		return protocol.WriteExecFrame(rw, typ, data)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		if x.Stdin != nil {
			buf := make([]byte, protocol.MaxExecData)
			for {
				n, err := x.Stdin.Read(buf)
				if n > 0 && send(protocol.ExecStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					break
				}
			}
		}
		send(protocol.ExecCloseStdin, nil)
	}()
	go func() {
		tick := time.NewTicker(protocol.ExecKeepaliveInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				send(protocol.ExecKeepalive, nil)
			case s := <-x.Resize:
				send(protocol.ExecResize, protocol.ExecSize(s[0], s[1]))
			case sig := <-x.Signal:
				send(protocol.ExecSignal, []byte(sig))
			}
		}
	}()
	in := bufio.NewReader(rw)
	for {
		f, err := protocol.ReadExecFrame(in)
		if err != nil {
			return 0, fmt.Errorf("the shell's session ended without its exit status: %w", err)
		}
		switch f.Type {
		case protocol.ExecStdout:
			if x.Stdout != nil {
				x.Stdout.Write(f.Data)
			}
		case protocol.ExecStderr:
			if x.Stderr != nil {
				x.Stderr.Write(f.Data)
			}
		case protocol.ExecExit:
			e, err := f.Exit()
			return e.Code, err
		case protocol.ExecError:
			m, err := f.Refusal()
			if err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("the shell failed: %s", m.Message)
		default:
			return 0, fmt.Errorf("%w: exec frame %q from the provider", protocol.ErrMalformed, f.Type)
		}
	}
}
