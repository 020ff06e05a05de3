package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// TestPayoutSettingsFromAPI: a provider changes how it is paid from its dashboard's API;
// the coordinator holds the new signed settings, the provider sees them delivered, a wrong
// IBAN is refused by field, and the node keeps the settings in its ledger.
func TestPayoutSettingsFromAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn := newTestNet(t)
	prov := tn.add(providerConfig(0), nil)
	cl := apiClient(t, prov)
	ctx := context.Background()

	var v api.PayoutSettingsView
	if err := cl.Do(ctx, "GET", "/v1/provider/payout", nil, &v); err != nil || v.Settings != nil || !v.FromConfig {
		t.Fatalf("before: %+v %v", v, err)
	}
	// As typed in a form: spaces and small letters.
	req := api.PayoutRequest{Method: "bank", Schedule: "monthly", AccountName: "Ada GPU SARL", IBAN: "fr14 2004 1010 0505 0001 3M02 606", BIC: "psstfrpppar"}
	if err := cl.Do(ctx, "PUT", "/v1/provider/payout", req, &v); err != nil {
		t.Fatal(err)
	}
	if v.FromConfig || v.Settings.IBAN != "FR1420041010050500013M02606" || v.Settings.BIC != "PSSTFRPPPAR" {
		t.Fatalf("after PUT: %+v", v)
	}
	eventually(t, 10*time.Second, "the coordinator holds the new settings", func() (bool, string) {
		s, err := tn.boot.ledger.Payouts.GetPayoutSettings(prov.ID().String())
		return err == nil && s.IBAN == "FR1420041010050500013M02606" && s.Method == protocol.PayoutBank, ""
	})
	eventually(t, 5*time.Second, "the provider sees them delivered", func() (bool, string) {
		cl.Do(ctx, "GET", "/v1/provider/payout", nil, &v)
		return len(v.Deliveries) == 1 && v.Deliveries[0].DeliveredAt != nil && v.Deliveries[0].Coordinator == tn.boot.ID().String(), ""
	})

	bad := req
	bad.IBAN = "FR1420041010050500013M02607" // one digit off: the check digits fail
	err := cl.Do(ctx, "PUT", "/v1/provider/payout", bad, &v)
	if err == nil || !strings.Contains(err.Error(), "iban") {
		t.Fatalf("a wrong IBAN: %v", err)
	}
	// There is no [payout] in config.toml to go back to.
	if err := cl.Do(ctx, "DELETE", "/v1/provider/payout", nil, &v); err == nil || !strings.Contains(err.Error(), "no [payout]") {
		t.Fatalf("DELETE without [payout]: %v", err)
	}
	usdc := api.PayoutRequest{Method: "usdc", Schedule: "weekly", SolanaAddress: "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"}
	if err := cl.Do(ctx, "PUT", "/v1/provider/payout", usdc, &v); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the coordinator pays to the wallet now", func() (bool, string) {
		s, _ := tn.boot.ledger.Payouts.GetPayoutSettings(prov.ID().String())
		return s.Method == protocol.PayoutUSDC && s.SolanaAddress == usdc.SolanaAddress, s.Method
	})
	if s, err := prov.ledger.Wallet.OwnPayoutSettings(); err != nil || s.Schedule != "weekly" {
		t.Fatalf("kept in the ledger: %+v %v", s, err)
	}
}
