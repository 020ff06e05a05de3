//go:build linux

package main

import (
	"os/exec"
	"testing"
	"time"

	"github.com/gpunex/gpunex/sandbox"
)

// fetchForwarded forwards port 8000 of the renter's job id to local in the renter's
// namespace with `gpunex job forward`, as a user would, and returns the page served there
// once the job's httpd answers (it listens a moment after the job started).
func fetchForwarded(t *testing.T, renter *nsNode, id, local string) string {
	t.Helper()
	said := &forwardLog{}
	fwd := exec.Command("ip", "netns", "exec", renter.ns, binary, "job", "forward", id, "8000", "--local", local, "--home", renter.home)
	fwd.Stdout, fwd.Stderr = said, said
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { fwd.Process.Kill(); fwd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		// -Y off: the renter's loopback, whatever proxy the environment names.
		page, err := exec.Command("ip", "netns", "exec", renter.ns, sandbox.BusyboxPath, "wget", "-Y", "off", "-q", "-O", "-", "http://"+local+"/").CombinedOutput()
		if err == nil {
			return string(page)
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s's port 8000 through gpunex job forward at %s: %v\n%s\nthe forward said:\n%s", id, local, err, page, said.String())
		}
	}
}
