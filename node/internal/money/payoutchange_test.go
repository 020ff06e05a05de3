package money

import (
	"errors"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// TestPayoutChangeWaits: a payout settings change asked for from a dashboard session is not
// in force until [payout] change_delay has passed, then applies; a cancelled change never
// applies; a confirmed one (the node's terminal) applies at once.
func TestPayoutChangeWaits(t *testing.T) {
	c := newCoordinator(t, func(cfg *config.Config) { cfg.Payout.ChangeDelay = config.Duration{Duration: 24 * time.Hour} })
	deps := c.deps.Deps
	me := newParty()
	deps.Peer = &p2p.Peer{ID: me.id, Key: me.key}
	w := NewWallet(deps, nil)
	inForce := func() *protocol.PayoutSettings {
		t.Helper()
		ps, _, err := w.PayoutSettings()
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	usdc := &protocol.PayoutSettings{Version: protocol.SettlementVersion, Method: protocol.PayoutUSDC, Schedule: protocol.PayoutWeekly,
		SolanaAddress: c.treasury.PublicKey().String()}
	asked := c.clock.Now()
	ch, err := w.RequestPayoutChange(usdc)
	if err != nil || !ch.ApplyAt.Equal(asked.Add(24*time.Hour)) {
		t.Fatalf("the change: %+v %v", ch, err)
	}
	if inForce() != nil {
		t.Fatal("a change from the dashboard applied at once")
	}
	c.clock.Advance(24*time.Hour - time.Second)
	if applied, _ := w.ApplyDuePayoutChange(); applied != nil || inForce() != nil {
		t.Fatal("the change applied before its delay")
	}
	c.clock.Advance(time.Second)
	if applied, err := w.ApplyDuePayoutChange(); err != nil || applied == nil {
		t.Fatalf("the change after its delay: %v", err)
	}
	if ps := inForce(); ps == nil || ps.SolanaAddress != usdc.SolanaAddress {
		t.Fatalf("in force after the delay: %+v", ps)
	}
	if p, _ := w.PendingPayoutChange(); p != nil {
		t.Fatalf("still waiting after it applied: %+v", p)
	}

	// Cancelled: it never applies.
	bank := &protocol.PayoutSettings{Version: protocol.SettlementVersion, Method: protocol.PayoutBank, Schedule: protocol.PayoutMonthly,
		AccountName: "Mallory", IBAN: "FR1420041010050500013M02606", BIC: "PSSTFRPPPAR"}
	if _, err := w.RequestPayoutChange(bank); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CancelPayoutChange(); err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(48 * time.Hour)
	if applied, _ := w.ApplyDuePayoutChange(); applied != nil || inForce().Method != protocol.PayoutUSDC {
		t.Fatalf("a cancelled change applied: %+v", inForce())
	}
	if _, err := w.CancelPayoutChange(); !errors.Is(err, ErrNoPayoutChange) {
		t.Fatalf("a cancel with nothing waiting: %v", err)
	}

	// Confirmed on the terminal: at once.
	if _, err := w.RequestPayoutChange(bank); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ConfirmPayoutChange(); err != nil {
		t.Fatal(err)
	}
	if ps := inForce(); ps.Method != protocol.PayoutBank || ps.IBAN != bank.IBAN {
		t.Fatalf("in force after the confirmation: %+v", ps)
	}
	if _, err := w.ConfirmPayoutChange(); !errors.Is(err, ErrNoPayoutChange) {
		t.Fatalf("confirmed twice: %v", err)
	}
}
