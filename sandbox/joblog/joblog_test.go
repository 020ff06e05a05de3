package joblog

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type nopCloser struct{ bytes.Buffer }

func (*nopCloser) Close() error { return nil }

// TestJobLogBounded: the logger keeps at most the limit, counting what the log held, marks
// the overflow and reads both streams to their end (a job never blocks on its output).
func TestJobLogBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := CreateFiles(path); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("earlier\n"), 0o600)
	out, errs := strings.NewReader(strings.Repeat("o", 3000)), strings.NewReader(strings.Repeat("e", 3000))
	var ready nopCloser
	if err := Write(path, 1000, &ready, out, errs); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if len(b) != 1000 || !strings.HasPrefix(string(b), "earlier\n") || ready.Len() != 1 {
		t.Fatalf("log of %d bytes, ready %d", len(b), ready.Len())
	}
	if state := ReadState(path); state != StateOver || out.Len() != 0 || errs.Len() != 0 {
		t.Fatalf("state %q, left unread %d and %d", state, out.Len(), errs.Len())
	}
}

// TestJobLogUnwritable: a log that cannot be written is said in the state file, with why
// (the monitor kills the job for it), and the streams are still read to their end.
func TestJobLogUnwritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	os.Mkdir(path, 0o700) // a folder where the log should be: open fails
	out := strings.NewReader(strings.Repeat("o", 100000))
	var ready nopCloser
	if err := Write(path, 1<<20, &ready, out, io.LimitReader(out, 0)); err == nil {
		t.Fatal("no error writing into a folder")
	}
	if state := ReadState(path); !strings.HasPrefix(state, StateError) || len(state) <= len(StateError) || out.Len() != 0 || ready.Len() != 1 {
		t.Fatalf("state %q, left unread %d, ready %d", state, out.Len(), ready.Len())
	}
}
