// Package clock is the node's source of time: the system clock, or a fake one moved by hand in tests.
package clock

import (
	"sync"
	"time"
)

// Clock is the node's source of time. The real one is the system clock; tests use
// Fake to cross availability windows without waiting.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type system struct{}

func (system) Now() time.Time                         { return time.Now() }
func (system) After(d time.Duration) <-chan time.Time { return time.After(d) }

// System returns the system clock.
func System() Clock { return system{} }

// Offset returns c moved by d: a node whose clock is skewed (the soak's clock fault,
// config debug.clock_offset). Timers are not moved: After(d) still waits d.
func Offset(c Clock, d time.Duration) Clock { return offset{c, d} }

type offset struct {
	Clock
	d time.Duration
}

func (o offset) Now() time.Time { return o.Clock.Now().Add(o.d) }

// Fake is a Clock moved by hand.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After fires once the fake time has been advanced by d.
func (c *Fake) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the fake time forward and fires every timer that came due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// Waiters returns how many timers are pending (tests wait for a loop to block).
func (c *Fake) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}
