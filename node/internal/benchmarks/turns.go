package benchmarks

import (
	"errors"
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
func (c *Coordinator) takeTurn(p peer.ID, now time.Time) bool {
	c.turnsMu.Lock()
	defer c.turnsMu.Unlock()
	if c.turns == nil || len(c.turns) > 100_000 {
		c.turns = map[peer.ID][]time.Time{} // a flood of identities costs them their history, not our memory
	}
	kept := c.turns[p][:0]
	for _, t := range c.turns[p] {
		if now.Sub(t) < time.Hour {
			kept = append(kept, t)
		}
	}
	if len(kept) >= c.turnsPerHour {
		c.turns[p] = kept
		return false
	}
	c.turns[p] = append(kept, now)
	return true
}
