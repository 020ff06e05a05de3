package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/dashboard"
	"github.com/gpunex/gpunex/node/internal/noticetest"
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

// TestPayoutChangeFromSession: a payout destination changed from a dashboard session is not
// in force at once: it waits for payout.change_delay, the operator is alerted that it was
// asked for, the session may cancel it but not confirm it (403), and the CLI's API token
// on the node's terminal confirms it at once.
func TestPayoutChangeFromSession(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	smtpSrv := noticetest.StartSMTP(t, "", "", nil)
	tn := newTestNet(t)
	cfg := providerConfig(0)
	cfg.Alerts = config.AlertsConfig{Email: "ops@example.org", SMTPAddr: smtpSrv.Addr(), SMTPFrom: "node@gpunex.invalid", ScoreBelow: 60}
	prov := tn.add(cfg, nil)
	base, link := serveDashboard(t, prov)
	r, err := noRedirects.Get(link())
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	m := regexp.MustCompile(`#key=([0-9a-f]{64})$`).FindStringSubmatch(r.Header.Get("Location"))
	if m == nil || len(r.Cookies()) == 0 {
		t.Fatalf("no session: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	session := func(method, path string, body any) (int, api.PayoutSettingsView) {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(raw))
		req.AddCookie(r.Cookies()[0])
		req.Header.Set(dashboard.KeyHeader, m[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v api.PayoutSettingsView
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	usdc := api.PayoutRequest{Method: "usdc", Schedule: "weekly", SolanaAddress: "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"}
	code, v := session("PUT", "/v1/provider/payout", usdc)
	if code != 200 || v.Settings != nil || v.Pending == nil || v.Pending.Settings.SolanaAddress != usdc.SolanaAddress ||
		v.Pending.ApplyAt.Sub(v.Pending.RequestedAt) != 24*time.Hour {
		t.Fatalf("a change from a session: %d %+v", code, v)
	}
	eventually(t, 10*time.Second, "the operator is alerted", func() (bool, string) {
		for _, msg := range smtpSrv.Messages() {
			d := noticetest.DecodeMail(t, msg.Data)
			if strings.Contains(d.Subject, "Payout settings change asked for") && strings.Contains(d.Body, usdc.SolanaAddress) &&
				strings.Contains(d.Body, "gpunex payout confirm") {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(smtpSrv.Messages()), " mails")
	})
	if code, _ := session("POST", "/v1/provider/payout/confirm", nil); code != http.StatusForbidden {
		t.Fatalf("a session confirmed the change: %d", code)
	}
	if ps, _, _ := prov.wallet.PayoutSettings(); ps != nil {
		t.Fatalf("in force before the delay: %+v", ps)
	}
	// The session may cancel; a new change, confirmed on the terminal, applies at once.
	if code, v := session("DELETE", "/v1/provider/payout/pending", nil); code != 200 || v.Pending != nil {
		t.Fatalf("cancel from the session: %d %+v", code, v)
	}
	if code, _ := session("PUT", "/v1/provider/payout", usdc); code != 200 {
		t.Fatalf("the change again: %d", code)
	}
	cl := apiClient(t, prov)
	v = api.PayoutSettingsView{}
	if err := cl.Do(context.Background(), "POST", "/v1/provider/payout/confirm", nil, &v); err != nil || v.Pending != nil ||
		v.Settings == nil || v.Settings.SolanaAddress != usdc.SolanaAddress {
		t.Fatalf("confirmed on the terminal: %+v %v", v, err)
	}
}
