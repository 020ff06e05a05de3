package node

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// The provider's payout settings from the dashboard (docs/api.md, docs/settlement.md): how
// and when it is paid, which replace [payout] of config.toml until removed.

func (a *APIServer) payoutRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/provider/payout", answer: a.payoutSettings},
		{pattern: "PUT /v1/provider/payout", answer: a.setPayoutSettings},
		{pattern: "DELETE /v1/provider/payout", answer: a.removePayoutSettings},
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
	if err := a.n.wallet.SetPayoutSettings(ps); err != nil {
		var fe *protocol.FieldError
		if errors.As(err, &fe) {
			return nil, api.Invalid(err)
		}
		return nil, err
	}
	// Where the money goes is what someone who took the dashboard would change: the
	// operator hears of it.
	a.n.alerts.Event("payout-settings", "Payout settings changed",
		fmt.Sprintf("From now on this provider is paid %s by %s to %s.", ps.Schedule, ps.Method, ps.Destination()))
	a.n.log.Info("payout settings changed from the API", "method", ps.Method, "schedule", ps.Schedule, "to", ps.Destination())
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
	if err := a.n.wallet.SetPayoutSettings(nil); err != nil {
		return nil, err
	}
	a.n.alerts.Event("payout-settings", "Payout settings back to config.toml",
		"The payout settings chosen from the dashboard were removed; [payout] of config.toml is in force.")
	return a.n.wallet.PayoutSettingsView()
}
