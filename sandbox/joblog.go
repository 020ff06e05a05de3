package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// Job logs. containerd's shim hands a job's standard output and error to a logging program
// (containerd's "binary" log driver): the node's own binary, started again by the shim in
// logger mode (RunLoggerIfInvoked). The logger appends both streams to the job's log file
// up to the runtime's limit; past it, it discards the rest and leaves a mark file beside
// the log (<log>.over) that the monitor turns into a kill with ReasonLogLimit. The log never
// holds more than the limit, and the logger, a child of the shim, keeps writing while the
// node restarts. A log it cannot write leaves <log>.error instead (ReasonLogFailed).

// The logger's arguments. The shim passes a log URI's query as "key value" pairs in no
// particular order, and sets only CONTAINER_ID and CONTAINER_NAMESPACE in the environment.
const (
	loggerPathArg = "gpunex-job-log"
	loggerMaxArg  = "gpunex-job-log-max"
)

// overMark is the file the logger creates when a job's output went past the log limit;
// errorMark the one holding why the log could not be written (the monitor kills the job
// with ReasonLogFailed).
func overMark(logPath string) string  { return logPath + ".over" }
func errorMark(logPath string) string { return logPath + ".error" }

// loggerInvocation reads the logger's arguments (os.Args[1:]); ok is false when the
// process was not started as a job's logger.
func loggerInvocation(args []string) (path string, limit int64, ok bool) {
	if len(args)%2 != 0 || os.Getenv("CONTAINER_ID") == "" {
		return "", 0, false
	}
	var haveMax bool
	for i := 0; i < len(args); i += 2 {
		switch args[i] {
		case loggerPathArg:
			path = args[i+1]
		case loggerMaxArg:
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

// RunLoggerIfInvoked runs the job logger and exits when containerd's shim started this
// process as one; otherwise it returns at once. Call it first thing in main, and in the
// TestMain of any package whose tests start jobs (the runtime names the running binary as
// the logger: ContainerdOptions.LogBinary).
func RunLoggerIfInvoked() {
	path, limit, ok := loggerInvocation(os.Args[1:])
	if !ok {
		return
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP) // drain until the job's end
	// The shim gives the job's stdout on fd 3, stderr on fd 4, and fd 5 to say "ready".
	stdout, stderr, ready := os.NewFile(3, "stdout"), os.NewFile(4, "stderr"), os.NewFile(5, "ready")
	if err := writeJobLog(path, limit, ready, stdout, stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpunex job logger:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// writeJobLog appends what the streams carry to the file at path, at most limit bytes in
// all (counting what the file already holds), until every stream ends; ready is written
// and closed once the file is open. It always reads the streams to their end, so that the
// job never blocks on its output nor dies of SIGPIPE: past the limit it discards, and when
// the file cannot be opened or written it discards everything and leaves errorMark.
func writeJobLog(path string, limit int64, ready io.WriteCloser, streams ...io.Reader) error {
	var (
		mu      sync.Mutex
		written int64
		over    bool
		werr    error
		wg      sync.WaitGroup
	)
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
		markError(path, err)
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
							markError(path, werr)
						}
						written += keep
					}
					if keep < int64(n) && !over {
						over = true
						if mf, err := os.OpenFile(overMark(path), os.O_WRONLY|os.O_CREATE, 0o640); err == nil {
							mf.Close()
						}
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

// markError leaves errorMark holding why the log failed; the monitor kills the job.
func markError(path string, err error) {
	os.WriteFile(errorMark(path), []byte(err.Error()), 0o640)
}
