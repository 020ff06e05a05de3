package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpunex/gpunex/protocol"
)

// execServer is a node's exec route as the CLI sees it: a refusal as JSON, or the upgrade
// and then serve's frames.
func execServer(t *testing.T, serve func(in *bufio.Reader, out *bufio.ReadWriter)) *Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != ExecUpgrade || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":"no upgrade"}`, http.StatusBadRequest)
			return
		}
		if strings.Contains(r.URL.Path, "0000000000000000") {
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":"the job is not running"}`))
			return
		}
		var req ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Args[0] != "sh" {
			t.Errorf("the exec request: %+v %v", req, err)
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + ExecUpgrade + "\r\n\r\n")
		buf.Flush()
		serve(buf.Reader, buf)
	}))
	t.Cleanup(srv.Close)
	return &Client{Base: srv.URL, token: "tok", hc: srv.Client()}
}

// TestExecClient: the CLI's side of a shell passes its input, then its end; a resize and a
// signal reach the process as frames; stdout and stderr come apart; the exit status comes
// back. A refusal keeps its kind.
func TestExecClient(t *testing.T) {
	var got []string
	cl := execServer(t, func(in *bufio.Reader, out *bufio.ReadWriter) {
		for {
			f, err := protocol.ReadExecFrame(in)
			if err != nil {
				return
			}
			got = append(got, string(f.Type)+string(f.Data))
			switch f.Type {
			case protocol.ExecCloseStdin:
				protocol.WriteExecFrame(out, protocol.ExecStdout, []byte("out"))
				out.Flush()
			case protocol.ExecResize:
				protocol.WriteExecFrame(out, protocol.ExecStderr, []byte("err"))
				out.Flush()
			case protocol.ExecSignal:
				protocol.WriteExecJSON(out, protocol.ExecExit, protocol.ExecExitMsg{Code: 130})
				out.Flush()
				return
			}
		}
	})
	resize, signals := make(chan [2]uint16, 1), make(chan string, 1)
	// Each frame in turn: the input and its end, then (once the output came) a resize, then
	// (once the error output came) a signal.
	var stdout, stderr bytes.Buffer
	x := ExecIO{Stdin: strings.NewReader("typed"), Stdout: writerFunc(func(p []byte) (int, error) {
		resize <- [2]uint16{132, 50}
		return stdout.Write(p)
	}), Stderr: writerFunc(func(p []byte) (int, error) {
		signals <- "INT"
		return stderr.Write(p)
	}), Resize: resize, Signal: signals}
	code, err := cl.Exec(context.Background(), "cd25a65fbb64fa69", ExecRequest{Args: []string{"sh"}}, x)
	if err != nil || code != 130 || stdout.String() != "out" || stderr.String() != "err" {
		t.Fatalf("exec: %d %v, stdout %q stderr %q", code, err, stdout.String(), stderr.String())
	}
	want := []string{"ityped", "c", "r" + string(protocol.ExecSize(132, 50)), "kINT"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("frames from the CLI: %q, want %q", got, want)
	}

	if _, err := cl.Exec(context.Background(), "0000000000000000", ExecRequest{Args: []string{"sh"}}, ExecIO{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a refused exec: %v, want a conflict", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
