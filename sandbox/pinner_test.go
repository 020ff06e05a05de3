//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPinnerMountsInContainerdsNamespace: a node that runs in a mount namespace of its own
// (the hardened provider unit) makes its pins' mounts in the namespace containerd runs in,
// where runc looks for them, and the node's other threads stay in its own namespace.
func TestPinnerMountsInContainerdsNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount namespaces)")
	}
	// containerd's stand-in: a process in a mount namespace of its own.
	other := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "60")
	if err := other.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	ours, _ := os.Readlink("/proc/self/ns/mnt")
	nsPath := fmt.Sprintf("/proc/%d/ns/mnt", other.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if theirs, err := os.Readlink(nsPath); err == nil && theirs != ours {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in never got a mount namespace of its own")
		}
	}
	ns, err := os.Open(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &pinner{ns: ns}
	defer p.close()

	dir := t.TempDir()
	mounted := func(proc string) bool {
		b, err := os.ReadFile("/proc/" + proc + "/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(b), " "+dir+" ")
	}
	// Many rounds: the goroutine that joins the namespace lands on the main thread now and
	// then, which once made the process's own mountinfo show the stand-in's mounts.
	for round := 0; round < 100; round++ {
		if err := p.in(func() error { return unix.Mount("tmpfs", dir, "tmpfs", 0, "") }); err != nil {
			t.Fatal(err)
		}
		if !mounted(fmt.Sprint(other.Process.Pid)) || mounted("self") {
			t.Fatalf("the mount should be in the stand-in's namespace only: there %v, here %v", mounted(fmt.Sprint(other.Process.Pid)), mounted("self"))
		}
		if err := p.in(func() error { return unix.Unmount(dir, 0) }); err != nil {
			t.Fatal(err)
		}
		if mounted(fmt.Sprint(other.Process.Pid)) {
			t.Fatal("the unmount did not reach the stand-in's namespace")
		}
	}
}
