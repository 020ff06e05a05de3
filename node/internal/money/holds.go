package money

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/protocol"
)

// Escrow holds: a renter's funds set aside for one job on one provider, signed by the
// coordinator; returned when the job never ran or when the hold expires unused.
// docs/settlement.md, "Escrow rules".

// Offers are the live offers this node holds (market statistics count them).
type Offers interface {
	Live(now time.Time) []*protocol.SignedOffer
	// Get returns the offer held from a provider (nil when none).
	Get(p peer.ID) (*protocol.SignedOffer, time.Time)
}

// certifiedHere says whether a provider is certified as this coordinator sees it: its offer
// in the coordinator's book carries a certificate of a coordinator this one trusts (itself
// among them; the book takes no other, and drops offers whose certificate was revoked).
// Holds are placed, and job reports heard, only for such providers.
func certifiedHere(offers Offers, p peer.ID) bool {
	so, _ := offers.Get(p)
	return so != nil && so.Cert != nil
}

// Asker asks a peer one question on a stream protocol and reads its answer (a *p2p.Peer;
// a fake provider in the tests).
type Asker interface {
	Exchange(ctx context.Context, id peer.ID, proto string, timeout time.Duration, req any, max int, resp any) error
}

// holds places, releases and expires escrow holds.
type holds struct {
	id      peer.ID
	key     crypto.PrivKey // signs the holds
	ledger  Stores
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	offers  Offers
	// providers are asked whether a job ran before its hold is released.
	providers     Asker
	commissionBPS int
	halfLife      time.Duration // of the providers' completion score
}

// maxHoldPeriod bounds a hold's life: the longest job, the proposal's life and the grace.
const maxHoldPeriod = protocol.MaxJobDuration + protocol.ProposalTTL + protocol.HoldGrace + time.Hour

// place sets aside a renter's funds for a job and signs the hold.
func (s *holds) place(renter peer.ID, req protocol.WalletRequest) ([]byte, error) {
	now := s.clock.Now()
	prov, err := peer.Decode(req.Provider)
	switch {
	case err != nil:
		return nil, fmt.Errorf("provider %q is not a peer ID", req.Provider)
	case !protocol.ValidJobID(req.Job):
		return nil, fmt.Errorf("job %q is not 16 lower-case hex digits", req.Job)
	case !certifiedHere(s.offers, prov):
		return nil, fmt.Errorf("provider %s has no certified offer at this coordinator (not certified by a coordinator it trusts, or its offer has not reached it yet): no hold for it", prov)
	case req.Amount <= 0 || req.Amount > protocol.MicroUSDC(1<<53):
		return nil, fmt.Errorf("hold amount %d out of range", req.Amount)
	case !req.ExpiresAt.After(now) || req.ExpiresAt.After(now.Add(maxHoldPeriod)):
		return nil, fmt.Errorf("hold expiry %s out of range (at most %s ahead)", req.ExpiresAt.UTC().Format(time.RFC3339), maxHoldPeriod)
	}
	h := protocol.EscrowHold{Version: protocol.SettlementVersion, Coordinator: s.id.String(), Renter: renter.String(),
		Provider: prov.String(), Job: req.Job, Amount: req.Amount, CommissionBPS: s.commissionBPS,
		IssuedAt: now.UTC(), ExpiresAt: req.ExpiresAt.UTC()}
	if prev, err := s.ledger.Escrow.GetHold(req.Job); err == nil {
		return prev.Raw, checkSameHold(prev, h)
	}
	raw, err := protocol.Seal(protocol.KindEscrowHold, h, s.key)
	if err != nil {
		return nil, err
	}
	stored, err := s.ledger.Escrow.PlaceHold(ledger.Hold{Job: h.Job, Renter: h.Renter, Provider: h.Provider, Amount: h.Amount,
		CommissionBPS: h.CommissionBPS, IssuedAt: h.IssuedAt, ExpiresAt: h.ExpiresAt, Raw: raw})
	if err != nil {
		return nil, err
	}
	return stored.Raw, nil
}

func checkSameHold(prev ledger.Hold, h protocol.EscrowHold) error {
	if prev.Renter != h.Renter || prev.Provider != h.Provider || prev.Amount != h.Amount || prev.State != ledger.HoldHeld {
		return fmt.Errorf("job %s already has a %s hold of %s USDC", h.Job, prev.State, prev.Amount)
	}
	return nil
}

// release returns a renter's hold for a job the provider confirms never ran.
func (s *holds) release(ctx context.Context, renter peer.ID, job string) (ledger.Hold, error) {
	h, err := s.ledger.Escrow.GetHold(job)
	switch {
	case err != nil:
		return h, fmt.Errorf("job %s: no hold: %w", job, err)
	case h.Renter != renter.String():
		return h, fmt.Errorf("job %s: the hold is not yours", job)
	case h.State != ledger.HoldHeld:
		return h, fmt.Errorf("job %s: the hold is already %s", job, h.State)
	}
	prov, err := peer.Decode(h.Provider)
	if err != nil {
		return h, err
	}
	var a protocol.HoldRelease
	if err := s.providers.Exchange(ctx, prov, protocol.HoldReleaseProtocol, 15*time.Second, protocol.HoldRelease{Job: job}, 1024, &a); err != nil {
		return h, fmt.Errorf("the provider cannot be asked whether job %s ran (%v): the hold returns at %s", job, err, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if !a.Release || a.Job != job {
		return h, fmt.Errorf("the provider does not release job %s: %s", job, a.Reason)
	}
	h, err = s.ledger.Escrow.ReleaseHold(job)
	if err == nil {
		s.log.Info("hold released: the job never ran", "job", job, "renter", renter, "usdc", h.Amount.String())
	}
	return h, err
}
