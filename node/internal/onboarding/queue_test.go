package onboarding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/noticetest"
	"github.com/gpunex/gpunex/protocol"
)

// waitFor polls cond for up to 10 s of real time (notices go out in the background).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// decide has alice take a decision, failing the test on an error.
func (tc *testCoord) decide(t *testing.T, id, action, message string) ledger.Application {
	t.Helper()
	a, err := tc.Decide(id, api.Decision{Action: action, Message: message, Actor: "alice"})
	if err != nil {
		t.Fatalf("%s %s: %v", action, id, err)
	}
	return a
}

// submitNew has an applicant submit a new application (from no network), failing on an error.
func (tc *testCoord) submitNew(t *testing.T, a *testApplicant, f protocol.Application) ledger.Application {
	t.Helper()
	raw, _ := a.sign(t, f, tc.clock.Now())
	app, err := tc.Submit(raw)
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// TestApplicantNetworks: the caps count an IPv4 address, or an IPv6 /48, as one network;
// loopback is no network; a relayed connection counts as its relay's.
func TestApplicantNetworks(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"/ip4/198.51.100.7/tcp/4001", "198.51.100.7"},
		{"/ip4/198.51.100.7/udp/4001/quic-v1", "198.51.100.7"},
		{"/ip6/2001:db8:aa:1::1/tcp/4001", "2001:db8:aa::/48"},
		{"/ip6/2001:db8:aa:ffff:1:2:3:4/tcp/4001", "2001:db8:aa::/48"},
		{"/ip6/2001:db8:ab::1/tcp/4001", "2001:db8:ab::/48"},
		{"/ip4/127.0.0.1/tcp/4001", ""},
		{"/ip6/::1/tcp/4001", ""},
		{"/ip4/203.0.113.5/tcp/4001/p2p/12D3KooWNjS1JqFm62cpCRHwG5WpzE9rMPP2zkehyPqfn4vfzBfz/p2p-circuit", "relayed via 203.0.113.5"},
	} {
		if got := applicantNetwork(ma.StringCast(c.addr)); got != c.want {
			t.Errorf("%s: network %q, want %q", c.addr, got, c.want)
		}
	}
}

// TestQueueCapsSurviveRestart: the network of each open application is kept in the ledger,
// so a restarted coordinator still refuses a fourth from the same network; a provider
// replacing its own open application takes no new place; applications from loopback (the
// operator's own nodes) count against no network.
func TestQueueCapsSurviveRestart(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	send := func(a *testApplicant, addr string) protocol.ApplyResponse {
		raw, _ := a.sign(t, form(), tc.clock.Now())
		return tc.answer(from(a.id, addr), submitRequest(raw))
	}
	var first *testApplicant
	for i := range MaxOpenPerNetwork {
		a := newTestApplicant()
		if resp := send(a, "/ip4/198.51.100.7/tcp/4001"); !resp.OK {
			t.Fatalf("application %d from the network: %s", i+1, resp.Error)
		}
		first = a
	}
	tc.restart(t)
	resp := send(newTestApplicant(), "/ip4/198.51.100.7/tcp/4002")
	if resp.OK || !strings.Contains(resp.Error, "from your network") {
		t.Fatalf("a fourth open application from the network after a restart: %+v", resp)
	}
	if v := tc.rejected("network_full"); v != 1 {
		t.Fatalf("refusals counted as network_full: %v", v)
	}
	if resp := send(first, "/ip4/198.51.100.7/tcp/4003"); !resp.OK {
		t.Fatalf("an applicant replacing its own open application: %s", resp.Error)
	}
	if resp := send(newTestApplicant(), "/ip4/198.51.100.8/tcp/4001"); !resp.OK {
		t.Fatalf("another network: %s", resp.Error)
	}
	for range 2 * MaxOpenPerNetwork {
		if resp := send(newTestApplicant(), "/ip4/127.0.0.1/tcp/4001"); !resp.OK {
			t.Fatalf("from loopback: %s", resp.Error)
		}
	}
}

// TestQueueFull: past MaxOpenApplications a new application is refused as "full", and its
// node keeps it to send again; an answer to an open one still goes through.
func TestQueueFull(t *testing.T) {
	defer func(n int) { MaxOpenApplications = n }(MaxOpenApplications)
	MaxOpenApplications = 2
	tc := newTestCoordinator(t, nil)
	asker := newTestApplicant()
	asked := tc.submitNew(t, asker, form())
	tc.submitNew(t, newTestApplicant(), form())
	raw, _ := newTestApplicant().sign(t, form(), tc.clock.Now())
	resp := tc.answer(from(asker.id, "/ip4/198.51.100.9/tcp/1"), submitRequest(raw))
	if resp.OK || resp.Reason != "other" || !strings.Contains(resp.Error, "the review queue is full (2 open applications)") {
		t.Fatalf("a third application with 2 open: %+v", resp)
	}
	tc.decide(t, asked.ID, "request-info", "Which UPS?")
	f := form()
	f.ID, f.Answer = asked.ID, "An APC Smart-UPS"
	raw, _ = asker.sign(t, f, tc.clock.Now())
	if a, err := tc.Submit(raw); err != nil || a.Status != protocol.StatusPending {
		t.Fatalf("the answer with the queue full: %+v %v", a.Status, err)
	}
}

// TestClosedApplicationsDeleted: a superseded application is deleted SupersededKeptFor after
// it was replaced, a rejected one RejectedKeptFor after the rejection, each with its trail;
// approved and revoked ones stay. A deleted application's record cannot come back.
func TestClosedApplicationsDeleted(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	changer, rejected, approved, revoked := newTestApplicant(), newTestApplicant(), newTestApplicant(), newTestApplicant()
	oldRaw, _ := changer.sign(t, form(), tc.clock.Now())
	old, err := tc.Submit(oldRaw)
	if err != nil {
		t.Fatal(err)
	}
	newer := tc.submitNew(t, changer, form())
	if a, _ := tc.ledger.Applications.GetApplication(old.ID); a.Status != protocol.StatusRejected || a.Message != "superseded by application "+newer.ID {
		t.Fatalf("the replaced application: %s %q", a.Status, a.Message)
	}
	rejectedApp := tc.decide(t, tc.submitNew(t, rejected, form()).ID, "reject", "GPUs not reachable")
	tc.decide(t, tc.submitNew(t, approved, form()).ID, "approve", "")
	tc.decide(t, tc.submitNew(t, revoked, form()).ID, "approve", "")
	if _, err := tc.Revoke(context.Background(), revoked.id, "benchmarks faked", "carol"); err != nil {
		t.Fatal(err)
	}
	gone := func(id string) bool {
		_, err := tc.ledger.Applications.GetApplication(id)
		return errors.Is(err, ledger.ErrNotFound)
	}
	count := func() int {
		apps, _ := tc.Applications("", false)
		return len(apps)
	}
	if n, err := tc.Prune(tc.clock.Now().Add(SupersededKeptFor - time.Minute)); n != 0 || err != nil {
		t.Fatalf("deleted %d before any retention passed (%v)", n, err)
	}
	tc.clock.Advance(SupersededKeptFor)
	if n, _ := tc.Prune(tc.clock.Now()); n != 1 || !gone(old.ID) || count() != 4 {
		t.Fatalf("after %s: deleted %d, the superseded one gone: %v, %d left", SupersededKeptFor, n, gone(old.ID), count())
	}
	// The replaced application's record, sent again, is not taken back in.
	if _, err := tc.Submit(oldRaw); protocol.Reason(err) != "expired" {
		t.Fatalf("the deleted application's record again: %v", err)
	}
	tc.clock.Advance(RejectedKeptFor - SupersededKeptFor)
	if n, _ := tc.Prune(tc.clock.Now()); n != 1 || !gone(rejectedApp.ID) || count() != 3 {
		t.Fatalf("after %s: deleted %d, %d left", RejectedKeptFor, n, count())
	}
	for _, st := range []string{protocol.StatusPending, protocol.StatusApproved, protocol.StatusRevoked} {
		if apps, _ := tc.Applications(st, false); len(apps) == 0 {
			t.Errorf("no %s application left", st)
		}
	}
	tc.restart(t)
	if !tc.Certified(approved.id) || tc.Certified(revoked.id) || tc.Certified(rejected.id) {
		t.Fatalf("certified after the deletions and a restart: approved %v, revoked %v, rejected %v",
			tc.Certified(approved.id), tc.Certified(revoked.id), tc.Certified(rejected.id))
	}
	if resp := tc.answer(from(changer.id, "/ip4/127.0.0.1/tcp/1"), protocol.ApplyRequest{Op: "status"}); !resp.OK {
		t.Fatalf("status of the applicant whose old application was deleted: %+v", resp)
	}
}

// TestApplicantMailsBounded: the applicant's address is e-mailed on a reviewer's question and
// decision, not on the applicant's own updates and answers (the webhook hears of those, with
// no address), at most MailsPerHour times an hour whatever the case of its letters, and the
// name the e-mail greets is one line.
func TestApplicantMailsBounded(t *testing.T) {
	smtp := noticetest.StartSMTP(t, "", "", nil)
	hook := noticetest.StartWebhook(t, http.StatusOK)
	tc := newTestCoordinator(t, func(c *config.CoordinatorConfig) {
		c.Notify = config.NotifyConfig{SMTPAddr: smtp.Addr(), SMTPFrom: "coordinator@gpunex.invalid", WebhookURL: hook.URL}
	})
	ada := newTestApplicant()
	f := form()
	f.Name = "Ada\nBcc: victim@example.org\n\n" + strings.Repeat("Lovelace ", 7)
	app := tc.submitNew(t, ada, f)
	f.ID = app.ID
	raw, _ := ada.sign(t, f, tc.clock.Now())
	if _, err := tc.Submit(raw); err != nil { // an update
		t.Fatal(err)
	}
	tc.decide(t, app.ID, "request-info", "Which UPS?")
	f.Answer = "An APC Smart-UPS"
	raw, _ = ada.sign(t, f, tc.clock.Now())
	if _, err := tc.Submit(raw); err != nil { // the answer
		t.Fatal(err)
	}
	tc.decide(t, app.ID, "approve", "Welcome")
	waitFor(t, "the webhook hears of the update, the question, the answer and the approval", func() bool { return hook.Delivered() == 4 })
	waitFor(t, "two e-mails", func() bool { return len(smtp.Messages()) >= 2 })
	var subjects []string
	for _, m := range smtp.Messages() {
		mail := noticetest.DecodeMail(t, m.Data)
		subjects = append(subjects, mail.Subject)
		first := strings.TrimSpace(strings.SplitN(mail.Body, "\n", 2)[0])
		if !strings.HasPrefix(first, "Hello Ada Bcc: victim@example.org Lovelace") || len([]rune(first)) > len("Hello ,")+mailNameRunes {
			t.Errorf("the greeting: %q", first)
		}
	}
	sort.Strings(subjects)
	if got := strings.Join(subjects, "; "); got != "gpunex: application "+app.ID+" approved (enterprise); gpunex: application "+app.ID+" info-requested" {
		t.Fatalf("e-mails sent: %s", got)
	}
	for _, r := range hook.Requests() {
		var body struct {
			To    string
			Event struct{ Status string }
		}
		json.Unmarshal(r.Body, &body)
		if want := map[string]string{protocol.StatusInfoRequested: f.Email, protocol.StatusApproved: f.Email}[body.Event.Status]; body.To != want {
			t.Errorf("the webhook's notice of %s names the address %q; want %q", body.Event.Status, body.To, want)
		}
	}

	// Five rejections to one address (one already had its e-mail of the hour... two here).
	for i := range 5 {
		other := newTestApplicant()
		g := form()
		g.Email = []string{"ADA@example.org", "ada@EXAMPLE.org", "ada@example.org"}[i%3]
		tc.decide(t, tc.submitNew(t, other, g).ID, "reject", fmt.Sprintf("reason %d", i))
	}
	waitFor(t, "nine webhook notices", func() bool { return hook.Delivered() == 9 })
	waitFor(t, "the hour's e-mails", func() bool { return len(smtp.Messages()) >= MailsPerHour })
	time.Sleep(100 * time.Millisecond)
	if n := len(smtp.Messages()); n != MailsPerHour {
		t.Fatalf("%d e-mails to one address within the hour; want %d", n, MailsPerHour)
	}
	tc.clock.Advance(time.Hour)
	tc.decide(t, tc.submitNew(t, newTestApplicant(), form()).ID, "reject", "an hour later")
	waitFor(t, "an e-mail an hour later", func() bool { return len(smtp.Messages()) == MailsPerHour+1 })
}
