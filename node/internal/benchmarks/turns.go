package benchmarks

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Who gets the coordinator's transfer turn. The coordinator measures one run's transfers at
// a time (its own link shared would measure the runs against each other), so the turn is
// worth holding: it goes to the providers the coordinator certified and to those applying
// to it, each a few times an hour, never to a stranger (security review 2026-12-05,
// finding 8: strangers with fresh keys held it back to back).

// Revocations are the revocations a coordinator knows (the node's trust store).
type Revocations interface {
	RevocationOf(c *protocol.SignedCertificate) *protocol.SignedRevocation
}

// Applications are a coordinator's review queue (the ledger).
type Applications interface {
	GetApplication(id string) (ledger.Application, error)
}

// standing is what a run showed of its provider with its challenge request: who it is to
// the coordinator's transfer turn.
type standing int

const (
	stranger  standing = iota // no turn
	applicant                 // an application open with this coordinator
	certified                 // a certificate of a trusted coordinator, valid and not revoked
)

// ErrNotProvider is a run refused the coordinator's transfer turn: the provider showed no
// certificate and no open application (apply first: gpunex apply).
var ErrNotProvider = errors.New("not a provider of the coordinator")

// standingOf judges what a run's challenge request shows of its peer p: a certificate that
// holds now, is p's, was signed by a coordinator this one trusts and not revoked; or the ID
// of an application of p's that this coordinator's queue holds open.
func (c *Coordinator) standingOf(p peer.ID, m protocol.BenchNetMsg) standing {
	if len(m.Certificate) > 0 {
		cert, err := protocol.CheckCertificate(m.Certificate, c.clock.Now(), c.trust)
		if err == nil && cert.Provider == p.String() && c.revoked != nil && c.revoked.RevocationOf(cert) == nil {
			return certified
		}
	}
	if m.Application != "" && c.apps != nil {
		a, err := c.apps.GetApplication(m.Application)
		if err == nil && a.Provider == p.String() && (a.Status == protocol.StatusPending || a.Status == protocol.StatusInfoRequested) {
			return applicant
		}
	}
	return stranger
}

// turnsPerHour is how many transfer turns one peer gets an hour (a run takes one).
const turnsPerHour = 4

// takeTurn records a turn for p at now, unless p had turnsPerHour in the last hour.
func (c *Coordinator) takeTurn(p peer.ID, now time.Time) bool { return c.turns.Allow(p, now) }

// transferWait is how long a run waits for its turn to transfer. (Tests shorten it.)
var transferWait = 90 * time.Second

// TransferHold is how long a run may keep its turn: the largest transfers (64 MiB each
// way) at the listing minimum's rates (20 Mbit/s up, 50 down) take 38 s. (Tests shorten
// it.)
var TransferHold = 45 * time.Second

// applicantTurnsPerNetwork is how many transfer turns the applicants of one network (an
// IPv4 address, an IPv6 /64) get an hour, 8 at once. An application costs a fresh key
// nothing but the apply stream's budget, so applicants are rationed by where they come
// from; certified providers are not (each is known and revocable, and one address may hold
// many behind a NAT), and take their turns first (turnQueue).
const applicantTurnsPerNetwork = 8

// turnQueue is the coordinator's one transfer turn and the runs waiting for it: certified
// providers' first, then applicants', each in order of arrival. A flood of applications (a
// new key applies for free) thus delays a certified provider's renewal by one run at most.
type turnQueue struct {
	mu      sync.Mutex
	held    bool
	waiters [certified + 1][]*turnWaiter // by standing
}

type turnWaiter struct{ granted chan struct{} }

// maxWaiting bounds the runs of one standing waiting for the turn; more are told the
// coordinator is busy at once.
const maxWaiting = 64

// take waits at most wait for the turn, behind the runs of its standing that came first and
// every run of a higher standing; false when it did not come.
func (q *turnQueue) take(s standing, wait time.Duration) bool {
	q.mu.Lock()
	if !q.held {
		q.held = true
		q.mu.Unlock()
		return true
	}
	if len(q.waiters[s]) >= maxWaiting {
		q.mu.Unlock()
		return false
	}
	w := &turnWaiter{granted: make(chan struct{})}
	q.waiters[s] = append(q.waiters[s], w)
	q.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.granted:
		return true
	case <-timer.C:
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.granted: // handed over as the wait ran out
		return true
	default:
	}
	q.waiters[s] = slices.DeleteFunc(q.waiters[s], func(x *turnWaiter) bool { return x == w })
	return false
}

// give hands the turn to the first run waiting of the highest standing, or frees it.
func (q *turnQueue) give() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for s := certified; s > stranger; s-- {
		if len(q.waiters[s]) > 0 {
			w := q.waiters[s][0]
			q.waiters[s] = q.waiters[s][1:]
			close(w.granted)
			return
		}
	}
	q.held = false
}

// busy says whether a run holds the turn.
func (q *turnQueue) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held
}

// waiting counts the runs of a standing waiting for the turn.
func (q *turnQueue) waiting(s standing) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters[s])
}
