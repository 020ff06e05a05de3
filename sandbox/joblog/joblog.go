// Package joblog is the job logger (docs/sandbox.md, "Logs"): containerd's shim starts the
// node's own binary again to write a job's log, and this package's init turns that process
// into the logger before the rest of the binary initialises. It imports the standard
// library only, so that Go initialises it among the first packages: a job's start waits
// for its logger to be ready.
package joblog

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Job logs. containerd's shim hands a job's standard output and error to a logging program
// (containerd's "binary" log driver): the node's own binary, started again by the shim in
// logger mode (RunLoggerIfInvoked). The logger appends both streams to the job's log file
// up to the runtime's limit; past it, it discards the rest and says so in the log's state
// file (<log>.state), which the monitor turns into a kill with ReasonLogLimit. The log never
// holds more than the limit, and the logger, a child of the shim, keeps writing while the
// node restarts. A log it cannot write is said there too (ReasonLogFailed).

// The logger's arguments. The shim passes a log URI's query as "key value" pairs in no
// particular order, and sets only CONTAINER_ID and CONTAINER_NAMESPACE in the environment.
const (
	PathArg = "gpunex-job-log"
	MaxArg  = "gpunex-job-log-max"
)

// The logger tells the monitor how the log stands in a small state file beside it, which
// the node creates, filled with zeros, before the job starts: the logger overwrites it in
// place ("over" past the limit, "error: <why>" when the log cannot be written), which
// needs no new inode nor, on most file systems, new blocks, so it works on a full disk.
const (
	stateSize = 512
	// StateOver: the job printed past the limit.
	StateOver = "over"
	// StateError prefixes why the log cannot be written.
	StateError = "error: "
)

func statePath(logPath string) string { return logPath + ".state" }

// CreateFiles creates the job's log (empty, or as it is) and its zeroed state file.
func CreateFiles(logPath string) error {
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	lf.Close()
	return os.WriteFile(statePath(logPath), make([]byte, stateSize), 0o640)
}

// ReadState returns what the logger said of a log ("" while all is well).
func ReadState(logPath string) string {
	b, err := os.ReadFile(statePath(logPath))
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\x00")
}

// logState writes the state file in place.
type logState struct{ f *os.File }

func (s logState) set(state string) {
	if s.f == nil {
		return
	}
	b := make([]byte, stateSize)
	copy(b, state)
	s.f.WriteAt(b, 0)
}

// loggerInvocation reads the logger's arguments (os.Args[1:]); ok is false when the
// process was not started as a job's logger.
func loggerInvocation(args []string) (path string, limit int64, ok bool) {
	if len(args)%2 != 0 || os.Getenv("CONTAINER_ID") == "" {
		return "", 0, false
	}
	var haveMax bool
	for i := 0; i < len(args); i += 2 {
		switch args[i] {
		case PathArg:
			path = args[i+1]
		case MaxArg:
			n, err := strconv.ParseInt(args[i+1], 10, 64)
			if err != nil || n <= 0 {
				return "", 0, false
			}
			limit, haveMax = n, true
		default:
			return "", 0, false
		}
	}
	return path, limit, path != "" && haveMax
}

// init runs the logger when containerd's shim started this process as one, before the
// packages that sort after this one initialise.
func init() { RunIfInvoked() }

// RunIfInvoked runs the job logger and exits when containerd's shim started this process
// as one; otherwise it returns at once.
func RunIfInvoked() {
	path, limit, ok := loggerInvocation(os.Args[1:])
	if !ok {
		return
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP) // drain until the job's end
	// The shim gives the job's stdout on fd 3, stderr on fd 4, and fd 5 to say "ready".
	stdout, stderr, ready := os.NewFile(3, "stdout"), os.NewFile(4, "stderr"), os.NewFile(5, "ready")
	if err := Write(path, limit, ready, stdout, stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpunex job logger:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Write appends what the streams carry to the file at path, at most limit bytes in
// all (counting what the file already holds), until every stream ends; ready is written
// and closed once the file is open. It always reads the streams to their end, so that the
// job never blocks on its output nor dies of SIGPIPE: past the limit it discards, and when
// the file cannot be opened or written it discards everything; either is said in the state
// file.
func Write(path string, limit int64, ready io.WriteCloser, streams ...io.Reader) error {
	var (
		mu      sync.Mutex
		written int64
		over    bool
		werr    error
		wg      sync.WaitGroup
	)
	var state logState
	if sf, err := os.OpenFile(statePath(path), os.O_WRONLY|os.O_CREATE, 0o640); err == nil {
		defer sf.Close()
		state.f = sf
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err == nil {
		defer f.Close()
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			written = st.Size()
		}
	}
	if err != nil {
		werr = err
		state.set(StateError + err.Error())
	}
	ready.Write([]byte{0}) // the shim reads one byte (or EOF) before it starts the job
	ready.Close()

	for _, r := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					mu.Lock()
					keep := min(int64(n), max(limit-written, 0))
					if keep > 0 && werr == nil {
						if _, werr = f.Write(buf[:keep]); werr != nil {
							state.set(StateError + werr.Error())
						}
						written += keep
					}
					if keep < int64(n) && !over && werr == nil {
						over = true
						state.set(StateOver)
					}
					mu.Unlock()
				}
				if err != nil {
					return // the job closed the stream, or it ended
				}
			}
		}()
	}
	wg.Wait()
	return werr
}
