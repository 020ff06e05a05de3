package reliability

import (
	"container/heap"
	"context"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The probe schedule: each certified provider is probed on its own clock, a random moment
// within the first interval and then the probe interval ±50% after its previous probe ends.
// Probes are spread over time, and a slow or dead provider holds one worker for its probe's
// time limit, not a round of everyone. probeWorkers probes run at once.

// probeWorkers is how many probes run at once.
const probeWorkers = 128

// relistEvery is how often the schedule reads the certified providers again (approvals and
// revocations), at most.
const relistEvery = time.Minute

// schedule is the probe queue: providers by due time.
type schedule struct {
	mu      sync.Mutex
	queue   dueQueue
	members map[peer.ID]uint64 // provider: generation of its entry in the queue
	busy    map[peer.ID]bool   // taken, its probe not done: done queues it again
	gen     uint64
	every   time.Duration
}

type due struct {
	at  time.Time
	p   peer.ID
	gen uint64
}

type dueQueue []due

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(due)) }
func (q *dueQueue) Pop() any {
	old := *q
	d := old[len(old)-1]
	*q = old[:len(old)-1]
	return d
}

func newSchedule(every time.Duration) *schedule {
	return &schedule{members: map[peer.ID]uint64{}, busy: map[peer.ID]bool{}, every: every}
}

// jitter is the probe interval ±50%.
func (s *schedule) jitter() time.Duration {
	return s.every/2 + time.Duration(mrand.Int64N(int64(s.every)))
}

// set makes the schedule's providers these: a new one is first due within an interval from
// now, one gone is dropped.
func (s *schedule) set(providers []peer.ID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := make(map[peer.ID]bool, len(providers))
	for _, p := range providers {
		keep[p] = true
		if _, ok := s.members[p]; !ok {
			s.gen++
			s.members[p] = s.gen
			if !s.busy[p] { // a probe under way queues it when done
				heap.Push(&s.queue, due{at: now.Add(time.Duration(mrand.Int64N(int64(s.every)))), p: p, gen: s.gen})
			}
		}
	}
	for p := range s.members {
		if !keep[p] {
			delete(s.members, p) // its entry in the queue is skipped when due
		}
	}
}

// take removes and returns the providers due at now, and when the next one is due (zero
// when none is queued). A provider taken is out of the queue until done puts it back.
func (s *schedule) take(now time.Time) ([]peer.ID, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []peer.ID
	for len(s.queue) > 0 && !s.queue[0].at.After(now) {
		d := heap.Pop(&s.queue).(due)
		if s.members[d.p] == d.gen {
			out = append(out, d.p)
			s.busy[d.p] = true
		}
	}
	if len(s.queue) == 0 {
		return out, time.Time{}
	}
	return out, s.queue[0].at
}

// done queues a provider whose probe ended at now for its next probe, if it is still a member.
func (s *schedule) done(p peer.ID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, p)
	if g, ok := s.members[p]; ok {
		heap.Push(&s.queue, due{at: now.Add(s.jitter()), p: p, gen: g})
	}
}

// Run probes the certified providers on their schedules until ctx ends.
func (sc *Scorer) Run(ctx context.Context) {
	s := newSchedule(sc.cfg.ProbeInterval.Duration)
	relist := min(s.every, relistEvery)
	work := make(chan peer.ID)
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	for range probeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				sc.probeOne(ctx, p)
				s.done(p, sc.clock.Now())
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
	}
	defer close(work)
	var listed time.Time
	for {
		now := sc.clock.Now()
		if listed.IsZero() || now.Sub(listed) >= relist {
			// A list that cannot be read leaves the schedule as it is.
			if providers, err := sc.providersFn(); err == nil {
				s.set(providers, now)
			} else {
				sc.log.Warn("reading the certified providers failed", "err", err)
			}
			listed = now
		}
		ready, next := s.take(now)
		for _, p := range ready {
			select {
			case work <- p:
			case <-ctx.Done():
				return
			}
		}
		wait := listed.Add(relist).Sub(now)
		if !next.IsZero() && next.Sub(now) < wait {
			wait = next.Sub(now)
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-sc.clock.After(max(wait, time.Millisecond)):
		}
	}
}
