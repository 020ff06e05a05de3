package node

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// A shell in a rented job (`gpunex job exec`): POST /v1/jobs/{id}/exec opens the exec
// session with the job's provider and, once the process runs, switches the connection to
// api.ExecUpgrade; the node then relays the exec frames both ways, byte for byte, until
// either end closes (the CLI gone resets the provider's stream, which kills the process).

func (a *APIServer) execRoutes() []apiRoute {
	return []apiRoute{{pattern: "POST /v1/jobs/{id}/exec", stream: a.jobExec}}
}

// maxExecRequest bounds an exec request's body (its command line).
const maxExecRequest = 64 << 10

func (a *APIServer) jobExec(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.ExecUpgrade) {
		return api.Invalid(errors.New("an exec is an upgrade to " + api.ExecUpgrade + " (Connection: Upgrade)"))
	}
	var req api.ExecRequest
	if err := decodeBody(r, maxExecRequest, &req); err != nil {
		return err
	}
	if len(req.Args) == 0 || req.Args[0] == "" {
		return api.Invalid(errors.New("exec: no command"))
	}
	if req.Cols > protocol.MaxExecTerminal || req.Rows > protocol.MaxExecTerminal {
		return api.Invalid(errors.New("exec: a terminal of at most 4096 columns and rows"))
	}
	s, err := a.n.renter.OpenExec(r.Context(), id, protocol.ExecStartMsg{Args: req.Args, TTY: req.TTY, Cols: req.Cols, Rows: req.Rows})
	if err != nil {
		return err
	}
	if cw, ok := w.(*countingWriter); ok {
		w = cw.ResponseWriter // the connection's own writer, which hijacks
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.Close()
		return err
	}
	conn.SetDeadline(time.Time{}) // a shell idles as long as its user; the provider's keepalives bound it
	go relayExec(conn, buf, s)
	return nil
}

// relayExec answers 101 and copies the CLI's frames to the provider's stream and back, until
// one side ends.
func relayExec(conn io.ReadWriteCloser, buf *bufio.ReadWriter, s io.ReadWriteCloser) {
	defer conn.Close()
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.ExecUpgrade + "\r\n\r\n")
	if buf.Flush() != nil {
		resetStream(s)
		return
	}
	fromCLI := make(chan struct{})
	go func() {
		defer close(fromCLI)
		if _, err := io.Copy(s, buf.Reader); err != nil {
			resetStream(s) // the CLI is gone mid-session: the provider kills the process
		}
	}()
	io.Copy(conn, s) // the provider's frames, up to its exit frame and the stream's end
	conn.Close()
	s.Close()
	<-fromCLI
}

// resetStream resets a libp2p stream (a renter gone, not ended), or closes any other.
func resetStream(s io.Closer) {
	if r, ok := s.(interface{ Reset() error }); ok {
		r.Reset()
		return
	}
	s.Close()
}
