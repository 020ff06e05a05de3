package jobs

import (
	"errors"
	"testing"
)

// TestJobSessionLimits: a job gets at most the sessions of a kind its provider allows, each
// kind counted apart, a closed session frees its place (once, however often it is closed),
// and a job that carried more than its budget is told so; an ended job's counts go.
func TestJobSessionLimits(t *testing.T) {
	s := newJobSessions()
	a, err := s.acquire("job1", "tunnel", 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.acquire("job1", "tunnel", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("job1", "tunnel", 2); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("a third tunnel of two allowed: %v", err)
	}
	if _, err := s.acquire("job1", "exec", 1); err != nil {
		t.Fatalf("a shell counted against the tunnels: %v", err)
	}
	if _, err := s.acquire("job2", "tunnel", 2); err != nil {
		t.Fatalf("another job's tunnel refused: %v", err)
	}
	a()
	a() // closed twice: frees one place only
	if _, err := s.acquire("job1", "tunnel", 2); err != nil {
		t.Fatalf("a place freed by a closed tunnel: %v", err)
	}
	if _, err := s.acquire("job1", "tunnel", 2); !errors.Is(err, ErrSessionLimit) {
		t.Fatal("a session closed twice freed two places")
	}
	b()
	if _, err := s.acquire("job1", "exec", 0); !errors.Is(err, ErrSessionLimit) {
		t.Fatal("a kind the provider allows none of was opened")
	}
	if !s.spend("job1", 600, 1000) || s.spend("job1", 600, 1000) {
		t.Fatal("the transfer budget of 1000 bytes did not stop at 1200")
	}
	if !s.spend("job3", 1<<40, 0) {
		t.Fatal("no budget (0) limited a job")
	}
	s.forget("job1")
	if _, err := s.acquire("job1", "tunnel", 1); err != nil || !s.spend("job1", 600, 1000) {
		t.Fatalf("an ended job's counts stayed: %v", err)
	}
}
