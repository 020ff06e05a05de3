package clock

import (
	"testing"
	"time"
)

// TestOffset: a skewed clock reads its base plus the offset, as the base moves, while its
// timers still wait their real length.
func TestOffset(t *testing.T) {
	base := NewFake(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	c := Offset(base, -3*time.Minute)
	if got, want := c.Now(), base.Now().Add(-3*time.Minute); !got.Equal(want) {
		t.Fatalf("Now = %s, want %s", got, want)
	}
	fired := c.After(time.Minute)
	base.Advance(59 * time.Second)
	select {
	case <-fired:
		t.Fatal("a one-minute timer fired after 59 s")
	default:
	}
	base.Advance(time.Second)
	select {
	case <-fired:
	default:
		t.Fatal("a one-minute timer did not fire after a minute")
	}
	if got, want := c.Now(), time.Date(2026, 12, 5, 11, 58, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("Now after a minute = %s, want %s", got, want)
	}
}
