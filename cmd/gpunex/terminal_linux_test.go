package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpunex/gpunex/node/config"
)

// TestJobLogsTerminalOrPipe: `gpunex job logs` prints a job's output escaped on a terminal
// (a pseudo-terminal here) and byte for byte into a pipe.
func TestJobLogsTerminalOrPipe(t *testing.T) {
	const job = "0123456789abcdef"
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/jobs/"+job+"/logs" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, hostileLog)
	}))
	defer api.Close()
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, config.APIAddrFile), []byte(api.URL+"\n"), 0o600)
	os.WriteFile(filepath.Join(home, config.TokenFile), []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
	logs := func(out *os.File) {
		t.Helper()
		root := rootCommand()
		root.SetArgs([]string{"job", "logs", job, "--home", home})
		root.SetOut(out)
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	logs(w)
	if got, _ := io.ReadAll(r); string(got) != hostileLog {
		t.Errorf("into a pipe: %q, want the job's bytes %q", got, hostileLog)
	}

	term, shown := pseudoTerminal(t)
	logs(term)
	if got, _ := io.ReadAll(shown); !strings.HasPrefix(string(got), escapedLog) {
		t.Errorf("on a terminal: %q, want %q", got, escapedLog)
	}
}

// pseudoTerminal opens a pseudo-terminal that passes output as written (no newline
// translation): what a program writes to term is read from shown.
func pseudoTerminal(t *testing.T) (term, shown *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(int(term.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(term.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return term, ptmx
}
