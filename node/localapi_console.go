package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// A shell in a rented job from the dashboard. A browser cannot upgrade a connection the way
// `gpunex job exec` does, so the node holds the exec session (the same one, over
// /gpunex/job-exec, without a terminal) and the page drives it with plain requests:
// POST /v1/jobs/{id}/console opens it, GET .../console/{cid} streams its output until the
// process ends, POST .../console/{cid}/input sends a line, DELETE closes it. The session
// ends with its output's reader: a page closed or gone kills the shell.

// maxConsoles bounds the shells the dashboard holds open at once on a node.
const maxConsoles = 8

// consoleAttach is how long an opened console waits for its output's reader.
const consoleAttach = time.Minute

type console struct {
	job    string
	stdin  *io.PipeWriter
	out    chan []byte
	done   chan struct{} // closed when the process ended or the session failed
	closed chan struct{} // closed when the session is closed (its reader gone)
	code   int
	err    error
	close  func()
	reader sync.Mutex // held by the one reader of the output
}

// consoleOut carries the process's output to the console's reader, until the console is
// closed (then the output has nowhere to go, and the session ends).
type consoleOut struct {
	ch     chan []byte
	closed chan struct{}
}

func (o consoleOut) Write(b []byte) (int, error) {
	select {
	case o.ch <- append([]byte(nil), b...):
		return len(b), nil
	case <-o.closed:
		return 0, io.ErrClosedPipe
	}
}

func (a *APIServer) consoleRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "POST /v1/jobs/{id}/console", answer: a.openConsole},
		{pattern: "GET /v1/jobs/{id}/console/{cid}", stream: a.consoleOutput},
		{pattern: "POST /v1/jobs/{id}/console/{cid}/input", answer: a.consoleInput},
		{pattern: "DELETE /v1/jobs/{id}/console/{cid}", answer: a.closeConsole},
	}
}

// openConsole starts `sh -i` in the running job (the job's user, namespaces and limits, as
// every exec) and answers the console's id.
func (a *APIServer) openConsole(r *http.Request) (any, error) {
	id, err := jobID(r)
	if err != nil {
		return nil, err
	}
	a.consolesMu.Lock()
	n := len(a.consoles)
	a.consolesMu.Unlock()
	if n >= maxConsoles {
		return nil, fmt.Errorf("%w: %d shells are open on this node: close one first", api.ErrRateLimited, n)
	}
	// The session outlives this request: it ends with its reader, or with its process.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	s, err := a.n.renter.OpenExec(octx, id, protocol.ExecStartMsg{Args: []string{"sh", "-i"}})
	ocancel()
	if err != nil {
		cancel()
		return nil, err
	}
	pr, pw := io.Pipe()
	c := &console{job: id, stdin: pw, out: make(chan []byte, 64), done: make(chan struct{}), closed: make(chan struct{})}
	c.close = sync.OnceFunc(func() {
		close(c.closed)
		pw.Close()
		resetStream(s) // the provider kills the process
		cancel()
	})
	b := make([]byte, 16)
	rand.Read(b)
	cid := hex.EncodeToString(b)
	a.consolesMu.Lock()
	a.consoles[cid] = c
	a.consolesMu.Unlock()
	go func() {
		out := consoleOut{ch: c.out, closed: c.closed}
		c.code, c.err = api.RunExec(s, api.ExecIO{Stdin: pr, Stdout: out, Stderr: out})
		close(c.done)
		s.Close()
	}()
	go func() { // nobody came for the output: the page is gone
		select {
		case <-time.After(consoleAttach):
			if c.reader.TryLock() {
				c.reader.Unlock()
				a.dropConsole(cid, c)
			}
		case <-c.done:
		}
	}()
	return api.ConsoleView{ID: cid}, nil
}

// dropConsole ends a console's session and forgets it.
func (a *APIServer) dropConsole(cid string, c *console) {
	c.close()
	a.consolesMu.Lock()
	if a.consoles[cid] == c {
		delete(a.consoles, cid)
	}
	a.consolesMu.Unlock()
}

// consoleOf returns the console a route names, of the job it names.
func (a *APIServer) consoleOf(r *http.Request) (string, *console, error) {
	id, err := jobID(r)
	if err != nil {
		return "", nil, err
	}
	cid := r.PathValue("cid")
	a.consolesMu.Lock()
	c := a.consoles[cid]
	a.consolesMu.Unlock()
	if c == nil || c.job != id {
		return "", nil, fmt.Errorf("%w: no shell %q in job %s (it ended, or its page closed)", api.ErrNotFound, cid, id)
	}
	return cid, c, nil
}

// consoleOutput streams a console's output as it comes, then a last line with the
// process's exit status; the reader gone ends the session.
func (a *APIServer) consoleOutput(w http.ResponseWriter, r *http.Request) error {
	cid, c, err := a.consoleOf(r)
	if err != nil {
		return err
	}
	if !c.reader.TryLock() {
		return api.Conflict(errors.New("this shell's output is read by another page"))
	}
	defer c.reader.Unlock()
	defer a.dropConsole(cid, c)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	w.WriteHeader(http.StatusOK)
	flush()
	for {
		select {
		case b := <-c.out:
			if _, err := w.Write(b); err != nil {
				return nil
			}
			flush()
		case <-c.done:
			for len(c.out) > 0 {
				w.Write(<-c.out)
			}
			if c.err != nil {
				fmt.Fprintf(w, "\n[the shell ended: %v]\n", c.err)
			} else {
				fmt.Fprintf(w, "\n[exit %d]\n", c.code)
			}
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

// consoleInput sends text to a console's standard input.
func (a *APIServer) consoleInput(r *http.Request) (any, error) {
	_, c, err := a.consoleOf(r)
	if err != nil {
		return nil, err
	}
	var req api.ConsoleInput
	if err := decodeBody(r, protocol.MaxExecData, &req); err != nil {
		return nil, err
	}
	written := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c.stdin, req.Data)
		written <- err
	}()
	select {
	case err := <-written:
		if err != nil {
			return nil, api.Conflict(errors.New("the shell has ended"))
		}
	case <-c.done:
		return nil, api.Conflict(errors.New("the shell has ended"))
	case <-time.After(10 * time.Second):
		return nil, api.Conflict(errors.New("the shell does not read its input"))
	}
	return map[string]bool{"sent": true}, nil
}

// closeConsole ends a console's session (the provider kills the process).
func (a *APIServer) closeConsole(r *http.Request) (any, error) {
	cid, c, err := a.consoleOf(r)
	if err != nil {
		return nil, err
	}
	a.dropConsole(cid, c)
	return map[string]bool{"closed": true}, nil
}
