package onboarding

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// trail lists an application's audit trail as "action by actor-kind".
func trail(a ledger.Application) string {
	var out []string
	for _, e := range a.Events {
		out = append(out, e.Action+" by "+strings.Fields(e.Actor)[0])
	}
	return strings.Join(out, ", ")
}

// notified opens the notification an application holds, as the provider would check it.
func (tc *testCoord) notified(t *testing.T, a ledger.Application) *protocol.SignedNotification {
	t.Helper()
	p, _ := ledgerProvider(a)
	n, err := protocol.CheckNotification(a.Notification, tc.clock.Now(), protocol.NewTrust(tc.peer.ID), p)
	if err != nil {
		t.Fatalf("the notification of %s: %v", a.ID, err)
	}
	return n
}

// TestSubmissionRules: the coordinator's rules for what a provider submits
// (docs/protocols/onboarding.md, section 9): a delivery again is acknowledged and changes
// nothing; an older or equal record is a replay; an update of an open application keeps its
// status, an answer to a question puts it back to pending and restarts the review clock; a
// decided application takes no update; an ID is one provider's; a new application replaces
// the provider's open one.
func TestSubmissionRules(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	ada := newTestApplicant()
	raw, _ := ada.sign(t, form(), tc.clock.Now())
	app, err := tc.Submit(raw)
	if err != nil {
		t.Fatal(err)
	}
	if app.Status != protocol.StatusPending || app.ProposedTier != protocol.TierEnterprise || trail(app) != "submitted by provider" {
		t.Fatalf("a new application: %s, proposed %s, trail %q", app.Status, app.ProposedTier, trail(app))
	}
	if n := tc.notified(t, app); n.Status != protocol.StatusPending || !n.DecisionDue.Equal(time.Date(2026, 12, 11, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("the pending notification: %s, decision due %s (submitted on a Monday: the end of Thursday)", n.Status, n.DecisionDue)
	}
	if again, err := tc.Submit(raw); err != nil || again.UpdatedAt != app.UpdatedAt || len(again.Events) != 1 {
		t.Fatalf("the same record again: %v, %d events", err, len(again.Events))
	}
	if v := tc.rejected("replay"); v != 0 {
		t.Fatalf("a delivery again counted as a replay: %v", v)
	}

	// An update: community now (no UPS), status unchanged.
	f := form()
	f.ID, f.UPS = app.ID, false
	tc.clock.Advance(time.Hour)
	updRaw, _ := ada.sign(t, f, tc.clock.Now())
	upd, err := tc.Submit(updRaw)
	if err != nil || upd.Status != protocol.StatusPending || upd.ProposedTier != protocol.TierCommunity || trail(upd) != "submitted by provider, updated by provider" {
		t.Fatalf("an update: %v %s %s %q", err, upd.Status, upd.ProposedTier, trail(upd))
	}
	if _, err := tc.Submit(raw); protocol.Reason(err) != "replay" {
		t.Fatalf("the first record after the update: %v", err)
	}

	// A question, then the answer: pending again, with the review clock restarted.
	tc.decide(t, app.ID, "request-info", "Which UPS?")
	tc.clock.Advance(48 * time.Hour)
	f.Answer = "An APC Smart-UPS, on order"
	ansRaw, _ := ada.sign(t, f, tc.clock.Now())
	ans, err := tc.Submit(ansRaw)
	if err != nil || ans.Status != protocol.StatusPending || !ans.ReviewSince.Equal(tc.clock.Now()) || ans.Message != "" {
		t.Fatalf("the answer: %v %s since %s message %q", err, ans.Status, ans.ReviewSince, ans.Message)
	}
	if got := ans.Events[len(ans.Events)-1]; got.Action != "answered" || got.Detail != f.Answer {
		t.Fatalf("the answer's event: %+v", got)
	}

	// Another provider cannot use the ID.
	eve := newTestApplicant()
	g := form()
	g.ID = app.ID
	eveRaw, _ := eve.sign(t, g, tc.clock.Now())
	if _, err := tc.Submit(eveRaw); protocol.Reason(err) != "invalid" || !strings.Contains(err.Error(), "belongs to another provider") {
		t.Fatalf("another provider's record with the ID: %v", err)
	}

	// A new application supersedes the open one; the older one's records are replays.
	newer := tc.submitNew(t, ada, form())
	old, _ := tc.ledger.Applications.GetApplication(app.ID)
	if old.Status != protocol.StatusRejected || old.Message != "superseded by application "+newer.ID || !strings.HasSuffix(trail(old), "superseded by provider") {
		t.Fatalf("the replaced application: %s %q %q", old.Status, old.Message, trail(old))
	}
	f.Answer = "one more"
	lateRaw, _ := ada.sign(t, f, tc.clock.Now())
	if _, err := tc.Submit(lateRaw); protocol.Reason(err) != "invalid" || !strings.Contains(err.Error(), "submit a new application") {
		t.Fatalf("an update of the superseded application: %v", err)
	}
	stale := newTestApplicant()
	stale.id, stale.key, stale.seq = ada.id, ada.key, 1
	staleRaw, _ := stale.sign(t, form(), tc.clock.Now())
	if _, err := tc.Submit(staleRaw); protocol.Reason(err) != "replay" {
		t.Fatalf("a new application with an older seq: %v", err)
	}
	if open, _ := tc.Applications(protocol.StatusPending, false); len(open) != 1 || open[0].ID != newer.ID {
		t.Fatalf("open applications: %+v", open)
	}
}

// TestDecisions: a reviewer approves (with the proposed tier unless another is chosen, never
// Enterprise without a UPS), rejects with a reason, or asks with a question; each is signed
// into a notification and kept in the trail with who decided; a decided application stays
// decided. The certificate covers the application's models, counts added up, for the
// configured validity.
func TestDecisions(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	ada := newTestApplicant()
	f := form()
	f.GPUs = append(f.GPUs, f.GPUs[0], protocol.ApplicationGPU{Model: "B200-192GB", Count: 1, HostRAMGB: 512, UpGbps: 1, DownGbps: 1,
		Availability: "24/7", Location: f.GPUs[0].Location})
	app := tc.submitNew(t, ada, f)
	if got := strings.Join(app.CaseByCase, ","); got != "B200-192GB" {
		t.Fatalf("case by case: %q", got)
	}
	for _, c := range []struct {
		d    api.Decision
		want string
	}{
		{api.Decision{Action: "approve"}, "actor"},
		{api.Decision{Action: "reject", Actor: "alice"}, "reason"},
		{api.Decision{Action: "request-info", Actor: "alice", Message: " "}, "question"},
		{api.Decision{Action: "approve", Actor: "alice", Tier: "gold"}, "tier"},
		{api.Decision{Action: "ban", Actor: "alice"}, "approve, reject or request-info"},
	} {
		if _, err := tc.Decide(app.ID, c.d); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an invalid decision naming %q", c.d, err, c.want)
		}
	}
	if _, err := tc.Decide("0123456789ab", api.Decision{Action: "approve", Actor: "alice"}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an unknown application: %v", err)
	}
	approved := tc.decide(t, app.ID, "approve", "welcome")
	if approved.Status != protocol.StatusApproved || approved.Tier != protocol.TierEnterprise {
		t.Fatalf("approved: %s %s", approved.Status, approved.Tier)
	}
	cert, err := protocol.CheckCertificate(approved.Certificate, tc.clock.Now(), protocol.NewTrust(tc.peer.ID))
	if err != nil {
		t.Fatal(err)
	}
	if cert.Provider != ada.id.String() || cert.Application != app.ID || len(cert.GPUs) != 2 || cert.GPUs[0] != (protocol.CertifiedGPU{Model: "L4-24GB", Count: 4}) ||
		!cert.ExpiresAt.Equal(tc.clock.Now().Add(tc.cfg.CertificateValidity.Duration)) || !cert.CommitmentEnd.Equal(tc.clock.Now().AddDate(0, 12, 0)) {
		t.Fatalf("the certificate: %+v", cert.Certificate)
	}
	n := tc.notified(t, approved)
	if n.Status != protocol.StatusApproved || n.Message != "welcome" || len(n.Certificate) == 0 || !n.DecisionDue.IsZero() {
		t.Fatalf("the approval's notification: %+v", n.Notification)
	}
	if got := approved.Events[len(approved.Events)-1]; got.Actor != "operator alice" || got.Detail != "tier enterprise (proposed enterprise) welcome" {
		t.Fatalf("the approval in the trail: %+v", got)
	}
	if _, err := tc.Decide(app.ID, api.Decision{Action: "reject", Message: "changed my mind", Actor: "bob"}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("deciding an approved application again: %v", err)
	}
	if !tc.Certified(ada.id) {
		t.Fatal("an approved provider is not admitted to the relay")
	}

	// Enterprise without a UPS is refused; Community granted instead.
	bob := newTestApplicant()
	g := form()
	g.UPS = false
	other := tc.submitNew(t, bob, g)
	if _, err := tc.Decide(other.ID, api.Decision{Action: "approve", Tier: protocol.TierEnterprise, Actor: "alice"}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("Enterprise without a UPS: %v", err)
	}
	if a, err := tc.Decide(other.ID, api.Decision{Action: "approve", Actor: "alice"}); err != nil || a.Tier != protocol.TierCommunity {
		t.Fatalf("approved with the proposal: %v %s", err, a.Tier)
	}

	// A rejection is signed with its reason; the rejected provider is not certified.
	carol := newTestApplicant()
	rej := tc.decide(t, tc.submitNew(t, carol, form()).ID, "reject", "GPUs not reachable")
	if n := tc.notified(t, rej); n.Status != protocol.StatusRejected || n.Message != "GPUs not reachable" || len(n.Certificate) != 0 {
		t.Fatalf("the rejection's notification: %+v", n.Notification)
	}
	if tc.Certified(carol.id) {
		t.Fatal("a rejected provider is admitted to the relay")
	}
}

// TestEnterpriseRestsOnTheMeasuredLink: once the coordinator has measured an applicant's
// link under the Enterprise minimum, the approval's default is Community and Enterprise is
// refused, whatever the application declared.
func TestEnterpriseRestsOnTheMeasuredLink(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	ada := newTestApplicant()
	app := tc.submitNew(t, ada, form())
	if err := tc.ledger.Links.SetLinkMeasurement(ledger.LinkMeasurement{Provider: ada.id.String(), MeasuredAt: tc.clock.Now(), UpMbps: 95, DownMbps: 940}); err != nil {
		t.Fatal(err)
	}
	v := tc.View(app, true)
	if v.ProposedTier != protocol.TierCommunity || len(v.LinkGaps) != 1 || !strings.Contains(v.LinkGaps[0], "internet up 1 Gbps declared, 0.10 Gbps measured") {
		t.Fatalf("the review's view: proposed %s, gaps %q", v.ProposedTier, v.LinkGaps)
	}
	if _, err := tc.Decide(app.ID, api.Decision{Action: "approve", Tier: protocol.TierEnterprise, Actor: "alice"}); err == nil || !strings.Contains(err.Error(), "approve as community") {
		t.Fatalf("Enterprise on a slow measured link: %v", err)
	}
	if a := tc.decide(t, app.ID, "approve", ""); a.Tier != protocol.TierCommunity {
		t.Fatalf("the default tier on a slow measured link: %s", a.Tier)
	}
}

// TestRevocation: a revocation is signed, taken in and gossiped; the provider's approved
// application becomes revoked and the provider leaves the relay; a new application approved
// later is certified again, its certificate untouched by the old revocation.
func TestRevocation(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	ada := newTestApplicant()
	app := tc.decide(t, tc.submitNew(t, ada, form()).ID, "approve", "")
	if _, err := tc.Revoke(context.Background(), ada.id, " ", "carol"); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a revocation without a reason: %v", err)
	}
	if _, err := tc.Revoke(context.Background(), ada.id, "benchmarks faked", ""); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a revocation without an actor: %v", err)
	}
	raw, err := tc.Revoke(context.Background(), ada.id, "benchmarks faked", "carol")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := protocol.CheckRevocation(raw, tc.clock.Now(), protocol.NewTrust(tc.peer.ID))
	if err != nil || rev.Provider != ada.id || rev.Reason != "benchmarks faked" {
		t.Fatalf("the revocation: %+v %v", rev, err)
	}
	if tc.gossip.count() != 1 || len(tc.revs.all()) != 1 {
		t.Fatalf("gossiped %d, taken in %d", tc.gossip.count(), len(tc.revs.all()))
	}
	got, _ := tc.ledger.Applications.GetApplication(app.ID)
	if got.Status != protocol.StatusRevoked || got.Message != "benchmarks faked" || !strings.HasSuffix(trail(got), "revoked by operator") {
		t.Fatalf("the revoked application: %s %q %q", got.Status, got.Message, trail(got))
	}
	if n := tc.notified(t, got); n.Status != protocol.StatusRevoked {
		t.Fatalf("the revocation's notification: %s", n.Status)
	}
	if tc.Certified(ada.id) {
		t.Fatal("a revoked provider keeps its relay slot")
	}
	tc.clock.Advance(time.Minute)
	again := tc.decide(t, tc.submitNew(t, ada, form()).ID, "approve", "second chance")
	cert, _ := protocol.OpenCertificate(again.Certificate, nil)
	if tc.revs.RevocationOf(cert) != nil || !tc.Certified(ada.id) {
		t.Fatal("a certificate approved after the revocation is covered by it")
	}
	// A revocation that cannot be taken in changes nothing.
	tc.revs.fail = errors.New("disk full")
	if _, err := tc.Revoke(context.Background(), ada.id, "again", "carol"); err == nil || !tc.Certified(ada.id) {
		t.Fatalf("a revocation not stored: %v, certified %v", err, tc.Certified(ada.id))
	}
}

// TestRenewal: a coordinator re-signs, within certificate_renew_before of its expiry, the
// certificate of each provider's latest approved application (a newer application pending
// does not stop it), with a new serial and the same terms; not a revoked one, not one far
// from expiry.
func TestRenewal(t *testing.T) {
	tc := newTestCoordinator(t, func(c *config.CoordinatorConfig) {
		c.CertificateValidity.Duration = 60 * 24 * time.Hour
		c.CertificateRenewBefore.Duration = 10 * 24 * time.Hour
	})
	ada, bob := newTestApplicant(), newTestApplicant()
	adaApp := tc.decide(t, tc.submitNew(t, ada, form()).ID, "approve", "")
	tc.decide(t, tc.submitNew(t, bob, form()).ID, "approve", "")
	if _, err := tc.Revoke(context.Background(), bob.id, "gone", "carol"); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(49 * 24 * time.Hour)
	if n, err := tc.renewDue(tc.clock.Now()); n != 0 || err != nil {
		t.Fatalf("renewed %d 11 days before expiry (%v)", n, err)
	}
	pending := tc.submitNew(t, ada, form()) // a new application under review
	tc.clock.Advance(2 * 24 * time.Hour)
	if n, err := tc.renewDue(tc.clock.Now()); n != 1 || err != nil {
		t.Fatalf("renewed %d 9 days before expiry (%v); want Ada's only", n, err)
	}
	renewed, _ := tc.ledger.Applications.GetApplication(adaApp.ID)
	old, _ := protocol.OpenCertificate(adaApp.Certificate, nil)
	cert, err := protocol.CheckCertificate(renewed.Certificate, tc.clock.Now(), protocol.NewTrust(tc.peer.ID))
	if err != nil {
		t.Fatal(err)
	}
	if cert.Serial <= old.Serial || cert.Tier != old.Tier || !cert.CommitmentEnd.Equal(old.CommitmentEnd) || !cert.ExpiresAt.Equal(tc.clock.Now().Add(60*24*time.Hour)) {
		t.Fatalf("the renewed certificate: %+v, the old one %+v", cert.Certificate, old.Certificate)
	}
	if !strings.HasSuffix(trail(renewed), "renewed by coordinator") || !strings.HasPrefix(renewed.Message, "certificate renewed until ") {
		t.Fatalf("the renewal in the queue: %q %q", trail(renewed), renewed.Message)
	}
	// The provider asking for its status gets its pending application, and the renewal.
	resp := tc.answer(from(ada.id, "/ip4/127.0.0.1/tcp/1"), protocol.ApplyRequest{Op: "status"})
	n, _ := protocol.CheckNotification(resp.Renewal, tc.clock.Now(), nil, ada.id)
	if !resp.OK || n == nil || n.Application != adaApp.ID || len(n.Certificate) == 0 {
		t.Fatalf("a status request after the renewal: %+v", resp)
	}
	if p, _ := protocol.CheckNotification(resp.Notification, tc.clock.Now(), nil, ada.id); p == nil || p.Application != pending.ID {
		t.Fatal("the status answer does not carry the pending application")
	}
	if n, _ := tc.renewDue(tc.clock.Now()); n != 0 {
		t.Fatalf("renewed again at once: %d", n)
	}
}

// TestTierRule: an Enterprise provider measured under the minimum is warned with the date
// its tier moves down; measured at the minimum again, told it stays; under it for the whole
// grace period, its Enterprise certificate is revoked and a Community one issued with the
// same expiry.
func TestTierRule(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	ada := newTestApplicant()
	app := tc.decide(t, tc.submitNew(t, ada, form()).ID, "approve", "")
	measure := func(up float64) {
		if err := tc.ledger.Links.SetLinkMeasurement(ledger.LinkMeasurement{Provider: ada.id.String(), MeasuredAt: tc.clock.Now(), UpMbps: up, DownMbps: 900}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(wantMoved int, wantLast string) ledger.Application {
		t.Helper()
		moved, err := tc.CheckTiers(tc.clock.Now())
		a, _ := tc.ledger.Applications.GetApplication(app.ID)
		if err != nil || moved != wantMoved || a.Events[len(a.Events)-1].Action != wantLast {
			t.Fatalf("moved %d (%v), last event %s; want %d, %s", moved, err, a.Events[len(a.Events)-1].Action, wantMoved, wantLast)
		}
		return a
	}
	check(0, "approved") // nothing measured since the approval
	tc.clock.Advance(time.Hour)
	measure(100)
	warned := check(0, "tier-warning")
	grace := tc.cfg.HostMinimum.EnterpriseGrace.Duration
	if !strings.HasPrefix(warned.Message, protocol.TierMessagePrefix) || !strings.Contains(warned.Message, tc.clock.Now().Add(grace).UTC().Format("2006-01-02 15:04")) {
		t.Fatalf("the warning: %q", warned.Message)
	}
	check(0, "tier-warning") // told once
	tc.clock.Advance(time.Hour)
	measure(850)
	check(0, "tier-kept")
	tc.clock.Advance(time.Hour)
	measure(100)
	check(0, "tier-warning")
	tc.clock.Advance(grace - time.Minute)
	measure(120)
	check(0, "tier-warning") // still within the grace period
	tc.clock.Advance(time.Minute)
	moved := check(1, "tier-moved-down")
	cert, err := protocol.CheckCertificate(moved.Certificate, tc.clock.Now(), protocol.NewTrust(tc.peer.ID))
	old, _ := protocol.OpenCertificate(app.Certificate, nil)
	if err != nil || moved.Tier != protocol.TierCommunity || cert.Tier != protocol.TierCommunity || !cert.ExpiresAt.Equal(old.ExpiresAt) {
		t.Fatalf("after the move down: %s, certificate %+v (%v)", moved.Tier, cert, err)
	}
	if tc.revs.RevocationOf(old) == nil || tc.revs.RevocationOf(cert) != nil || tc.gossip.count() != 1 {
		t.Fatal("the Enterprise certificate is not revoked, or the Community one is")
	}
	check(0, "tier-moved-down") // Community: nothing more to do
}

// TestReminders: the reviewers are reminded once when a decision is due within a business
// day and once when it is overdue; an application waiting for the applicant's answer is due
// nothing.
func TestReminders(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	tc.submitNew(t, newTestApplicant(), form()) // Monday 09:00: due at the end of Thursday
	asked := tc.submitNew(t, newTestApplicant(), form())
	tc.decide(t, asked.ID, "request-info", "Which UPS?")
	ctx := context.Background()
	if n := tc.Remind(ctx); n != 0 {
		t.Fatalf("reminded %d at once", n)
	}
	tc.clock.Advance(63 * time.Hour) // Thursday 00:00
	if n := tc.Remind(ctx); n != 1 {
		t.Fatalf("reminded %d on the last day; want 1", n)
	}
	if n := tc.Remind(ctx); n != 0 {
		t.Fatalf("reminded %d again the same day", n)
	}
	tc.clock.Advance(24 * time.Hour) // Friday 00:00: overdue
	if n := tc.Remind(ctx); n != 1 {
		t.Fatalf("reminded %d once overdue; want 1", n)
	}
	tc.clock.Advance(7 * 24 * time.Hour)
	if n := tc.Remind(ctx); n != 0 {
		t.Fatalf("reminded %d a week later", n)
	}
	tc.restart(t)
	if n := tc.Remind(ctx); n != 0 {
		t.Fatalf("reminded %d after a restart", n)
	}
}
