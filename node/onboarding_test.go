package node

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/noticetest"
	"github.com/gpunex/gpunex/node/internal/subsystem"

	"github.com/gpunex/gpunex/node/internal/onboarding"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// fastOnboarding shortens the applicant's retry and status timers for a test.
func fastOnboarding(t *testing.T) {
	minR, maxR, poll := onboarding.ApplyRetryMin, onboarding.ApplyRetryMax, onboarding.ApplyStatusPoll
	onboarding.ApplyRetryMin, onboarding.ApplyRetryMax, onboarding.ApplyStatusPoll = 100*time.Millisecond, 500*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() {
		onboarding.ApplyRetryMin, onboarding.ApplyRetryMax, onboarding.ApplyStatusPoll = minR, maxR, poll
	})
}

// applicationForm fills in an application for a provider's declared GPUs.
func applicationForm(cfg config.Config, ups bool, months int) protocol.Application {
	var gpus []protocol.ApplicationGPU
	for _, g := range cfg.Provider.GPUs {
		gpus = append(gpus, protocol.ApplicationGPU{
			Model: g.Model, Count: g.Count, HostRAMGB: 256, UpGbps: 2, DownGbps: 2, Availability: "24/7",
			Location: protocol.Location{City: "Lyon", Country: "FR", Region: cfg.Provider.Region},
		})
	}
	return protocol.Application{Name: "Ada Lovelace", Email: "ada@example.org", GPUs: gpus, UPS: ups, CommitmentMonths: months}
}

// applyApproved has provider p apply to coord with the test form (UPS, 12 months) and coord
// approve it, as alice, through the real application flow; it returns once p holds its
// certificate.
func applyApproved(t *testing.T, coord, p *Node) {
	t.Helper()
	own, err := p.applicant.Submit(applicationForm(p.cfg, true, 12))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p, protocol.StatusPending)
	if _, err := coord.coord.Decide(own.ID, api.Decision{Action: "approve", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p, protocol.StatusApproved)
}

func ownStatus(n *Node) string {
	own, err := n.ledger.Applicant.GetOwnApplication()
	if err != nil {
		return "none"
	}
	return own.Status
}

func waitStatus(t *testing.T, n *Node, want string) {
	t.Helper()
	eventually(t, 10*time.Second, "provider sees "+want, func() (bool, string) {
		s := ownStatus(n)
		return s == want, s
	})
}

func searchHas(t testing.TB, renter *Node, p peer.ID) (api.OfferRow, bool) {
	for _, r := range search(t, renter, api.SearchFilter{}) {
		if r.Provider == p.String() {
			return r, true
		}
	}
	return api.OfferRow{}, false
}

// TestOnboarding: a provider applies; the coordinator asks a question, gets the answer and
// approves; the certified offer reaches renters with its tier. Another is rejected and never
// offers. Revoking the first takes its offer out of every renter's search.
func TestOnboarding(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	fastOnboarding(t)
	tn := newTestNet(t)
	coord := tn.boot
	renter := tn.add(testConfig(config.RoleRenter), nil)
	cfg := providerConfig(0)
	prov := tn.addUncertified(cfg)

	// Uncertified: nothing published.
	time.Sleep(300 * time.Millisecond)
	if prov.publisher.Current() != nil {
		t.Fatal("an uncertified provider published an offer")
	}
	own, err := prov.applicant.Submit(applicationForm(cfg, true, 12))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusPending)
	apps, _ := coord.coord.Applications(protocol.StatusPending, false)
	if len(apps) != 1 || apps[0].ID != own.ID || apps[0].Provider != prov.ID().String() || apps[0].ProposedTier != protocol.TierEnterprise {
		t.Fatalf("coordinator queue: %+v", apps)
	}

	// A question, an answer.
	if _, err := coord.coord.Decide(own.ID, api.Decision{Action: "request-info", Message: "Which PSU feeds the rack?", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusInfoRequested)
	if v := prov.applicant.View(mustOwn(t, prov)); v.Message != "Which PSU feeds the rack?" {
		t.Fatalf("provider sees question %q", v.Message)
	}
	if _, err := prov.applicant.Answer("Two redundant 2 kW supplies behind a UPS"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusPending)
	// Enterprise cannot be granted without a UPS, but this one has one: the reviewer
	// chooses Community over the proposed Enterprise.
	if _, err := coord.coord.Decide(own.ID, api.Decision{Action: "approve", Tier: protocol.TierCommunity, Message: "welcome", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusApproved)
	eventually(t, 10*time.Second, "certified offer in search", func() (bool, string) {
		r, ok := searchHas(t, renter, prov.ID())
		return ok && r.Tier == protocol.TierCommunity, fmt.Sprintf("found=%v tier=%q", ok, r.Tier)
	})
	full, err := coord.ledger.Applications.GetApplication(own.ID)
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, e := range full.Events {
		trail = append(trail, e.Action+" by "+strings.Fields(e.Actor)[0])
	}
	if got := strings.Join(trail, ", "); got != "submitted by provider, info-requested by operator, answered by provider, approved by operator" {
		t.Fatalf("audit trail: %s", got)
	}
	if ns, _ := prov.ledger.Notifications.Notifications(); len(ns) < 3 {
		t.Fatalf("provider holds %d notifications; want pending, info-requested, approved (at least)", len(ns))
	}

	// Rejected: no certificate, no offer.
	cfg2 := providerConfig(1)
	prov2 := tn.addUncertified(cfg2)
	own2, err := prov2.applicant.Submit(applicationForm(cfg2, false, 3))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov2, protocol.StatusPending)
	if _, err := coord.coord.Decide(own2.ID, api.Decision{Action: "approve", Tier: protocol.TierEnterprise, Actor: "bob"}); err == nil {
		t.Fatal("Enterprise granted without a UPS")
	}
	if _, err := coord.coord.Decide(own2.ID, api.Decision{Action: "reject", Message: "GPUs not reachable from our probes", Actor: "bob"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov2, protocol.StatusRejected)
	if v := prov2.applicant.View(mustOwn(t, prov2)); v.Message != "GPUs not reachable from our probes" || v.Certificate != nil {
		t.Fatalf("rejected provider sees %+v", v)
	}
	if _, ok := searchHas(t, renter, prov2.ID()); ok || prov2.publisher.Current() != nil {
		t.Fatal("a rejected provider's offer is visible")
	}

	// Revoked: the offer leaves the renter's search within seconds.
	if _, err := coord.coord.Revoke(context.Background(), prov.ID(), "benchmarks faked", "carol"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, 5*time.Second, "revoked offer gone from search", func() (bool, string) {
		_, ok := searchHas(t, renter, prov.ID())
		return !ok, "still listed"
	})
	t.Logf("revoked offer left the renter's search after %s", time.Since(start).Round(time.Millisecond))
	waitStatus(t, prov, protocol.StatusRevoked)
	// A node joining later learns the revocation by sync and refuses the old offer.
	late := tn.add(testConfig(config.RoleRenter), nil)
	defer func() {
		if t.Failed() {
			mfs, _ := late.metrics.Registry.Gather()
			for _, mf := range mfs {
				if strings.HasPrefix(mf.GetName(), "gpunex_records") {
					for _, m := range mf.Metric {
						t.Log(mf.GetName(), m.Label, m.Counter.GetValue())
					}
				}
			}
			for i, x := range tn.nodes {
				t.Log("node", i, x.ID(), len(x.trust.Revocations()), x.peer.Host.Network().Connectedness(late.ID()))
			}
		}
	}()
	eventually(t, 10*time.Second, "late node knows the revocation", func() (bool, string) {
		return len(late.trust.Revocations()) == 1, ""
	})
	if _, _, err := late.book.Accept(prov.publisher.Current().Raw, "stream"); protocol.Reason(err) != "revoked" {
		t.Fatalf("late node accepted a revoked provider's offer: %v", err)
	}
}

// TestApplyWhileCoordinatorDown: an application made while the coordinator is down is kept
// and delivered once it is back; the coordinator's queue survives its restart.
func TestApplyWhileCoordinatorDown(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	fastOnboarding(t)
	dir := t.TempDir()
	coordKey := newTestKey(t)
	coordID, _ := peer.IDFromPrivateKey(coordKey)
	ccfg := testConfig(config.RoleCoordinator)
	startCoord := func(listen string) *Node {
		c := ccfg
		c.P2P.Listen = []string{listen}
		n, err := New(context.Background(), c, coordKey, Deps{DataDir: dir, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	coord := startCoord("/ip4/127.0.0.1/tcp/0")
	addr := coord.peer.Host.Addrs()[0].String()

	pcfg := providerConfig(2)
	pcfg.P2P.Bootstrap = []string{addr + "/p2p/" + coordID.String()}
	pcfg.Trust.Coordinators = []string{coordID.String()}
	h, sk := newHost(t)
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	prov, err := New(context.Background(), pcfg, sk, Deps{Host: h, Ledger: l, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { prov.Close(context.Background()); h.Close(); l.Close() }()

	// The coordinator goes down before the provider applies.
	coord.Close(context.Background())
	own, err := prov.applicant.Submit(applicationForm(pcfg, true, 24))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "delivery retried", func() (bool, string) {
		o := mustOwn(t, prov)
		return o.Attempts >= 2 && !o.Delivered, fmt.Sprintf("attempts=%d delivered=%v", o.Attempts, o.Delivered)
	})
	if s := ownStatus(prov); s != api.StatusQueued {
		t.Fatalf("status while the coordinator is down: %s", s)
	}

	coord = startCoord(addr)
	defer coord.Close(context.Background())
	waitStatus(t, prov, protocol.StatusPending)
	if a, err := coord.ledger.Applications.GetApplication(own.ID); err != nil || a.Status != protocol.StatusPending {
		t.Fatalf("coordinator's queue after delivery: %+v %v", a, err)
	}
	if v := testutil.ToFloat64(coord.metrics.RecordsAccepted.WithLabelValues("application", "stream")); v != 1 {
		t.Fatalf("applications accepted: %v", v)
	}
	// A replayed copy of the same record is acknowledged, not queued twice; an older
	// record is a replay.
	if _, err := coord.coord.Submit(mustOwn(t, prov).Raw); err != nil {
		t.Fatalf("same record again: %v", err)
	}
	if apps, _ := coord.coord.Applications("", false); len(apps) != 1 {
		t.Fatalf("%d applications after a duplicate delivery", len(apps))
	}

	// The queue survives a restart of the coordinator.
	coord.Close(context.Background())
	coord = startCoord(addr)
	defer coord.Close(context.Background())
	if _, err := coord.coord.Decide(own.ID, api.Decision{Action: "approve", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusApproved)
	eventually(t, 10*time.Second, "certified offer published", func() (bool, string) {
		so := prov.publisher.Current()
		return so != nil && so.Cert != nil && so.Cert.Tier == protocol.TierEnterprise, ""
	})
}

func mustOwn(t *testing.T, n *Node) ledger.OwnApplication {
	t.Helper()
	own, err := n.ledger.Applicant.GetOwnApplication()
	if err != nil {
		t.Fatal(err)
	}
	return own
}

// TestDecisionNotices: a decision reaches the applicant by e-mail (a real SMTP exchange on
// loopback) and by a signed webhook POST, besides the signed notification on its node.
func TestDecisionNotices(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	fastOnboarding(t)
	smtpSrv := noticetest.StartSMTP(t, "", "", nil)
	hook := noticetest.StartWebhook(t, http.StatusOK)
	secret := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(secret, []byte("hook-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ccfg := testConfig(config.RoleCoordinator)
	ccfg.Coordinator.Notify = config.NotifyConfig{SMTPAddr: smtpSrv.Addr(), SMTPFrom: "coordinator@gpunex.invalid", WebhookURL: hook.URL, WebhookSecretFile: secret}
	tn := newTestNetWith(t, ccfg)
	cfg := providerConfig(0)
	prov := tn.addUncertified(cfg)
	own, err := prov.applicant.Submit(applicationForm(cfg, true, 12))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusPending)
	if _, err := tn.boot.coord.Decide(own.ID, api.Decision{Action: "approve", Message: "Bienvenue à bord", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "e-mail and webhook delivered", func() (bool, string) {
		return len(smtpSrv.Messages()) == 1 && hook.Delivered() == 1, fmt.Sprintf("mails=%d hooks=%d", len(smtpSrv.Messages()), hook.Delivered())
	})
	m := smtpSrv.Messages()[0]
	if len(m.To) != 1 || m.To[0] != "ada@example.org" {
		t.Fatalf("mail sent to %v", m.To)
	}
	mail := noticetest.DecodeMail(t, m.Data)
	if !strings.Contains(mail.Subject, own.ID+" approved (enterprise)") || !strings.Contains(mail.Body, "Bienvenue à bord") {
		t.Fatalf("mail: %q\n%s", mail.Subject, mail.Body)
	}
	req := hook.Requests()[0]
	mac := hmac.New(sha256.New, []byte("hook-secret"))
	mac.Write(req.Body)
	if req.Header.Get("X-Gpunex-Signature") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
		t.Fatal("webhook signature does not verify")
	}
	var body struct {
		Event struct {
			Application string `json:"application"`
			Status      string `json:"status"`
			Tier        string `json:"tier"`
		} `json:"event"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil || body.Event.Application != own.ID || body.Event.Status != "approved" || body.Event.Tier != "enterprise" {
		t.Fatalf("webhook body %s (%v)", req.Body, err)
	}
	// A secret file others can read is refused at start.
	os.Chmod(secret, 0o644)
	if _, err := onboarding.NewCoordinator(onboarding.CoordinatorDeps{Base: subsystem.Base{Peer: tn.boot.peer, Log: quietLogger()}, Config: tn.boot.cfg.Coordinator}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable secret accepted: %v", err)
	}
}

// TestApplicationFlagsDifferences: the node compares the GPUs and host RAM an application
// declares with what it detects, and the coordinator sees the differences.
func TestApplicationFlagsDifferences(t *testing.T) {
	fastOnboarding(t)
	tn := newTestNet(t)
	cfg := providerConfig(0) // one simulated H100-80GB
	prov := tn.addUncertified(cfg)
	form := applicationForm(cfg, true, 12)
	form.GPUs[0].Count = 8
	form.GPUs = append(form.GPUs, protocol.ApplicationGPU{Model: "L4-24GB", Count: 2, HostRAMGB: 64, UpGbps: 1, DownGbps: 1,
		Availability: "24/7", Location: form.GPUs[0].Location})
	own, err := prov.applicant.Submit(form)
	if err != nil {
		t.Fatal(err)
	}
	app, err := protocol.OpenApplication(own.Raw)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(app.Differences, "; ")
	want := "declared 8 x H100-80GB, detected 1; declared 2 x L4-24GB, detected 0"
	if ram := bench.HostRAMGB(); ram > 0 { // the form declares 256 and 64 GB
		want += fmt.Sprintf("; gpus[0]: host RAM 256 GB declared, %d GB detected on the applying node", ram)
		if float64(ram)*1.1 < 64 {
			want += fmt.Sprintf("; gpus[1]: host RAM 64 GB declared, %d GB detected on the applying node", ram)
		}
	}
	if got != want || len(app.Detected) != 1 || !app.Detected[0].Simulated || app.DetectedHostRAMGB != bench.HostRAMGB() {
		t.Fatalf("differences %q, want %q; detected %+v, host RAM %d GB", got, want, app.Detected, app.DetectedHostRAMGB)
	}
	waitStatus(t, prov, protocol.StatusPending)
	v, err := tn.boot.ledger.Applications.GetApplication(own.ID)
	if err != nil || !strings.Contains(string(v.Raw), "detected 1") {
		t.Fatalf("coordinator's copy: %v", err)
	}
}

// TestReviewDeadlines: a pending application shows its due date and age in the queue, the
// applicant sees the same date, and the reviewers' webhook is reminded once when the
// decision is due within a business day and once when it is overdue, not at every check;
// a question to the applicant stops the reviewers' clock.
func TestReviewDeadlines(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	fastOnboarding(t)
	hook := noticetest.StartWebhook(t, http.StatusOK)
	ccfg := testConfig(config.RoleCoordinator)
	ccfg.Coordinator.Notify = config.NotifyConfig{WebhookURL: hook.URL}
	clk := clock.NewFake(time.Now())
	tn := &testNet{t: t}
	tn.boot = tn.add(ccfg, clk)
	cfg := providerConfig(0)
	prov := tn.addUncertified(cfg)
	own, err := prov.applicant.Submit(applicationForm(cfg, true, 12))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusPending)
	apps, err := tn.boot.coord.Applications(protocol.StatusPending, true)
	if err != nil || len(apps) != 1 {
		t.Fatalf("queue: %+v %v", apps, err)
	}
	due := apps[0].DecisionDue
	// Three business days: at least three days ahead, at most a weekend more (no holidays set).
	if ahead := due.Sub(clk.Now()); ahead < 3*24*time.Hour || ahead > 6*24*time.Hour || apps[0].AgeBusinessDays != 0 || apps[0].Overdue {
		t.Fatalf("due %s (%s ahead), age %d, overdue %v", due, ahead, apps[0].AgeBusinessDays, apps[0].Overdue)
	}
	eventually(t, 10*time.Second, "the applicant sees the due date", func() (bool, string) {
		v := prov.applicant.View(mustOwn(t, prov))
		return v.DecisionDue.Equal(due), v.DecisionDue.String()
	})
	reminders := func() []string {
		var out []string
		for _, r := range hook.Requests() {
			var body struct {
				Event struct {
					Reminder    string `json:"reminder"`
					Application string `json:"application"`
				} `json:"event"`
			}
			if json.Unmarshal(r.Body, &body) == nil && body.Event.Reminder != "" && body.Event.Application == own.ID {
				out = append(out, body.Event.Reminder)
			}
		}
		return out
	}
	step := func(to time.Time, want []string) {
		t.Helper()
		for clk.Now().Before(to) { // the reminder loop checks every minute of the fake clock
			clk.Advance(min(time.Hour, to.Sub(clk.Now())))
		}
		for range 3 {
			clk.Advance(time.Minute)
		}
		eventually(t, 10*time.Second, fmt.Sprintf("reminders %v", want), func() (bool, string) {
			got := reminders()
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
		})
		time.Sleep(300 * time.Millisecond) // nothing more comes
		if got := reminders(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("reminders %v, want %v", got, want)
		}
	}
	step(due.Add(-20*time.Hour), []string{"due-soon"})
	step(due.Add(time.Minute), []string{"due-soon", "overdue"})
	step(due.Add(6*time.Hour), []string{"due-soon", "overdue"})
	apps, _ = tn.boot.coord.Applications(protocol.StatusPending, true)
	if len(apps) != 1 || !apps[0].Overdue || apps[0].AgeBusinessDays < 3 {
		t.Fatalf("overdue application: %+v", apps)
	}
	full, _ := tn.boot.ledger.Applications.GetApplication(own.ID)
	n := 0
	for _, e := range full.Events {
		if e.Action == "reminded" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d reminders in the audit trail, want 2: %+v", n, full.Events)
	}
	// A question stops the reviewers' clock: the decision is the applicant's to wait for.
	if _, err := tn.boot.coord.Decide(own.ID, api.Decision{Action: "request-info", Message: "Which UPS?", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	if apps, _ := tn.boot.coord.Applications(protocol.StatusInfoRequested, true); len(apps) != 1 || !apps[0].DecisionDue.IsZero() || apps[0].Overdue {
		t.Fatalf("an application waiting for its applicant has a due date: %+v", apps)
	}
}

// TestDeclaredAgainstMeasured: an applicant declares 10 Gbps each way; the coordinator
// measured its link at about 0.1 Gbps up when its node benchmarked (its upload slowed as
// bench.simulated_upload_mbps does). The review shows both and flags the gap, proposes
// Community on the measurement, and refuses Enterprise; Community is granted.
func TestDeclaredAgainstMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	fastOnboarding(t)
	ccfg := testConfig(config.RoleCoordinator)
	ccfg.Coordinator.HostMinimum.EnterpriseMbps = config.Defaults(config.RoleCoordinator).Coordinator.HostMinimum.EnterpriseMbps
	tn := newTestNetWith(t, ccfg)
	cfg := providerConfig(0)
	cfg.Bench.SimulatedUploadMbps = 100
	prov := tn.addUncertified(cfg)
	form := applicationForm(cfg, true, 12)
	for i := range form.GPUs {
		form.GPUs[i].UpGbps, form.GPUs[i].DownGbps = 10, 10
	}
	own, err := prov.applicant.Submit(form)
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusPending)
	// The applicant's node benchmarks against the coordinator (it does once it has a peer;
	// once more here, so that the measurement is there whatever the order).
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	var v api.ApplicationView
	eventually(t, 10*time.Second, "the coordinator's measurement in the review", func() (bool, string) {
		app, err := tn.boot.ledger.Applications.GetApplication(own.ID)
		if err != nil {
			return false, err.Error()
		}
		v = tn.boot.coord.View(app, true)
		return v.MeasuredLink != nil, ""
	})
	if v.MeasuredLink.UpMbps > 150 || v.MeasuredLink.UpMbps < 50 {
		t.Fatalf("measured link %+v, want about 100 Mbit/s up", v.MeasuredLink)
	}
	if len(v.LinkGaps) == 0 || !strings.Contains(v.LinkGaps[0], "internet up 10 Gbps declared, 0.1") {
		t.Fatalf("gaps %q", v.LinkGaps)
	}
	if v.ProposedTier != protocol.TierCommunity || !strings.Contains(strings.Join(v.TierReasons, "; "), "< 800 each way for Enterprise") {
		t.Fatalf("proposed %s: %q", v.ProposedTier, v.TierReasons)
	}
	if _, err := tn.boot.coord.Decide(own.ID, api.Decision{Action: "approve", Tier: protocol.TierEnterprise, Actor: "alice"}); err == nil || !strings.Contains(err.Error(), "for Enterprise") {
		t.Fatalf("Enterprise on a link measured at 0.1 Gbps: %v", err)
	}
	a, err := tn.boot.coord.Decide(own.ID, api.Decision{Action: "approve", Actor: "alice"})
	if err != nil || a.Tier != protocol.TierCommunity {
		t.Fatalf("approved on the proposal: %+v %v", a.Tier, err)
	}
}

// TestTierMovesDown: an Enterprise provider whose link the coordinator measures under the
// tier's minimum is told the date its tier moves down; a run that passes stops the count;
// under it again for the whole grace period, its certificate is reissued for Community, and
// renters see the new tier.
func TestTierMovesDown(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	fastOnboarding(t)
	ccfg := testConfig(config.RoleCoordinator)
	ccfg.Coordinator.HostMinimum.EnterpriseMbps = 30
	ccfg.Coordinator.HostMinimum.EnterpriseGrace = config.Duration{Duration: 7 * 24 * time.Hour}
	tn := newTestNetWith(t, ccfg)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	cfg := providerConfig(0)
	prov := tn.addUncertified(cfg)
	own, err := prov.applicant.Submit(applicationForm(cfg, true, 12))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusPending)
	ctx := context.Background()
	// Four benchmark runs at most in this test (its node's first, then three): a peer gets
	// four transfer turns an hour from the coordinator.
	if _, err := tn.boot.coord.Decide(own.ID, api.Decision{Action: "approve", Tier: protocol.TierEnterprise, Actor: "alice"}); err != nil {
		t.Fatalf("Enterprise on a fast link: %v", err)
	}
	waitStatus(t, prov, protocol.StatusApproved)
	message := func() string {
		o, _ := prov.ledger.Applicant.GetOwnApplication()
		return o.Message
	}
	check := func(want int) {
		t.Helper()
		if n, err := tn.boot.coord.CheckTiers(time.Now()); err != nil || n != want {
			t.Fatalf("CheckTiers: moved %d, %v; want %d", n, err, want)
		}
	}
	check(0) // fast: nothing to say
	if m := message(); strings.HasPrefix(m, protocol.TierMessagePrefix) {
		t.Fatalf("a tier message on a fast link: %q", m)
	}

	// The uplink slows to 10 Mbit/s: told, with the date.
	prov.bench.SimulateUpload(10)
	if _, err := prov.bench.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	check(0)
	eventually(t, 10*time.Second, "the provider warned", func() (bool, string) {
		m := message()
		return strings.HasPrefix(m, "tier: your link was measured at ") && strings.Contains(m, "under the 30 Mbit/s each way the Enterprise tier needs") &&
			strings.Contains(m, "your tier moves down to Community"), m
	})
	check(0) // warned once, not again
	// Fixed before the date: the count stops.
	prov.bench.SimulateUpload(0)
	if _, err := prov.bench.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	check(0)
	eventually(t, 10*time.Second, "the provider told the tier stays", func() (bool, string) {
		m := message()
		return strings.Contains(m, "your tier stays Enterprise"), m
	})

	// Slow again, for the whole grace period: moved down.
	prov.bench.SimulateUpload(10)
	if _, err := prov.bench.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	check(0)
	oldCert, err := prov.ledger.Applicant.OwnCertificate()
	if err != nil {
		t.Fatal(err)
	}
	enterprise, err := protocol.OpenCertificate(oldCert, nil)
	if err != nil || enterprise.Tier != protocol.TierEnterprise {
		t.Fatalf("the provider's certificate: %+v %v", enterprise, err)
	}
	grace := tn.boot.cfg.Coordinator.HostMinimum.EnterpriseGrace.Duration
	if _, err := tn.boot.ledger.Applications.UpdateApplication(own.ID, func(a *ledger.Application) error {
		a.TierShortSince = a.TierShortSince.Add(-grace) // as if the grace period had passed
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check(1)
	app, _ := tn.boot.ledger.Applications.GetApplication(own.ID)
	if app.Tier != protocol.TierCommunity || app.Events[len(app.Events)-1].Action != "tier-moved-down" {
		t.Fatalf("the coordinator's record: %s %+v", app.Tier, app.Events[len(app.Events)-1])
	}
	eventually(t, 15*time.Second, "renters see the Community tier", func() (bool, string) {
		r, ok := searchHas(t, renter, prov.ID())
		return ok && r.Tier == protocol.TierCommunity, r.Tier
	})
	if m := message(); !strings.Contains(m, "your tier is now Community") {
		t.Fatalf("the provider's message: %q", m)
	}
	// The Enterprise certificate is revoked: a provider that kept offering it would be
	// refused everywhere.
	eventually(t, 10*time.Second, "the Enterprise certificate revoked at the renter", func() (bool, string) {
		return renter.trust.RevocationOf(enterprise) != nil, ""
	})
	check(0) // Community: the rule has nothing more to do
}
