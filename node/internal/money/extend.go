package money

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Leases that grow: a renter extending a running job's lease first raises the job's escrow
// hold (the wallet stream's extend op), then asks the provider for the longer lease
// (node/internal/jobs/extend.go). docs/protocols/settlement.md, "extend".

// serveExtend raises remote's held hold of req.Job to req.Amount and its expiry to
// req.ExpiresAt, and answers the newly signed hold.
func (s *walletServer) serveExtend(_ context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	raw, err := s.holds.extend(remote, req)
	return protocol.WalletResponse{Hold: raw}, err
}

// extend raises a renter's held hold, if its available funds cover the difference, and
// signs it again with its new amount and expiry (the same job, renter, provider,
// commission and issue time). The expiry stays within maxHoldPeriod of the hold's issue:
// a lease, however often extended, lasts at most protocol.MaxJobDuration.
func (s *holds) extend(renter peer.ID, req protocol.WalletRequest) ([]byte, error) {
	now := s.clock.Now()
	switch {
	case !protocol.ValidJobID(req.Job):
		return nil, fmt.Errorf("job %q is not 16 lower-case hex digits", req.Job)
	case req.Amount <= 0 || req.Amount > protocol.MicroUSDC(1<<53):
		return nil, fmt.Errorf("hold amount %d out of range", req.Amount)
	case !req.ExpiresAt.After(now):
		return nil, fmt.Errorf("hold expiry %s is past", req.ExpiresAt.UTC().Format(time.RFC3339))
	}
	h, err := s.ledger.Escrow.GetHold(req.Job)
	if err != nil {
		return nil, fmt.Errorf("job %s has no escrow hold here", req.Job)
	}
	if req.ExpiresAt.After(h.IssuedAt.Add(maxHoldPeriod)) {
		return nil, fmt.Errorf("hold expiry %s out of range: a job's hold lasts at most %s", req.ExpiresAt.UTC().Format(time.RFC3339), maxHoldPeriod)
	}
	seal := func(h ledger.Hold) ([]byte, error) {
		return protocol.Seal(protocol.KindEscrowHold, protocol.EscrowHold{Version: protocol.SettlementVersion, Coordinator: s.id.String(),
			Renter: h.Renter, Provider: h.Provider, Job: h.Job, Amount: h.Amount, CommissionBPS: h.CommissionBPS,
			IssuedAt: h.IssuedAt.UTC(), ExpiresAt: h.ExpiresAt.UTC()}, s.key)
	}
	h, err = s.ledger.Escrow.ExtendHold(req.Job, renter.String(), req.Amount, req.ExpiresAt, seal)
	if err != nil {
		return nil, err
	}
	s.log.Info("hold extended", "job", h.Job, "renter", renter, "usdc", h.Amount.String(), "expires", h.ExpiresAt)
	return h.Raw, nil
}

// ExtendHold asks the coordinator holding a job's escrow to raise its hold to amount and
// its expiry to expiresAt, and returns the signed hold, checked.
func (w *Wallet) ExtendHold(ctx context.Context, j ledger.Job, amount protocol.MicroUSDC, expiresAt time.Time) ([]byte, error) {
	c := protocol.HoldCoordinator(j.Proposal)
	if c == "" {
		return nil, errors.New("the job has no escrow hold: there is no coordinator to extend it with")
	}
	resp, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "extend", Job: j.ID, Amount: amount, ExpiresAt: expiresAt})
	if err != nil {
		return nil, err
	}
	h, err := protocol.CheckHold(resp.Hold, w.clock.Now(), protocol.NewTrust(c))
	if err != nil {
		return nil, fmt.Errorf("coordinator %s answered with a hold that does not check: %w", c, err)
	}
	if h.Job != j.ID || h.Renter != w.id.String() || h.Amount < amount || h.ExpiresAt.Before(expiresAt) {
		return nil, fmt.Errorf("coordinator %s answered with a hold for another job, renter, amount or expiry", c)
	}
	return resp.Hold, nil
}
