package money

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// A change of where a provider is paid, asked for from a dashboard session, waits for
// [payout] change_delay before it applies: a session taken over (a leaked install link, a
// stolen browser) cannot send the next payout elsewhere before the operator, alerted at
// once, cancels it. Confirmed on the node's own terminal (gpunex payout confirm, with the
// API token only the machine's user can read), it applies at once. docs/settlement.md.

// ErrNoPayoutChange is the answer to a cancel or confirm with no change waiting.
var ErrNoPayoutChange = errors.New("no payout settings change is waiting")

// RequestPayoutChange keeps a change of the payout settings (ps nil: back to config.toml's)
// to apply after [payout] change_delay, and returns it; with no delay it applies at once.
func (w *Wallet) RequestPayoutChange(ps *protocol.PayoutSettings) (ledger.PayoutChange, error) {
	if ps != nil {
		ps.Provider, ps.Seq, ps.IssuedAt = "", 0, time.Time{}
		if err := ps.Validate(); err != nil {
			return ledger.PayoutChange{}, err
		}
	}
	now := w.clock.Now().UTC()
	c := ledger.PayoutChange{Settings: ps, Remove: ps == nil, RequestedAt: now, ApplyAt: now.Add(w.cfg.Payout.ChangeDelay.Duration)}
	if w.cfg.Payout.ChangeDelay.Duration <= 0 {
		return c, w.SetPayoutSettings(ps)
	}
	if err := w.ledger.Wallet.SetPendingPayout(&c); err != nil {
		return c, err
	}
	w.poke() // the loop waits for its time
	return c, nil
}

// PendingPayoutChange returns the change waiting to apply, if any.
func (w *Wallet) PendingPayoutChange() (*ledger.PayoutChange, error) {
	c, err := w.ledger.Wallet.PendingPayoutChange()
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// CancelPayoutChange forgets the change waiting to apply.
func (w *Wallet) CancelPayoutChange() (ledger.PayoutChange, error) {
	c, err := w.PendingPayoutChange()
	if err != nil {
		return ledger.PayoutChange{}, err
	}
	if c == nil {
		return ledger.PayoutChange{}, ErrNoPayoutChange
	}
	return *c, w.ledger.Wallet.SetPendingPayout(nil)
}

// ConfirmPayoutChange applies the change waiting, at once: only the node's own terminal may
// ask (the local API checks that the request carries the API token).
func (w *Wallet) ConfirmPayoutChange() (ledger.PayoutChange, error) {
	c, err := w.PendingPayoutChange()
	if err != nil {
		return ledger.PayoutChange{}, err
	}
	if c == nil {
		return ledger.PayoutChange{}, ErrNoPayoutChange
	}
	return *c, w.applyPayoutChange(*c)
}

// ApplyDuePayoutChange applies the change waiting once its time has come, and returns it
// (nil when none applied).
func (w *Wallet) ApplyDuePayoutChange() (*ledger.PayoutChange, error) {
	c, err := w.PendingPayoutChange()
	if err != nil || c == nil || w.clock.Now().Before(c.ApplyAt) {
		return nil, err
	}
	return c, w.applyPayoutChange(*c)
}

// applyPayoutChange puts a change in force and forgets it as waiting.
func (w *Wallet) applyPayoutChange(c ledger.PayoutChange) error {
	if err := w.SetPayoutSettings(c.Settings); err != nil {
		return fmt.Errorf("the payout settings change: %w", err)
	}
	w.log.Info("payout settings change applied", "requested_at", c.RequestedAt, "remove", c.Remove)
	return w.ledger.Wallet.SetPendingPayout(nil)
}

// payoutChangeDue is a channel that fires when the change waiting is due, nil when none
// waits (a nil channel never fires).
func (w *Wallet) payoutChangeDue() <-chan time.Time {
	c, err := w.PendingPayoutChange()
	if err != nil || c == nil {
		return nil
	}
	return w.clock.After(max(0, c.ApplyAt.Sub(w.clock.Now())))
}

// DescribePayoutChange says in words what a change does.
func DescribePayoutChange(c ledger.PayoutChange) string {
	if c.Remove || c.Settings == nil {
		return "back to [payout] of config.toml."
	}
	return fmt.Sprintf("paid %s by %s to %s.", c.Settings.Schedule, c.Settings.Method, c.Settings.Destination())
}
