package offers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/calendar"
	"github.com/gpunex/gpunex/protocol"
)

// The availability a provider sets while running (`gpunex availability set|import`) applies
// at once: the offer is published again, jobs are refused outside it, and the coordinator
// reads it from the offer to know when uptime is owed. It is kept in the ledger and replaces
// [provider.availability] of the config until it is reset. One imported from a calendar URL
// can be followed: the node reads the URL again every Follow and applies what changed.

// Follow limits: reading more often than every 5 minutes is a load on the calendar's host
// for nothing, and a calendar read less than weekly is not followed.
const (
	MinFollow = 5 * time.Minute
	MaxFollow = 7 * 24 * time.Hour
)

// SetAvailability applies an availability set while running and announces the new offer;
// nil goes back to the config's.
func (p *Publisher) SetAvailability(ctx context.Context, a *ledger.Availability) (*protocol.SignedOffer, error) {
	sched := p.configSched
	if a != nil {
		var err error
		if sched, err = protocol.ParseSchedule(a.Timezone, a.Windows); err != nil {
			return nil, api.Invalid(err)
		}
		a.Timezone, a.Windows = sched.Timezone(), sched.Windows()
		if a.Follow != 0 {
			if err := calendar.CheckFollow(a.Source); err != nil {
				return nil, api.Invalid(err)
			}
			if a.Follow < MinFollow || a.Follow > MaxFollow {
				return nil, api.Invalid(fmt.Errorf("a followed calendar is read every %s to %s", MinFollow, MaxFollow))
			}
		}
		a.SetAt, a.Checked, a.Error = p.clock.Now().UTC(), time.Time{}, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errShuttingDown
	}
	if err := p.own.SetAvailability(a); err != nil {
		return nil, err
	}
	p.sched = sched
	if err := p.publishLocked(ctx, ""); err != nil && !errors.Is(err, errNotCertified) {
		return nil, err
	}
	p.Poke() // the loop waits for the next change of the schedule it had
	select { // and the follower for the calendar it had
	case p.followWake <- struct{}{}:
	default:
	}
	return p.current, nil
}

// Availability returns the availability in force and, when it was set while running, how.
func (p *Publisher) Availability() (protocol.Schedule, *ledger.Availability, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, err := p.own.Availability()
	return p.sched, a, err
}

// FollowLoop reads a followed calendar URL again when due and applies a changed schedule.
// A read that fails, or a calendar that no longer reads as weekly, leaves the schedule as
// it was and is recorded (shown by `gpunex availability show`).
func (p *Publisher) FollowLoop(ctx context.Context) {
	for {
		wait := time.Hour
		_, a, err := p.Availability()
		if err == nil && a != nil && a.Follow > 0 {
			last := a.Checked
			if last.IsZero() {
				last = a.SetAt
			}
			wait = last.Add(a.Follow).Sub(p.clock.Now())
			if wait <= 0 {
				p.follow(ctx, a)
				wait = a.Follow
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.followWake:
		case <-p.clock.After(min(wait, time.Hour)):
		}
	}
}

// follow reads a followed calendar once and applies it.
func (p *Publisher) follow(ctx context.Context, a *ledger.Availability) {
	defer func() {
		// The calendar is anyone's text: nothing in it may stop the node.
		if r := recover(); r != nil {
			p.log.Error("reading the availability calendar failed", "source", a.Source, "panic", r)
		}
	}()
	now := p.clock.Now()
	var sched protocol.Schedule
	// One followed before https was required is no longer read.
	err := calendar.CheckFollow(a.Source)
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		var data []byte
		data, err = calendar.Read(rctx, a.Source)
		cancel()
		if err == nil {
			sched, err = calendar.Weekly(data, now)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cur, lerr := p.own.Availability()
	if lerr != nil || cur == nil || !cur.SetAt.Equal(a.SetAt) || p.closed {
		return // set again meanwhile: that one stands
	}
	cur.Checked, cur.Error = now.UTC(), ""
	if err != nil {
		cur.Error = err.Error()
		p.log.Warn("availability calendar not applied; the schedule stays as it was", "source", a.Source, "err", err)
	}
	changed := err == nil && sched.String() != p.sched.String()
	if changed {
		p.log.Info("availability changed by its calendar", "source", a.Source, "was", p.sched.String(), "now", sched.String())
		cur.Timezone, cur.Windows = sched.Timezone(), sched.Windows()
	}
	if err := p.own.SetAvailability(cur); err != nil {
		p.log.Warn("recording the availability failed", "err", err)
		return
	}
	if changed {
		p.sched = sched
		if err := p.publishLocked(ctx, ""); err != nil && !errors.Is(err, errNotCertified) {
			p.log.Warn("publishing offer failed", "err", err)
		}
		p.Poke()
	}
}
