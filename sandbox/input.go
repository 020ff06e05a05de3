package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A job's input: a host folder the provider filled with the renter's data before the start
// (node/internal/jobs/inputs.go), bind-mounted read-only at /input. The job's user owns
// nothing there and the mount is read-only: the job reads its input and cannot change it,
// for itself or for a later job. Links in it resolve inside the container's own view.

// inputMounts is the /input mount of a job with an input; none without.
func inputMounts(s Spec) []specs.Mount {
	if s.InputDir == "" {
		return nil
	}
	return []specs.Mount{{Destination: "/input", Type: "bind", Source: s.InputDir, Options: []string{"rbind", "ro", "nosuid", "nodev", "rprivate"}}}
}

// validateInput checks InputDir, when set: an existing folder given by its absolute path.
func (s *Spec) validateInput() error {
	if s.InputDir == "" {
		return nil
	}
	if !filepath.IsAbs(s.InputDir) {
		return fmt.Errorf("InputDir %q must be an absolute path to the job's input folder", s.InputDir)
	}
	if st, err := os.Lstat(s.InputDir); err != nil || !st.IsDir() {
		return fmt.Errorf("InputDir %q must be an existing folder, not a link", s.InputDir)
	}
	return nil
}
