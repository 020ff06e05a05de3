package protocol

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// The job-exec stream: a renter runs a process in its running job's container, with the
// job's user and limits (docs/protocols/jobs.md, "Exec"). The renter opens the stream and
// sends a start frame; the provider answers started, or error and closes; then the renter
// sends stdin, resizes, signals and keepalives, the provider the process's stdout and
// stderr, and last its exit, and closes.

// JobExecProtocol is the stream of one process run in a running job.
const JobExecProtocol = "/gpunex/job-exec/1.0.0"

// An exec frame is an unsigned varint length, then that many bytes: a type byte and its
// payload. Data frames carry raw bytes; start, exit and error carry one JSON value.
const (
	// From the renter.
	ExecStart      byte = 's' // ExecStartMsg: the first frame, and only that one
	ExecStdin      byte = 'i' // bytes for the process's standard input
	ExecCloseStdin byte = 'c' // no payload: the standard input ends
	ExecResize     byte = 'r' // 4 bytes: columns and rows, big-endian uint16 each
	ExecSignal     byte = 'k' // a signal's name, one of ExecSignals
	ExecKeepalive  byte = 'p' // no payload: the renter is still there
	// From the provider.
	ExecStarted byte = 'S' // no payload: the process runs
	ExecStdout  byte = 'o' // the process's standard output (its terminal's output with a TTY)
	ExecStderr  byte = 'e' // its standard error (never with a TTY)
	ExecExit    byte = 'x' // ExecExitMsg: the process ended; the last frame
	ExecError   byte = 'E' // ExecErrorMsg: the session is refused or failed; the last frame
)

// Limits of the exec stream.
const (
	// MaxExecData is the most a stdin, stdout or stderr frame carries; larger writes are
	// cut into frames of this size.
	MaxExecData = 32 << 10
	// MaxExecFrame caps every exec frame, its type byte included (a start frame too).
	MaxExecFrame = MaxExecData + 1
	// ExecStartTimeout is how long the renter has to send its start frame.
	ExecStartTimeout = 10 * time.Second
	// ExecIdleTimeout ends a session whose renter sent nothing for this long, or did not
	// read what the provider sent for this long.
	ExecIdleTimeout = 2 * time.Minute
	// ExecKeepaliveInterval is how often a renter's side sends a keepalive frame.
	ExecKeepaliveInterval = 30 * time.Second
	// MaxExecTerminal bounds a terminal's columns and rows.
	MaxExecTerminal = 4096
)

// ExecSignals are the signals a renter may send to its process, by name, with their Linux
// numbers (a job's container is Linux).
var ExecSignals = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15}

// ExecStartMsg is the renter's first frame: which job, what to run, and whether with a
// terminal (of Cols x Rows; 80 x 24 when zero).
type ExecStartMsg struct {
	Job  string   `json:"job"`
	Args []string `json:"args"`
	TTY  bool     `json:"tty,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
}

// ExecExitMsg is how the process ended: its exit status (128+N when killed by signal N).
type ExecExitMsg struct {
	Code int `json:"code"`
}

// ExecErrorMsg says why a session was refused or failed. Reason is one of the session
// outcomes of gpunex_job_sessions_total: not_renter, not_running, limit, rate_limited,
// other.
type ExecErrorMsg struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// ExecFrame is one frame of the exec stream.
type ExecFrame struct {
	Type byte
	Data []byte
}

var execFrameTypes = map[byte]bool{
	ExecStart: true, ExecStdin: true, ExecCloseStdin: true, ExecResize: true, ExecSignal: true, ExecKeepalive: true,
	ExecStarted: true, ExecStdout: true, ExecStderr: true, ExecExit: true, ExecError: true,
}

// WriteExecFrame writes one frame in a single Write, so that writers sharing a stream
// under a lock never interleave. data must be at most MaxExecData bytes.
func WriteExecFrame(w io.Writer, typ byte, data []byte) error {
	if len(data) > MaxExecData {
		return fmt.Errorf("%w: exec frame of %d bytes, at most %d", ErrTooLarge, len(data), MaxExecData)
	}
	b := make([]byte, 0, binary.MaxVarintLen64+1+len(data))
	b = binary.AppendUvarint(b, uint64(1+len(data)))
	b = append(append(b, typ), data...)
	_, err := w.Write(b)
	return err
}

// WriteExecJSON writes a frame whose payload is v as JSON.
func WriteExecJSON(w io.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteExecFrame(w, typ, b)
}

// ReadExecFrame reads one frame: at most MaxExecFrame bytes, of a known type. A frame too
// large is ErrTooLarge before any of it is read; anything else wrong is ErrMalformed.
func ReadExecFrame(r *bufio.Reader) (ExecFrame, error) {
	b, err := ReadFrame(r, MaxExecFrame)
	if err != nil {
		return ExecFrame{}, err
	}
	if len(b) == 0 || !execFrameTypes[b[0]] {
		return ExecFrame{}, fmt.Errorf("%w: exec frame of no known type", ErrMalformed)
	}
	f := ExecFrame{Type: b[0], Data: b[1:]}
	switch f.Type {
	case ExecCloseStdin, ExecKeepalive, ExecStarted:
		if len(f.Data) != 0 {
			return ExecFrame{}, fmt.Errorf("%w: exec frame %q carries no payload", ErrMalformed, f.Type)
		}
	case ExecResize:
		if len(f.Data) != 4 {
			return ExecFrame{}, fmt.Errorf("%w: a resize frame is 4 bytes", ErrMalformed)
		}
	}
	return f, nil
}

// Start decodes and checks a start frame: a job ID, 1 to 256 arguments of at most 4096
// bytes without NUL, a terminal size within MaxExecTerminal.
func (f ExecFrame) Start() (ExecStartMsg, error) {
	var m ExecStartMsg
	if f.Type != ExecStart {
		return m, fmt.Errorf("%w: the first exec frame must be a start", ErrMalformed)
	}
	if err := decodeStrict(f.Data, &m); err != nil {
		return m, fmt.Errorf("%w: exec start: %v", ErrMalformed, err)
	}
	bad := func(format string, a ...any) (ExecStartMsg, error) {
		return ExecStartMsg{}, fmt.Errorf("%w: exec start: %s", ErrMalformed, fmt.Sprintf(format, a...))
	}
	if !ValidJobID(m.Job) {
		return bad("job ID: 16 lower-case hex digits")
	}
	if len(m.Args) == 0 || len(m.Args) > maxArgs {
		return bad("1 to %d arguments", maxArgs)
	}
	for _, a := range m.Args {
		if len(a) > maxArgLen || strings.ContainsRune(a, 0) {
			return bad("an argument is longer than %d bytes or holds a NUL byte", maxArgLen)
		}
	}
	if m.Args[0] == "" {
		return bad("no command")
	}
	if m.Cols > MaxExecTerminal || m.Rows > MaxExecTerminal {
		return bad("a terminal of at most %d columns and rows", MaxExecTerminal)
	}
	if m.TTY && (m.Cols == 0 || m.Rows == 0) {
		m.Cols, m.Rows = 80, 24
	}
	return m, nil
}

// Size decodes a resize frame: columns and rows, each 1 to MaxExecTerminal.
func (f ExecFrame) Size() (cols, rows uint16, err error) {
	if f.Type != ExecResize || len(f.Data) != 4 {
		return 0, 0, fmt.Errorf("%w: not a resize frame", ErrMalformed)
	}
	cols, rows = binary.BigEndian.Uint16(f.Data), binary.BigEndian.Uint16(f.Data[2:])
	if cols == 0 || rows == 0 || cols > MaxExecTerminal || rows > MaxExecTerminal {
		return 0, 0, fmt.Errorf("%w: a terminal of %d x %d: 1 to %d columns and rows", ErrMalformed, cols, rows, MaxExecTerminal)
	}
	return cols, rows, nil
}

// ExecSize is the payload of a resize frame.
func ExecSize(cols, rows uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, cols), rows)
}

// Signal decodes a signal frame: the signal's name and Linux number.
func (f ExecFrame) Signal() (name string, num int, err error) {
	num, ok := ExecSignals[string(f.Data)]
	if f.Type != ExecSignal || !ok {
		return "", 0, fmt.Errorf("%w: not a signal the renter may send (HUP, INT, QUIT, KILL, USR1, USR2, TERM)", ErrMalformed)
	}
	return string(f.Data), num, nil
}

// Exit decodes an exit frame.
func (f ExecFrame) Exit() (ExecExitMsg, error) {
	var m ExecExitMsg
	if f.Type != ExecExit {
		return m, fmt.Errorf("%w: not an exit frame", ErrMalformed)
	}
	if err := decodeStrict(f.Data, &m); err != nil {
		return m, fmt.Errorf("%w: exec exit: %v", ErrMalformed, err)
	}
	if m.Code < 0 || m.Code > 255 {
		return ExecExitMsg{}, fmt.Errorf("%w: exit status %d, not 0 to 255", ErrMalformed, m.Code)
	}
	return m, nil
}

// Refusal decodes an error frame.
func (f ExecFrame) Refusal() (ExecErrorMsg, error) {
	var m ExecErrorMsg
	if f.Type != ExecError {
		return m, fmt.Errorf("%w: not an error frame", ErrMalformed)
	}
	if err := decodeStrict(f.Data, &m); err != nil {
		return m, fmt.Errorf("%w: exec error: %v", ErrMalformed, err)
	}
	return m, nil
}
