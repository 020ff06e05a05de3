package localnet

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// RequireEnv names the environment variable that turns a runtime that cannot start into a
// test failure instead of a skip (set to 1 in CI, where node and litesvm are installed).
const RequireEnv = "GPUNEX_REQUIRE_SOLANA"

// ForTest starts a fresh runtime for one test and stops it in t.Cleanup. When it cannot
// start (no node, litesvm not installed) the test is skipped with the reason, or fails if
// GPUNEX_REQUIRE_SOLANA=1. The server's stderr is shown when the test fails, and always
// when GPUNEX_SOLANA_LOG=1.
func ForTest(t testing.TB) *Runtime {
	t.Helper()
	logs := &tailBuffer{max: 64 << 10}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r, err := Start(ctx, logs)
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("local Solana runtime: %v", err)
		}
		t.Skipf("local Solana runtime unavailable (set %s=1 to fail instead): %v", RequireEnv, err)
	}
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() || os.Getenv("GPUNEX_SOLANA_LOG") == "1" {
			if s := logs.String(); s != "" {
				t.Logf("local Solana runtime output:\n%s", s)
			}
		}
	})
	return r
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
