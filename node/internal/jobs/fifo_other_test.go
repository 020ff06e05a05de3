//go:build !unix

package jobs

import "errors"

// mkfifo: no named pipes here (jobs run on Linux only; the tests still compile for the
// CLI's other systems).
func mkfifo(string) error { return errors.ErrUnsupported }
