package onboarding

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// pokes counts the wake-ups of the offer publisher.
type pokes struct{ n atomic.Int32 }

func (p *pokes) Poke() { p.n.Add(1) }

// testProvider is a provider's applicant, on its own peer, applying to tc.
type testProvider struct {
	*Applicant
	ledger    *ledger.Ledger
	clock     *clock.Fake
	publisher *pokes
	alerts    []string
	alertsMu  sync.Mutex
	cancel    context.CancelFunc
}

// newTestProvider starts an applicant connected to the coordinator, with its own clock set
// to the coordinator's time plus skew. notify says whether it takes pushed notifications.
func newTestProvider(t *testing.T, tc *testCoord, skew time.Duration, notify bool) *testProvider {
	t.Helper()
	pp := newTestPeer(t, nil)
	connect(t, pp, tc.peer)
	tp := &testProvider{ledger: newTestLedger(t), clock: clock.NewFake(tc.clock.Now().Add(skew)), publisher: &pokes{}}
	tp.Applicant = NewApplicant(ApplicantDeps{Base: subsystem.Base{Peer: pp, Clock: tp.clock, Log: quietLogger(), Metrics: metrics.New(nil, nil)}, Applicant: tp.ledger.Applicant, Notifications: tp.ledger.Notifications, Serials: tp.ledger.Serials,
		Trusted: []peer.ID{tc.peer.ID}, Revocations: tc.revs, Publisher: tp.publisher,
		Detect: func() ([]bench.GPUInfo, error) {
			return []bench.GPUInfo{{Model: "L4-24GB", VRAMGB: 24, Simulated: true}, {Model: "L4-24GB", VRAMGB: 24, Simulated: true}}, nil
		},
		Alert: func(key, subject, body string) {
			tp.alertsMu.Lock()
			tp.alerts = append(tp.alerts, key+": "+body)
			tp.alertsMu.Unlock()
		}})
	if notify {
		pp.Handle(protocol.NotifyProtocol, tp.HandleNotify)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tp.Run(ctx) }()
	tp.cancel = cancel
	t.Cleanup(func() { cancel(); <-done })
	return tp
}

func (tp *testProvider) own(t *testing.T) ledger.OwnApplication {
	t.Helper()
	o, err := tp.ledger.Applicant.GetOwnApplication()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// until waits for cond, moving the provider's clock by step between looks (the applicant's
// loop waits on it).
func (tp *testProvider) until(t *testing.T, what string, step time.Duration, cond func(o ledger.OwnApplication) bool) ledger.OwnApplication {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if o, err := tp.ledger.Applicant.GetOwnApplication(); err == nil && cond(o) {
			return o
		}
		if time.Now().After(deadline) {
			o, _ := tp.ledger.Applicant.GetOwnApplication()
			t.Fatalf("timed out waiting for %s: %+v", what, o)
		}
		tp.clock.Advance(step)
		time.Sleep(5 * time.Millisecond)
	}
}

func status(want string) func(o ledger.OwnApplication) bool {
	return func(o ledger.OwnApplication) bool { return o.Status == want }
}

// TestApplicantDelivery: an application made while the coordinator does not take
// applications is kept and retried, each try counted with its error; once the coordinator
// answers it is delivered and pending. The coordinator's question, the answer, the approval
// and the revocation each reach the provider: the certificate is held and then dropped, the
// publisher woken each time, the operator alerted of the revocation.
func TestApplicantDelivery(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	tp := newTestProvider(t, tc, 0, true)
	if _, err := tp.Answer("nothing asked"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an answer before any application: %v", err)
	}
	own, err := tp.Submit(form())
	if err != nil {
		t.Fatal(err)
	}
	if own.Status != api.StatusQueued || own.Delivered {
		t.Fatalf("just submitted: %+v", own)
	}
	tp.until(t, "two failed deliveries", 0, func(o ledger.OwnApplication) bool { return o.Attempts >= 1 })
	tp.until(t, "two failed deliveries", ApplyRetryMax, func(o ledger.OwnApplication) bool { return o.Attempts >= 2 })
	if o := tp.own(t); o.Status != api.StatusQueued || o.LastError == "" {
		t.Fatalf("while the coordinator takes no application: %+v", o)
	}
	tc.peer.Handle(protocol.ApplyProtocol, tc.HandleApply)
	o := tp.until(t, "delivered", ApplyRetryMax, func(o ledger.OwnApplication) bool { return o.Status == protocol.StatusPending && o.NotificationSeq > 0 })
	if !o.Delivered || o.LastError != "" || o.DecisionDue.IsZero() {
		t.Fatalf("delivered: %+v", o)
	}
	app, err := tc.ledger.Applications.GetApplication(own.ID)
	if err != nil || len(app.Events) != 1 {
		t.Fatalf("the coordinator's queue: %+v %v", app, err)
	}
	sent, _ := protocol.OpenApplication(app.Raw)
	if len(sent.Detected) != 1 || sent.Detected[0].Count != 2 || sent.Detected[0].Model != "L4-24GB" {
		t.Fatalf("the detected GPUs sent: %+v", sent.Detected)
	}

	tc.decide(t, own.ID, "request-info", "Which UPS?")
	tp.until(t, "the question", 0, status(protocol.StatusInfoRequested))
	if v := tp.View(tp.own(t)); v.Message != "Which UPS?" || v.Certificate != nil {
		t.Fatalf("the provider's view of the question: %+v", v)
	}
	if _, err := tp.Answer(" "); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("an empty answer: %v", err)
	}
	if _, err := tp.Answer("An APC Smart-UPS"); err != nil {
		t.Fatal(err)
	}
	tp.until(t, "the answer delivered", ApplyRetryMin, func(o ledger.OwnApplication) bool { return o.Delivered && o.Status == protocol.StatusPending })
	if a, _ := tc.ledger.Applications.GetApplication(own.ID); a.Status != protocol.StatusPending || !strings.Contains(trail(a), "answered by provider") {
		t.Fatalf("the coordinator after the answer: %s %q", a.Status, trail(a))
	}
	if _, err := tp.Answer("again"); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("an answer nobody asked for: %v", err)
	}

	before := tp.publisher.n.Load()
	tc.decide(t, own.ID, "approve", "welcome")
	tp.until(t, "the approval", 0, status(protocol.StatusApproved))
	v := tp.View(tp.own(t))
	if v.Certificate == nil || v.Certificate.Tier != protocol.TierEnterprise || v.Tier != protocol.TierEnterprise || tp.publisher.n.Load() == before {
		t.Fatalf("approved: %+v, publisher woken %d times", v, tp.publisher.n.Load()-before)
	}
	if _, err := tc.Revoke(context.Background(), tp.id, "benchmarks faked", "carol"); err != nil {
		t.Fatal(err)
	}
	tp.until(t, "the revocation", 0, status(protocol.StatusRevoked))
	if tp.HeldCertificate() != nil || tp.View(tp.own(t)).Certificate != nil {
		t.Fatal("a revoked provider keeps its certificate")
	}
	tp.alertsMu.Lock()
	defer tp.alertsMu.Unlock()
	if len(tp.alerts) != 1 || !strings.Contains(tp.alerts[0], "benchmarks faked") {
		t.Fatalf("the operator's alerts: %q", tp.alerts)
	}
}

// TestApplicantRefusedOrWaiting: a record the coordinator refuses (here expired at its
// clock) makes the application refused, and it is not sent again; a queue without room
// keeps it queued and sent again until there is room.
func TestApplicantRefusedOrWaiting(t *testing.T) {
	maxOpen := MaxOpenApplications
	t.Cleanup(func() { MaxOpenApplications = maxOpen }) // after the applicants stop
	tc := newTestCoordinator(t, nil)
	tc.peer.Handle(protocol.ApplyProtocol, tc.HandleApply)
	late := newTestProvider(t, tc, -8*24*time.Hour, true)
	if _, err := late.Submit(form()); err != nil {
		t.Fatal(err)
	}
	o := late.until(t, "refused", 0, status(api.StatusRefused))
	if !o.Delivered || !strings.Contains(o.Message, "expired") || o.Attempts != 0 {
		t.Fatalf("refused: %+v", o)
	}
	late.clock.Advance(time.Hour)
	time.Sleep(50 * time.Millisecond)
	if n := tc.rejected("expired"); n != 1 {
		t.Fatalf("the refused record was sent %v times", n)
	}

	tc.mu.Lock()
	MaxOpenApplications = 0
	tc.mu.Unlock()
	waiting := newTestProvider(t, tc, 0, true)
	own, err := waiting.Submit(form())
	if err != nil {
		t.Fatal(err)
	}
	o = waiting.until(t, "tried", ApplyRetryMin, func(o ledger.OwnApplication) bool { return o.Attempts >= 2 })
	if o.Status != api.StatusQueued || !strings.Contains(o.LastError, "the review queue is full") {
		t.Fatalf("while the queue is full: %+v", o)
	}
	tc.mu.Lock()
	MaxOpenApplications = 10
	tc.mu.Unlock()
	waiting.until(t, "delivered once there is room", ApplyRetryMax, status(protocol.StatusPending))
	if _, err := tc.ledger.Applications.GetApplication(own.ID); err != nil {
		t.Fatal(err)
	}
}

// pendingApplicant is a provider that takes no pushed notification, whose application the
// coordinator holds pending.
func pendingApplicant(t *testing.T) (*testCoord, *testProvider, ledger.OwnApplication) {
	t.Helper()
	tc := newTestCoordinator(t, nil)
	tc.peer.Handle(protocol.ApplyProtocol, tc.HandleApply)
	tp := newTestProvider(t, tc, 0, false)
	if _, err := tp.Submit(form()); err != nil {
		t.Fatal(err)
	}
	own := tp.until(t, "pending", ApplyRetryMin, func(o ledger.OwnApplication) bool { return o.Status == protocol.StatusPending && o.NotificationSeq > 0 })
	return tc, tp, own
}

// TestApplicantFollowsStatus: a provider that misses the coordinator's push learns the
// decision from its next status request; once it holds a certificate near its expiry, it
// asks every RenewAskEvery and takes the renewed certificate.
func TestApplicantFollowsStatus(t *testing.T) {
	tc, tp, own := pendingApplicant(t)
	tc.decide(t, own.ID, "approve", "")
	time.Sleep(50 * time.Millisecond)
	if o := tp.own(t); o.Status != protocol.StatusPending {
		t.Fatalf("a provider taking no push learnt %s without asking", o.Status)
	}
	tp.until(t, "the approval, asked for", ApplyStatusPoll, status(protocol.StatusApproved))
	first := tp.HeldCertificate()
	if first == nil {
		t.Fatal("no certificate after the approval")
	}
	// Near the expiry the coordinator renews it; the provider asks and takes it.
	toRenewal := first.ExpiresAt.Sub(tc.clock.Now()) - tc.cfg.CertificateRenewBefore.Duration + time.Hour
	tc.clock.Advance(toRenewal)
	tp.clock.Advance(toRenewal)
	if n, err := tc.renewDue(tc.clock.Now()); n != 1 || err != nil {
		t.Fatalf("renewed %d (%v)", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c := tp.HeldCertificate(); c == nil || c.Serial == first.Serial; c = tp.HeldCertificate() {
		if time.Now().After(deadline) {
			t.Fatal("the provider never took the renewed certificate")
		}
		tp.clock.Advance(RenewAskEvery)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestApplicantNotifications: a provider keeps a notification once; an older one than the
// status held changes nothing; one about an earlier application renews the certificate
// held only when issued later by the same coordinator for the same application; one from an
// untrusted coordinator is refused.
func TestApplicantNotifications(t *testing.T) {
	tc, tp, own := pendingApplicant(t)
	pending, _ := tc.ledger.Applications.GetApplication(own.ID)
	approved := tc.decide(t, own.ID, "approve", "")
	if err := tp.TakeNotification(approved.Notification, "push"); err != nil {
		t.Fatal(err)
	}
	if err := tp.TakeNotification(pending.Notification, "push"); err != nil || tp.own(t).Status != protocol.StatusApproved {
		t.Fatalf("an older notification after the approval: %v, status %s", err, tp.own(t).Status)
	}
	if err := tp.TakeNotification(approved.Notification, "push"); err != nil {
		t.Fatal(err)
	}
	if ns, _ := tp.ledger.Notifications.Notifications(); len(ns) != 2 {
		t.Fatalf("%d notifications kept; want the pending and the approval, once each", len(ns))
	}
	held := tp.HeldCertificate()

	// A newer application under review; a renewal of the older one arrives.
	next, err := tp.Submit(form())
	if err != nil {
		t.Fatal(err)
	}
	tp.until(t, "the new application pending", ApplyRetryMin, func(o ledger.OwnApplication) bool { return o.ID == next.ID && o.Status == protocol.StatusPending })
	tc.clock.Advance(time.Minute)
	tp.clock.Advance(time.Minute)
	renewed, err := tc.reissue(&held.Certificate, tc.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.TakeNewerCertificate(renewed); err != nil || tp.HeldCertificate().Serial == held.Serial {
		t.Fatalf("a renewal of the certificate held: %v", err)
	}
	other := recordtest.Certificate(t, tc.peer.Key, tp.id, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}}, tc.clock.Now().Add(time.Hour))
	if err := tp.TakeNewerCertificate(other); err != nil || tp.HeldCertificate().Application != held.Application {
		t.Fatalf("a certificate of another application replaced the one held: %v", err)
	}
	strangerKey, _ := recordtest.NewKey()
	forged, _ := protocol.Seal(protocol.KindNotification, protocol.Notification{Version: protocol.NotificationVersion,
		Coordinator: peerOf(strangerKey).String(), Provider: tp.id.String(), Seq: 1, IssuedAt: tc.clock.Now(), Application: next.ID,
		Status: protocol.StatusApproved}, strangerKey)
	if err := tp.TakeNotification(forged, "push"); protocol.Reason(err) != "untrusted" || tp.own(t).Status != protocol.StatusPending {
		t.Fatalf("a notification from an untrusted coordinator: %v", err)
	}
}
