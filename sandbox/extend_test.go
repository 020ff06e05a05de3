//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestExtendWallClock: a job whose wall clock is extended while it runs is not killed at
// its first limit and ends by itself; an ended job is not extended.
func TestExtendWallClock(t *testing.T) {
	rt, ref := testRuntime(t)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "out"), 0o700)
	spec := Spec{ID: "extended", Image: ref, Args: []string{"sleep", "3"}, MemoryBytes: 32 << 20, CPUMillis: 200, Pids: 8,
		ScratchBytes: 1 << 20, WallClock: 1500 * time.Millisecond, OutputDir: filepath.Join(dir, "out"), LogPath: filepath.Join(dir, "log")}
	ctx := context.Background()
	if err := rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer rt.Remove(ctx, spec.ID)
	if err := rt.ExtendWallClock(ctx, spec.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	exit, err := rt.Wait(ctx, spec.ID)
	if err != nil || exit.Code != 0 || exit.Reason != ReasonExited {
		t.Fatalf("the extended job ended %+v (%v); want code 0, reason exited", exit, err)
	}
	if err := rt.ExtendWallClock(ctx, spec.ID, time.Minute); err == nil {
		t.Fatal("an ended job was extended")
	}
}
