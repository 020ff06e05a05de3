package onboarding

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// The provider's side of onboarding: its application is signed and kept in the ledger
// until the coordinator acknowledges it (retrying with backoff, across restarts), its
// status is followed until a decision, and the notifications a coordinator pushes are
// checked and kept.

// Retry timing of the applicant; variables so that tests can shorten them.
var (
	ApplyRetryMin   = 500 * time.Millisecond
	ApplyRetryMax   = 30 * time.Second
	ApplyStatusPoll = 30 * time.Second
)

// Poker wakes the provider's publisher: a new certificate (or none) changes the offer.
type Poker interface{ Poke() }

// RevocationsKnown tells whether a certificate is revoked (the offers package's trust store).
type RevocationsKnown interface {
	RevocationOf(c *protocol.SignedCertificate) *protocol.SignedRevocation
}

// ApplicantDeps are what a provider's applicant needs.
type ApplicantDeps struct {
	subsystem.Base // the peer, clock, logger and metrics of the node
	// Applicant keeps the provider's application and certificate, Notifications the
	// coordinator's notifications, Serials the applications' sequences.
	Applicant     *ledger.ApplicantStore
	Notifications *ledger.NotificationStore
	Serials       *ledger.SerialStore
	// Trusted are the coordinators this provider trusts; it applies to the first.
	Trusted     []peer.ID
	Revocations RevocationsKnown
	Publisher   Poker
	// Detect lists the machine's GPUs, for the application form.
	Detect func() ([]bench.GPUInfo, error)
	// Alert, when set, tells the operator that the certificate was revoked.
	Alert func(key, subject, body string)
}

// Applicant is a provider's onboarding: its application, the coordinator's notifications,
// and the certificate it holds.
type Applicant struct {
	peer          *p2p.Peer
	id            peer.ID
	applicant     *ledger.ApplicantStore
	notifications *ledger.NotificationStore
	serials       *ledger.SerialStore
	clock         clock.Clock
	log           *slog.Logger
	metrics       *metrics.Metrics
	trusted       []peer.ID
	trust         protocol.Trust
	revocations   RevocationsKnown
	publisher     Poker
	alert         func(key, subject, body string)
	detect        func() ([]bench.GPUInfo, error)

	wake chan struct{}
	mu   sync.Mutex // one change of the own application at a time
}

// NewApplicant returns a provider's applicant; Run delivers and follows its application.
func NewApplicant(d ApplicantDeps) *Applicant {
	return &Applicant{peer: d.Peer, id: d.Peer.ID, applicant: d.Applicant, notifications: d.Notifications, serials: d.Serials,
		clock: d.Clock, log: d.Log, metrics: d.Metrics,
		trusted: d.Trusted, trust: protocol.NewTrust(d.Trusted...), revocations: d.Revocations, publisher: d.Publisher,
		detect: d.Detect, alert: d.Alert, wake: make(chan struct{}, 1)}
}

func (a *Applicant) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// coordinatorID is the coordinator applications go to: the first trusted one.
func (a *Applicant) coordinatorID() (peer.ID, error) {
	if len(a.trusted) == 0 {
		return "", api.Invalid(errors.New("no coordinator to apply to: set trust.coordinators in config.toml (or init with --bootstrap)"))
	}
	return a.trusted[0], nil
}

// Detected returns the GPUs this node's probe finds (NVML, or the simulated GPUs the
// configuration declares). Where detection fails the application says so in its
// differences instead.
func (a *Applicant) Detected() ([]protocol.DetectedGPU, error) {
	gpus, err := a.detect()
	if err != nil {
		return nil, err
	}
	return detectedByModel(gpus), nil
}

// Submit signs a new application from a filled-in form and queues it for delivery.
func (a *Applicant) Submit(form protocol.Application) (ledger.OwnApplication, error) {
	coord, err := a.coordinatorID()
	if err != nil {
		return ledger.OwnApplication{}, err
	}
	for i := range form.GPUs {
		form.GPUs[i].Model = protocol.NormalizeModel(form.GPUs[i].Model)
		form.GPUs[i].Location.Region = protocol.NormalizeRegion(form.GPUs[i].Location.Region)
	}
	detected, derr := a.Detected()
	form.Detected = detected
	form.DetectedHostRAMGB = bench.HostRAMGB()
	form.Differences = append(protocol.CompareDetected(form.GPUs, form.Detected),
		protocol.CompareHost(form.GPUs, form.Detected, form.DetectedHostRAMGB)...)
	if derr != nil {
		form.Differences = append([]string{"GPU detection failed: " + truncateText(derr.Error(), 250)}, form.Differences...)
	}
	form.Answer = ""
	if err := form.ValidateForm(); err != nil {
		return ledger.OwnApplication{}, api.Invalid(err)
	}
	var id [6]byte
	rand.Read(id[:])
	form.ID = hex.EncodeToString(id[:])
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	raw, seq, err := a.seal(form, now)
	if err != nil {
		return ledger.OwnApplication{}, err
	}
	own := ledger.OwnApplication{
		ID: form.ID, Seq: seq, Raw: raw, Coordinator: coord.String(), Status: api.StatusQueued,
		SubmittedAt: now, UpdatedAt: now,
	}
	if err := a.applicant.SetOwnApplication(own); err != nil {
		return own, err
	}
	a.log.Info("application queued", "id", form.ID, "coordinator", coord, "differences", form.Differences)
	a.poke()
	return own, nil
}

func (a *Applicant) seal(app protocol.Application, now time.Time) ([]byte, uint64, error) {
	seq, err := a.serials.NextSerial("application", now)
	if err != nil {
		return nil, 0, err
	}
	app.Version, app.Provider, app.Seq, app.IssuedAt = protocol.ApplicationVersion, a.id.String(), seq, now.UTC()
	raw, err := protocol.Seal(protocol.KindApplication, app, a.peer.Key)
	if err != nil {
		return nil, 0, api.Invalid(err)
	}
	return raw, seq, nil
}

// Answer replies to the coordinator's question: the application is signed again with the
// answer and delivered.
func (a *Applicant) Answer(message string) (ledger.OwnApplication, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	own, err := a.applicant.GetOwnApplication()
	if errors.Is(err, ledger.ErrNotFound) {
		return own, fmt.Errorf("%w: no application yet (gpunex apply)", api.ErrNotFound)
	}
	if err != nil {
		return own, err
	}
	if strings.TrimSpace(message) == "" {
		return own, api.Invalid(errors.New("message: the answer is empty"))
	}
	if own.Status != protocol.StatusInfoRequested {
		return own, api.Invalid(fmt.Errorf("application %s is %s: the coordinator asked nothing to answer", own.ID, own.Status))
	}
	app, err := protocol.OpenApplication(own.Raw)
	if err != nil {
		return own, err
	}
	app.Answer = message
	if err := app.ValidateForm(); err != nil {
		return own, api.Invalid(err)
	}
	now := a.clock.Now()
	raw, seq, err := a.seal(*app, now)
	if err != nil {
		return own, err
	}
	own, err = a.applicant.UpdateOwnApplication(func(o *ledger.OwnApplication) error {
		o.Raw, o.Seq, o.Delivered, o.Attempts, o.LastError, o.UpdatedAt = raw, seq, false, 0, "", now
		return nil
	})
	a.poke()
	return own, err
}

// run delivers the queued application until acknowledged, then follows its status until
// it is decided. It survives restarts: everything it needs is in the ledger.
func (a *Applicant) Run(ctx context.Context) {
	retry := ApplyRetryMin
	for {
		wait := time.Duration(0)
		own, err := a.applicant.GetOwnApplication()
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			wait = time.Hour
		case err != nil:
			a.log.Warn("reading own application", "err", err)
			wait = ApplyRetryMax
		case !own.Delivered:
			if err := a.exchange(ctx, protocol.ApplyRequest{Op: "submit", Record: own.Raw}); err != nil {
				a.log.Info("application not delivered yet; will retry", "id", own.ID, "in", retry, "err", err)
				a.note(func(o *ledger.OwnApplication) { o.Attempts++; o.LastError = err.Error() })
				wait, retry = retry, min(2*retry, ApplyRetryMax)
			} else {
				retry = ApplyRetryMin
			}
		case own.Status == api.StatusQueued || isOpen(own.Status):
			wait = ApplyStatusPoll
			if a.clock.Now().Sub(own.UpdatedAt) >= ApplyStatusPoll {
				if err := a.exchange(ctx, protocol.ApplyRequest{Op: "status"}); err != nil {
					a.log.Debug("application status request failed", "err", err)
				}
				a.note(func(o *ledger.OwnApplication) { o.UpdatedAt = a.clock.Now() })
			}
		case a.holdsCertificate() && a.certificateNeedsRenewal(a.clock.Now()):
			// The coordinator pushes a renewed certificate; ask as well, in case that push
			// did not reach this node.
			wait = RenewAskEvery
			if a.clock.Now().Sub(own.UpdatedAt) >= RenewAskEvery {
				if err := a.exchange(ctx, protocol.ApplyRequest{Op: "status"}); err != nil {
					a.log.Info("asking for a renewed certificate failed; will retry", "in", RenewAskEvery, "err", err)
				}
				a.note(func(o *ledger.OwnApplication) { o.UpdatedAt = a.clock.Now() })
			}
		default:
			wait = time.Hour // decided
		}
		if wait == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		case <-a.clock.After(wait):
		}
	}
}

func (a *Applicant) note(f func(o *ledger.OwnApplication)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applicant.UpdateOwnApplication(func(o *ledger.OwnApplication) error { f(o); return nil })
}

// exchange sends one request to the coordinator and takes in its answer.
func (a *Applicant) exchange(ctx context.Context, req protocol.ApplyRequest) error {
	coord, err := a.coordinatorID()
	if err != nil {
		return err
	}
	var resp protocol.ApplyResponse
	if err := a.peer.Exchange(ctx, coord, protocol.ApplyProtocol, applyTimeout, req, protocol.MaxApplyFrame, &resp); err != nil {
		return fmt.Errorf("apply stream to %s: %w", coord, err)
	}
	if req.Op == "submit" {
		if !resp.OK {
			if resp.Reason == "other" {
				return fmt.Errorf("coordinator: %s", resp.Error) // its own trouble: retry
			}
			// The coordinator read the record and refused it: sending it again changes
			// nothing, so stop and say why. A decided application keeps its status.
			a.note(func(o *ledger.OwnApplication) {
				o.Delivered, o.LastError = true, resp.Error
				if o.Status == api.StatusQueued || isOpen(o.Status) {
					o.Status, o.Message = api.StatusRefused, resp.Error
				}
			})
			a.log.Warn("coordinator refused the application", "reason", resp.Reason, "err", resp.Error)
			return nil
		}
		a.note(func(o *ledger.OwnApplication) {
			if o.Seq == peekSeq(req.Record) {
				o.Delivered, o.LastError = true, ""
				if o.Status == api.StatusQueued || o.Status == api.StatusRefused {
					o.Status = protocol.StatusPending
				}
			}
		})
	}
	for _, raw := range [][]byte{resp.Renewal, resp.Notification} {
		if len(raw) > 0 {
			if err := a.TakeNotification(raw, "apply"); err != nil {
				return err
			}
		}
	}
	return nil
}

func peekSeq(raw []byte) uint64 {
	if app, err := protocol.OpenApplication(raw); err == nil {
		return app.Seq
	}
	return 0
}

// TakeNotification checks a coordinator's notification addressed to this node, keeps it,
// and applies it to the own application: status, and the certificate on approval.
func (a *Applicant) TakeNotification(raw []byte, source string) error {
	now := a.clock.Now()
	sn, err := protocol.CheckNotification(raw, now, a.trust, a.id)
	if err != nil {
		a.metrics.RecordsRejected.WithLabelValues(string(protocol.KindNotification), source, protocol.Reason(err)).Inc()
		return err
	}
	subject := fmt.Sprintf("application %s: %s", sn.Application, sn.Status)
	if sn.Tier != "" {
		subject += " (" + sn.Tier + ")"
	}
	added, err := a.notifications.AddNotification(ledger.Notification{
		ReceivedAt: now, From: sn.Signer.String(), Seq: sn.Seq, Subject: subject, Body: sn.Message, Raw: raw,
	})
	if err != nil || !added {
		return err
	}
	a.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindNotification), source).Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	own, err := a.applicant.GetOwnApplication()
	if err == nil && own.ID != sn.Application {
		// About an earlier application, while a newer one is reviewed or was refused: a
		// renewal or a revocation of the certificate held.
		switch {
		case sn.Status == protocol.StatusApproved && len(sn.Certificate) > 0:
			return a.TakeNewerCertificate(sn.Certificate)
		case sn.Status == protocol.StatusRevoked:
			if held := a.HeldCertificate(); held != nil && held.Application == sn.Application && held.Signer == sn.Signer {
				return a.applicant.SetOwnCertificate(nil)
			}
		}
		return nil
	}
	if err != nil || own.ID != sn.Application || sn.Seq <= own.NotificationSeq {
		return nil // about an older application, or older than the status held
	}
	if len(sn.Certificate) > 0 {
		if err := a.applicant.SetOwnCertificate(sn.Certificate); err != nil {
			return err
		}
	}
	if sn.Status == protocol.StatusRevoked {
		if err := a.applicant.SetOwnCertificate(nil); err != nil {
			return err
		}
		if a.alert != nil {
			a.alert("certificate-revoked", "the certificate was revoked by the coordinator", "Application "+sn.Application+": "+sn.Message+
				"\nThe node stopped offering its GPUs. Apply again once the cause is fixed: gpunex apply.")
		}
	}
	_, err = a.applicant.UpdateOwnApplication(func(o *ledger.OwnApplication) error {
		o.Status, o.Tier, o.Message, o.UpdatedAt, o.NotificationSeq = sn.Status, sn.Tier, sn.Message, now, sn.Seq
		o.DecisionDue = sn.DecisionDue
		return nil
	})
	a.log.Info("coordinator notification", "application", sn.Application, "status", sn.Status, "tier", sn.Tier, "message", sn.Message)
	if a.publisher != nil {
		a.publisher.Poke() // publish with the new certificate, or stop
	}
	return err
}

// TakeNewerCertificate keeps a renewal of the certificate held (same application, same
// coordinator, issued later), or a certificate when none is held, and republishes the
// offer with it. A certificate of another application does not replace the one held.
func (a *Applicant) TakeNewerCertificate(raw []byte) error {
	c, err := protocol.OpenCertificate(raw, a.trust)
	if err != nil || c.Provider != a.id.String() || a.revocations.RevocationOf(c) != nil {
		return err
	}
	if h := a.HeldCertificate(); h != nil && (h.Application != c.Application || h.Signer != c.Signer || !c.IssuedAt.After(h.IssuedAt)) {
		return nil
	}
	if err := a.applicant.SetOwnCertificate(raw); err != nil {
		return err
	}
	a.log.Info("certificate renewed", "serial", c.Serial, "expires_at", c.ExpiresAt)
	if a.publisher != nil {
		a.publisher.Poke()
	}
	return nil
}

// heldCertificate opens the certificate this node holds (nil when none or unreadable).
func (a *Applicant) HeldCertificate() *protocol.SignedCertificate {
	raw, err := a.applicant.OwnCertificate()
	if err != nil || len(raw) == 0 {
		return nil
	}
	c, err := protocol.OpenCertificate(raw, a.trust)
	if err != nil {
		return nil
	}
	return c
}

// HandleNotify takes a notification pushed by a coordinator.
func (a *Applicant) HandleNotify(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(applyTimeout))
	raw, err := protocol.ReadFrame(bufio.NewReader(s), protocol.MaxNotificationSize)
	resp := protocol.ApplyResponse{OK: true}
	if err == nil {
		err = a.TakeNotification(raw, "push")
	}
	if err != nil {
		resp = protocol.ApplyResponse{Error: err.Error(), Reason: protocol.Reason(err)}
	}
	protocol.WriteJSONFrame(s, resp)
}

func truncateText(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// detectedByModel counts detected GPUs per model, for an application.
func detectedByModel(gpus []bench.GPUInfo) []protocol.DetectedGPU {
	var out []protocol.DetectedGPU
	for _, g := range gpus {
		if g.Health.Error != "" {
			continue
		}
		found := false
		for i := range out {
			if out[i].Model == g.Model {
				out[i].Count++
				found = true
			}
		}
		if !found {
			out = append(out, protocol.DetectedGPU{Model: g.Model, Count: 1, VRAMGB: g.VRAMGB, Simulated: g.Simulated})
		}
	}
	return out
}

// View is the provider's own application as the API shows it, with the certificate it
// holds when that is valid now and unrevoked.
func (a *Applicant) View(own ledger.OwnApplication) api.OwnApplicationView {
	v := api.OwnApplicationView{
		ID: own.ID, Status: own.Status, Tier: own.Tier, Message: own.Message, Delivered: own.Delivered,
		Attempts: own.Attempts, LastError: own.LastError, Coordinator: own.Coordinator,
		SubmittedAt: own.SubmittedAt, UpdatedAt: own.UpdatedAt,
	}
	if own.Status == protocol.StatusPending {
		v.DecisionDue = own.DecisionDue
	}
	if app, err := protocol.OpenApplication(own.Raw); err == nil {
		v.Application = app
	}
	if raw, err := a.applicant.OwnCertificate(); err == nil {
		if c, err := protocol.CheckCertificate(raw, a.clock.Now(), a.trust); err == nil && a.revocations.RevocationOf(c) == nil {
			v.Certificate = &c.Certificate
		}
	}
	return v
}
