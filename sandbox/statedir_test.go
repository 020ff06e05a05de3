//go:build linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStateTraversable: a state folder under a folder others may not go through is named
// in the error with the fix; once that folder lets them through, it passes (the control).
func TestStateTraversable(t *testing.T) {
	top := t.TempDir()
	if err := os.Chmod(filepath.Dir(top), 0o711); err != nil { // t.TempDir's own parent is 0700
		t.Fatal(err)
	}
	closed := filepath.Join(top, "closed")
	state := filepath.Join(closed, "state")
	if err := os.MkdirAll(state, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(top, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	err := stateTraversable(state)
	if !errors.Is(err, ErrStateNotTraversable) || !strings.Contains(err.Error(), "chmod o+x "+closed) || !strings.Contains(err.Error(), "jobs.user_namespaces") {
		t.Fatalf("state under a 0700 folder: %v; want ErrStateNotTraversable naming %s and the fixes", err, closed)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := stateTraversable(state); err != nil {
		t.Fatalf("control: every folder 0711: %v", err)
	}
}

// TestContainerdStateFound: the state folder is read from the running daemon itself (its
// command line and config file), here the test daemon's.
func TestContainerdStateFound(t *testing.T) {
	needContainerd(t)
	dir, err := containerdStateDir(testDaemon.Address())
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(testDaemon.sockDir, "state"); dir != want {
		t.Fatalf("the test daemon's state: %s, want %s", dir, want)
	}
	if found, err := CheckStateTraversable(context.Background(), testDaemon.Address()); err != nil {
		t.Fatal(err)
	} else {
		t.Log(found)
	}
}

// TestStateNotTraversableRefused: a runtime on a containerd whose state sits under a
// folder the jobs' users cannot go through refuses to start, saying why and how to fix it,
// instead of failing every job with runc's "permission denied"; without user namespaces it
// starts (the control).
func TestStateNotTraversableRefused(t *testing.T) {
	needContainerd(t)
	if ok, why := usernsSupport(); !ok {
		t.Skipf("skipping: no user namespaces here: %s", why)
	}
	top, err := os.MkdirTemp("/tmp", "gpunex-state-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(top)
	if err := os.Chmod(top, 0o711); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := StartContainerd(ctx, filepath.Join(top, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if err := os.Chmod(top, 0o700); err != nil { // as a home folder would be
		t.Fatal(err)
	}
	o := ContainerdOptions{Address: d.Address(), Namespace: "gpunex-test-state"}
	rt, err := NewContainerd(ctx, o)
	if err == nil {
		rt.Close()
	}
	if !errors.Is(err, ErrStateNotTraversable) || !strings.Contains(err.Error(), "chmod o+x "+top) {
		t.Fatalf("a runtime on a containerd whose state is under a 0700 folder: %v; want ErrStateNotTraversable naming %s", err, top)
	}
	o.NoUserNamespaces = true
	rt, err = NewContainerd(ctx, o)
	if err != nil {
		t.Fatalf("control: without user namespaces: %v", err)
	}
	rt.Close()
}
