//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/devnet"
)

// The soak (docs/reliability.md, "The soak"): `make test` runs it for 3 minutes with seed
// 1; `make soak` for SOAK (30m) with a seed of the clock, printed so that a failing run can
// be replayed with SOAK_SEED.
var (
	soakDuration = flag.Duration("soak.duration", 3*time.Minute, "how long the soak's jobs and faults run")
	soakSeed     = flag.Uint64("soak.seed", 1, "the seed of the soak's fault schedule and jobs (0: the clock's)")
)

// TestSoak: under kill -9 of any node, a Solana RPC that is slow, failing or dropping
// transactions, a provider's full disk and partitions between nodes, the books balance (per
// renter, and against the chain), no hold leaks, no job is charged above its countersigned
// usage, no provider is paid twice or recorded as paid without being paid, and every kind of
// fault was applied (a partition only where iptables runs as root).
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	testContainerd(t, t.TempDir()).Stop() // skipped (or failed in CI) without one; the soak starts its own
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	out := testWriter{t}
	dir := t.TempDir()
	rep, err := devnet.Soak(context.Background(), devnet.SoakOptions{Dir: dir, Binary: binary, Out: out,
		Duration: *soakDuration, Seed: seed, Providers: 6, Renters: 3, CheckEvery: time.Minute})
	if err != nil {
		t.Fatalf("the soak did not run (seed %d): %v", seed, err)
	}
	for _, b := range rep.Breaks {
		t.Errorf("seed %d: %s", seed, b)
	}
	if len(rep.Breaks) > 0 {
		// The nodes' logs say why; the test's folder goes with the test.
		kept := filepath.Join(os.TempDir(), fmt.Sprintf("gpunex-soak-%d", seed))
		if err := keepLogs(dir, kept); err != nil {
			t.Logf("the nodes' logs were not kept: %v", err)
		} else {
			t.Logf("the nodes' logs are kept in %s", kept)
		}
	}
	for _, k := range devnet.FaultKinds {
		if why := rep.NotApplied[k]; why != "" {
			t.Logf("seed %d: the fault %q cannot be applied here: %s", seed, k, why)
		} else if rep.Applied[k] == 0 {
			t.Errorf("seed %d: the fault %q was never applied", seed, k)
		}
	}
	if rep.Jobs["ended"] == 0 {
		t.Errorf("seed %d: no job ended well under the faults: %v", seed, rep.Jobs)
	}
}

// keepLogs copies every .log file under dir to the same place under kept.
func keepLogs(dir, kept string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(d.Name(), ".log") {
			return nil // a folder it cannot read (a provider's unmounted disk) is skipped
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(kept, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(kept, rel), b, 0o644)
	})
}

// testWriter writes the soak's lines into the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-min(len(p), 1)]))
	return len(p), nil
}
