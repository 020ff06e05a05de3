package jobs

import (
	"context"
	"time"
)

// A renter vouches for a job's usage with its own clock: the seconds since it saw the job
// start. A renter restarted with its clock moved back (or stepped back by NTP) would see
// fewer seconds than ran, refuse every later checkpoint (its provider then stops the job
// as unmetered) and dispute an honest receipt. So it keeps the latest time its clock has
// shown in its ledger, and a clock found behind that mark moves what it observed of its
// running jobs back as much: it then loses at most the time between the last mark and the
// step (clockMarkEvery, plus the downtime of a restart). A clock moved forward cannot be
// told from a node that was down; it makes the renter vouch for more, never less.

// clockMarkEvery is how often a renter checks its clock against its mark and moves the mark.
const clockMarkEvery = 5 * time.Second

// keepClock checks the clock every clockMarkEvery (on the machine's own ticker, so that a
// clock of tests that does not move still gets checked) until ctx ends.
func (r *Renter) keepClock(ctx context.Context) {
	t := time.NewTicker(clockMarkEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.CheckClock()
		}
	}
}

// CheckClock compares this node's clock with the latest time it has shown: when the clock
// is behind it, the running jobs' observed start and last sighting move back by the
// difference; then the mark becomes now.
func (r *Renter) CheckClock() {
	now := r.clock.Now()
	mark, err := r.ledger.ClockMark()
	if err != nil {
		r.log.Warn("the clock mark could not be read", "err", err)
		return
	}
	if back := mark.Sub(now); back > 0 {
		n, err := r.ledger.ShiftObserved(back)
		if err != nil {
			r.log.Warn("this node's clock moved back; the observed times of its running jobs could not follow", "by", back, "err", err)
			return
		}
		if back >= time.Second || n > 0 {
			r.log.Warn("this node's clock moved back: the observed times of its running jobs follow it", "by", back.Round(time.Millisecond), "jobs", n)
		}
	}
	if err := r.ledger.MarkClock(now); err != nil {
		r.log.Warn("the clock mark could not be kept", "err", err)
	}
}
