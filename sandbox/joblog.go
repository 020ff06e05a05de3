package sandbox

import "github.com/gpunex/gpunex/sandbox/joblog"

// Job logs: the logger itself is sandbox/joblog (its init runs it, early, when containerd's
// shim starts the node's binary as a job's logger).
const (
	loggerPathArg = joblog.PathArg
	loggerMaxArg  = joblog.MaxArg
	stateOver     = joblog.StateOver
	stateError    = joblog.StateError
)

func createLogFiles(logPath string) error { return joblog.CreateFiles(logPath) }

func readLogState(logPath string) string { return joblog.ReadState(logPath) }

// RunLoggerIfInvoked runs the job logger and exits when containerd's shim started this
// process as one; otherwise it returns at once. Importing this package already does it,
// early in the process's initialisation; calling it first thing in main (and in the
// TestMain of packages whose tests start jobs) says so where it matters.
func RunLoggerIfInvoked() { joblog.RunIfInvoked() }
