package protocol

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func readExec(t *testing.T, b []byte) (ExecFrame, error) {
	t.Helper()
	return ReadExecFrame(bufio.NewReader(bytes.NewReader(b)))
}

func execFrame(typ byte, data []byte) []byte {
	var b bytes.Buffer
	if err := WriteExecFrame(&b, typ, data); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// TestExecFrames: what each side of a shell session sends comes back as sent, and what
// no honest side sends is refused, each refusal classified (malformed or too large).
func TestExecFrames(t *testing.T) {
	var b bytes.Buffer
	start := ExecStartMsg{Job: "0123456789abcdef", Args: []string{"sh", "-c", "id -u"}, TTY: true, Cols: 120, Rows: 40}
	WriteExecJSON(&b, ExecStart, start)
	WriteExecFrame(&b, ExecStdin, []byte("echo hi\n"))
	WriteExecFrame(&b, ExecResize, ExecSize(100, 30))
	WriteExecFrame(&b, ExecSignal, []byte("INT"))
	WriteExecFrame(&b, ExecCloseStdin, nil)
	WriteExecJSON(&b, ExecExit, ExecExitMsg{Code: 130})
	WriteExecJSON(&b, ExecError, ExecErrorMsg{Reason: "limit", Message: "too many"})
	r := bufio.NewReader(&b)
	next := func() ExecFrame {
		t.Helper()
		f, err := ReadExecFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if got, err := next().Start(); err != nil || !reflect.DeepEqual(got, start) {
		t.Fatalf("start: %+v %v", got, err)
	}
	if f := next(); f.Type != ExecStdin || string(f.Data) != "echo hi\n" {
		t.Fatalf("stdin: %q %q", f.Type, f.Data)
	}
	if c, rows, err := next().Size(); c != 100 || rows != 30 || err != nil {
		t.Fatalf("resize: %d x %d %v", c, rows, err)
	}
	if name, num, err := next().Signal(); name != "INT" || num != 2 || err != nil {
		t.Fatalf("signal: %s %d %v", name, num, err)
	}
	if f := next(); f.Type != ExecCloseStdin || len(f.Data) != 0 {
		t.Fatalf("close stdin: %q", f.Type)
	}
	if e, err := next().Exit(); e.Code != 130 || err != nil {
		t.Fatalf("exit: %+v %v", e, err)
	}
	if e, err := next().Refusal(); e.Reason != "limit" || e.Message != "too many" || err != nil {
		t.Fatalf("error: %+v %v", e, err)
	}

	if f, err := readExec(t, execFrame(ExecStart, []byte(`{"job":"0123456789abcdef","args":["sh"],"tty":true}`))); err != nil {
		t.Fatal(err)
	} else if m, err := f.Start(); err != nil || m.Cols != 80 || m.Rows != 24 {
		t.Fatalf("a terminal of no size: %+v %v, want 80 x 24", m, err)
	}
	badStarts := map[string]string{
		"job":           `{"job":"XYZ","args":["sh"]}`,
		"no command":    `{"job":"0123456789abcdef","args":[]}`,
		"empty command": `{"job":"0123456789abcdef","args":[""]}`,
		"NUL":           `{"job":"0123456789abcdef","args":["sh","a\u0000b"]}`,
		"long argument": `{"job":"0123456789abcdef","args":["` + strings.Repeat("a", 4097) + `"]}`,
		"huge terminal": `{"job":"0123456789abcdef","args":["sh"],"tty":true,"cols":5000,"rows":10}`,
		"unknown field": `{"job":"0123456789abcdef","args":["sh"],"env":["A=1"]}`,
		"twice":         `{"job":"0123456789abcdef","args":["sh"],"ARGS":["rm"]}`,
	}
	for what, raw := range badStarts {
		f, err := readExec(t, execFrame(ExecStart, []byte(raw)))
		if err == nil {
			_, err = f.Start()
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("start with a bad %s: %v", what, err)
		}
	}
	if _, err := (ExecFrame{Type: ExecStdin, Data: []byte(`{"job":"0123456789abcdef","args":["sh"]}`)}).Start(); !errors.Is(err, ErrMalformed) {
		t.Errorf("a stdin frame taken for a start: %v", err)
	}
	if _, _, err := (ExecFrame{Type: ExecResize, Data: ExecSize(0, 10)}).Size(); !errors.Is(err, ErrMalformed) {
		t.Errorf("a terminal of 0 columns: %v", err)
	}
	if _, _, err := (ExecFrame{Type: ExecSignal, Data: []byte("STOP")}).Signal(); !errors.Is(err, ErrMalformed) {
		t.Errorf("SIGSTOP, which would freeze the session: %v", err)
	}
	if _, err := (ExecFrame{Type: ExecExit, Data: []byte(`{"code":300}`)}).Exit(); !errors.Is(err, ErrMalformed) {
		t.Errorf("an exit status of 300: %v", err)
	}

	if _, err := readExec(t, binary.AppendUvarint(nil, MaxExecFrame+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a frame over the limit: %v", err)
	}
	if _, err := readExec(t, execFrame('?', nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("a frame of no known type: %v", err)
	}
	if _, err := readExec(t, []byte{0}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a frame without its type: %v", err)
	}
	if _, err := readExec(t, execFrame(ExecKeepalive, []byte("x"))); !errors.Is(err, ErrMalformed) {
		t.Errorf("a keepalive with a payload: %v", err)
	}
	if _, err := readExec(t, execFrame(ExecResize, []byte{1, 2, 3})); !errors.Is(err, ErrMalformed) {
		t.Errorf("a resize of 3 bytes: %v", err)
	}
	if err := WriteExecFrame(&b, ExecStdout, make([]byte, MaxExecData+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("writing a frame over the limit: %v", err)
	}
}

// FuzzExecFrames feeds arbitrary bytes to the exec stream's decoders, as either side reads
// them: every failure is classified, no frame passes its limit, and a decoded start
// encodes to a frame that decodes to the same start.
func FuzzExecFrames(f *testing.F) {
	f.Add(execFrame(ExecStart, []byte(`{"job":"0123456789abcdef","args":["sh","-c","id"],"tty":true,"cols":80,"rows":24}`)))
	f.Add(append(execFrame(ExecStdin, []byte("ls\n")), execFrame(ExecResize, ExecSize(80, 24))...))
	f.Add(append(execFrame(ExecSignal, []byte("TERM")), execFrame(ExecCloseStdin, nil)...))
	f.Add(append(execFrame(ExecStdout, []byte("out")), execFrame(ExecExit, []byte(`{"code":3}`))...))
	f.Add(execFrame(ExecError, []byte(`{"reason":"not_renter","message":"no"}`)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			fr, err := ReadExecFrame(r)
			if err != nil {
				if Reason(err) == "other" {
					t.Fatalf("unclassified error: %v", err)
				}
				return
			}
			if len(fr.Data) > MaxExecData {
				t.Fatalf("a frame of %d bytes passed the limit", len(fr.Data))
			}
			var derr error
			switch fr.Type {
			case ExecStart:
				var m ExecStartMsg
				if m, derr = fr.Start(); derr == nil {
					again, err := readExec(t, execFrameJSON(t, m))
					if err != nil {
						t.Fatal(err)
					}
					if m2, err := again.Start(); err != nil || !reflect.DeepEqual(m, m2) {
						t.Fatalf("a start re-encoded reads %+v %v, not %+v", m2, err, m)
					}
				}
			case ExecResize:
				_, _, derr = fr.Size()
			case ExecSignal:
				_, _, derr = fr.Signal()
			case ExecExit:
				_, derr = fr.Exit()
			case ExecError:
				_, derr = fr.Refusal()
			}
			if derr != nil && Reason(derr) == "other" {
				t.Fatalf("unclassified error decoding %q: %v", fr.Type, derr)
			}
		}
	})
}

func execFrameJSON(t *testing.T, m ExecStartMsg) []byte {
	var b bytes.Buffer
	if err := WriteExecJSON(&b, ExecStart, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
