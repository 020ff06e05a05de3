package node

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/money"
	"github.com/gpunex/gpunex/protocol"
)

// The provider's payout settings from the dashboard (docs/api.md, docs/settlement.md): how
// and when it is paid, which replace [payout] of config.toml until removed.

func (a *APIServer) payoutRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/provider/payout", answer: a.payoutSettings},
		{pattern: "PUT /v1/provider/payout", answer: a.setPayoutSettings},
		{pattern: "DELETE /v1/provider/payout", answer: a.removePayoutSettings},
		{pattern: "POST /v1/provider/payout/confirm", answer: a.confirmPayoutChange},
		{pattern: "DELETE /v1/provider/payout/pending", answer: a.cancelPayoutChange},
	}
}

func (a *APIServer) payoutSettings(r *http.Request) (any, error) {
	if err := a.providerOnly(); err != nil {
		return nil, err
	}
	return a.n.wallet.PayoutSettingsView()
}

// setPayoutSettings signs new payout settings, which replace [payout] of config.toml, and
// tells the operator.
func (a *APIServer) setPayoutSettings(r *http.Request) (any, error) {
	if err := a.providerOnly(); err != nil {
		return nil, err
	}
	var req api.PayoutRequest
	if err := decodeBody(r, 4096, &req); err != nil {
		return nil, err
	}
	compact := func(s string) string { return strings.ToUpper(strings.Join(strings.Fields(s), "")) }
	ps := &protocol.PayoutSettings{Version: protocol.SettlementVersion, Method: req.Method, Schedule: req.Schedule}
	switch req.Method {
	case protocol.PayoutUSDC:
		ps.SolanaAddress = strings.TrimSpace(req.SolanaAddress)
	case protocol.PayoutBank:
		ps.AccountName, ps.IBAN, ps.BIC = strings.TrimSpace(req.AccountName), compact(req.IBAN), compact(req.BIC)
	}
	what := fmt.Sprintf("paid %s by %s to %s", ps.Schedule, ps.Method, ps.Destination())
	if err := a.changePayout(r, ps, what); err != nil {
		var fe *protocol.FieldError
		if errors.As(err, &fe) {
			return nil, api.Invalid(err)
		}
		return nil, err
	}
	a.n.log.Info("payout settings changed from the API", "method", ps.Method, "schedule", ps.Schedule, "to", ps.Destination())
	return a.n.wallet.PayoutSettingsView()
}

// fromTerminal says whether a request carries the API token (api.token in the node's home,
// which only the machine's user can read: the CLI on the node), not a dashboard session.
func (a *APIServer) fromTerminal(r *http.Request) bool {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(auth), []byte(a.token)) == 1
}

// changePayout puts new payout settings in force (nil: config.toml's): at once from the
// node's terminal; from a dashboard session after [payout] change_delay, which a session
// taken over cannot shorten. Where the money goes is what someone who took the dashboard
// would change: the operator hears of it either way.
func (a *APIServer) changePayout(r *http.Request, ps *protocol.PayoutSettings, what string) error {
	if a.fromTerminal(r) {
		if err := a.n.wallet.SetPayoutSettings(ps); err != nil {
			return err
		}
		a.n.alerts.Event("payout-settings", "Payout settings changed", "From now on this provider is "+what+".")
		return nil
	}
	c, err := a.n.wallet.RequestPayoutChange(ps)
	if err != nil {
		return err
	}
	if !c.ApplyAt.After(c.RequestedAt) {
		a.n.alerts.Event("payout-settings", "Payout settings changed", "From now on this provider is "+what+".")
		return nil
	}
	a.n.alerts.Event("payout-settings", "Payout settings change asked for from the dashboard",
		fmt.Sprintf("From %s this provider will be %s. If you did not ask for it, cancel it in the dashboard's Payments tab "+
			"(or gpunex payout cancel on the node) and revoke the dashboard sessions; to apply it at once, run gpunex payout confirm on the node.",
			c.ApplyAt.UTC().Format("2006-01-02 15:04 MST"), what))
	return nil
}

// confirmPayoutChange applies the change waiting at once: from the node's terminal only.
func (a *APIServer) confirmPayoutChange(r *http.Request) (any, error) {
	if err := a.providerOnly(); err != nil {
		return nil, err
	}
	if !a.fromTerminal(r) {
		return nil, fmt.Errorf("%w: a payout settings change is confirmed on the node's terminal (gpunex payout confirm), not from a dashboard session", api.ErrForbidden)
	}
	c, err := a.n.wallet.ConfirmPayoutChange()
	if errors.Is(err, money.ErrNoPayoutChange) {
		return nil, api.Conflict(err)
	} else if err != nil {
		return nil, err
	}
	a.n.alerts.Event("payout-settings", "Payout settings changed", "Confirmed on the node's terminal: "+money.DescribePayoutChange(c))
	return a.n.wallet.PayoutSettingsView()
}

// cancelPayoutChange forgets the change waiting.
func (a *APIServer) cancelPayoutChange(r *http.Request) (any, error) {
	if err := a.providerOnly(); err != nil {
		return nil, err
	}
	c, err := a.n.wallet.CancelPayoutChange()
	if errors.Is(err, money.ErrNoPayoutChange) {
		return nil, api.Conflict(err)
	} else if err != nil {
		return nil, err
	}
	a.n.alerts.Event("payout-settings", "Payout settings change cancelled", "Cancelled, never applied: "+money.DescribePayoutChange(c))
	return a.n.wallet.PayoutSettingsView()
}

// removePayoutSettings goes back to [payout] of config.toml.
func (a *APIServer) removePayoutSettings(r *http.Request) (any, error) {
	if err := a.providerOnly(); err != nil {
		return nil, err
	}
	// Without [payout] in config.toml there is nothing to go back to, and the coordinators
	// would go on paying where the removed settings said.
	if a.n.cfg.Payout.Settings() == nil {
		return nil, api.Invalid(errors.New("config.toml has no [payout] to go back to: change the settings instead of removing them"))
	}
	if _, fromConfig, err := a.n.wallet.PayoutSettings(); err != nil {
		return nil, err
	} else if fromConfig {
		return nil, api.Invalid(errors.New("no payout settings were chosen from the dashboard: those of config.toml are in force"))
	}
	if err := a.changePayout(r, nil, "paid as [payout] of config.toml says (the settings chosen from the dashboard removed)"); err != nil {
		return nil, err
	}
	return a.n.wallet.PayoutSettingsView()
}
