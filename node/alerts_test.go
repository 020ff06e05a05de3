package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/alerts"
	"github.com/gpunex/gpunex/node/internal/noticetest"
	"github.com/gpunex/gpunex/node/internal/p2p"
)

// TestOperatorAlerts: a provider's node tells its operator by e-mail and webhook that a GPU
// was delisted (with the metric, value, threshold and what to check), that its disk is
// filling up and that its certificate expires soon: each once, however many checks run,
// and once more when it is resolved.
func TestOperatorAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	every := alerts.CheckEvery
	alerts.CheckEvery = 100 * time.Millisecond
	t.Cleanup(func() { alerts.CheckEvery = every })
	smtpSrv := noticetest.StartSMTP(t, "", "", nil)
	hook := noticetest.StartWebhook(t, http.StatusOK)
	tn := newTestNet(t)
	cfg := testConfig(config.RoleProvider)
	cfg.Provider.Region = "eu-west"
	cfg.Provider.GPUs = []config.GPUConfig{{Model: "L4-24GB", Count: 1, VRAMGB: 24, PriceUSDC: "0.50", Simulated: true, PerfFactor: 0.45}}
	cfg.Alerts = config.AlertsConfig{Email: "ops@example.org", SMTPAddr: smtpSrv.Addr(), SMTPFrom: "node@gpunex.invalid", WebhookURL: hook.URL,
		DiskFreeGB: 1 << 40, CertificateDays: 100_000, ScoreBelow: 60}
	prov := tn.addWith(cfg, Deps{Home: t.TempDir()})

	subjects := func() []string {
		var out []string
		for _, m := range smtpSrv.Messages() {
			out = append(out, noticetest.DecodeMail(t, m.Data).Subject)
		}
		return out
	}
	count := func(prefix string) int {
		n := 0
		for _, s := range subjects() {
			if strings.HasPrefix(s, "gpunex: "+prefix) {
				n++
			}
		}
		return n
	}
	eventually(t, 20*time.Second, "the three alerts", func() (bool, string) {
		return count("GPU ") == 1 && count("the disk is filling up") == 1 && count("the certificate expires in") == 1, fmt.Sprint(subjects())
	})
	time.Sleep(time.Second) // ten more checks: nothing new
	if n := len(smtpSrv.Messages()); n != 3 {
		t.Fatalf("%d mails after ten more checks: %q", n, subjects())
	}
	var delisted string
	for _, m := range smtpSrv.Messages() {
		if d := noticetest.DecodeMail(t, m.Data); strings.Contains(d.Subject, "delisted") {
			delisted = d.Body
		}
		if len(m.To) != 1 || m.To[0] != "ops@example.org" {
			t.Fatalf("mail to %v", m.To)
		}
	}
	if !strings.Contains(delisted, "tensor_tflops") || !strings.Contains(delisted, "under the threshold of 60.5 TFLOPS") ||
		!strings.Contains(delisted, "check cooling") || !strings.Contains(delisted, "provider "+prov.ID().String()) {
		t.Fatalf("the delisting mail:\n%s", delisted)
	}

	// Space freed: told once that it is resolved.
	prov.cfg.Alerts.DiskFreeGB = 1
	eventually(t, 10*time.Second, "the disk resolved", func() (bool, string) {
		return count("the disk has room again") == 1, fmt.Sprint(subjects())
	})
	time.Sleep(500 * time.Millisecond)
	if n := len(smtpSrv.Messages()); n != 4 {
		t.Fatalf("%d mails: %q", n, subjects())
	}
	eventually(t, 10*time.Second, "the webhook got them too", func() (bool, string) { return hook.Delivered() == 4, fmt.Sprint(hook.Delivered()) })
	states := map[string]int{}
	for _, r := range hook.Requests() {
		var body struct {
			Event struct {
				Node  string `json:"node"`
				Alert string `json:"alert"`
				State string `json:"state"`
			} `json:"event"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || body.Event.Node != "provider "+prov.ID().String() {
			t.Fatalf("webhook body %s: %v", r.Body, err)
		}
		states[body.Event.Alert+"/"+body.Event.State]++
	}
	if states["benchmarks/event"] != 1 || states["disk/firing"] != 1 || states["disk/resolved"] != 1 || states["certificate-expiring/firing"] != 1 {
		t.Fatalf("webhook events: %v", states)
	}
}

// TestUnreachableAlertRule: a certified provider is told it is unreachable once peers found
// it behind a NAT and no coordinator gave it a relay slot for 5 minutes; not before (a slot
// is asked for every 20 s), not while AutoNAT has no verdict, not once it is public or
// relayed, and never before it is certified (nobody needs to reach it).
func TestUnreachableAlertRule(t *testing.T) {
	since := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	private := p2p.Reachability{State: "private", Since: since}
	cases := []struct {
		name          string
		r             p2p.Reachability
		certified     bool
		at            time.Duration
		firing, known bool
	}{
		{"behind NAT, no relay, 5 minutes", private, true, 5 * time.Minute, true, true},
		{"behind NAT, no relay, 4 minutes", private, true, 4 * time.Minute, false, false},
		{"no verdict yet", p2p.Reachability{State: "unknown"}, true, time.Hour, false, false},
		{"relayed", p2p.Reachability{State: "private", Since: since, Relays: []string{"/p2p-circuit"}}, true, time.Hour, false, true},
		{"public", p2p.Reachability{State: "public", Since: since}, true, time.Hour, false, true},
		{"not certified", private, false, time.Hour, false, true},
	}
	for _, c := range cases {
		firing, subject, body, ok := unreachable(c.r, c.certified, since.Add(c.at))
		if firing != c.firing || ok != c.known {
			t.Errorf("%s: firing %v known %v; want %v %v", c.name, firing, ok, c.firing, c.known)
		}
		if firing && (subject != "the node is unreachable from outside" || !strings.Contains(body, "Forward TCP and UDP 4001") || !strings.Contains(body, "Sat, 05 Dec 2026 10:00:00 UTC")) {
			t.Errorf("%s: the alert says %q: %s", c.name, subject, body)
		}
	}
}
