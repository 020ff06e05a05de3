package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// The provider's side of onboarding: its application is signed and kept in the ledger
// until the coordinator acknowledges it (retrying with backoff, across restarts), its
// status is followed until a decision, and the notifications a coordinator pushes are
// checked and kept.

// Local statuses of the provider's own application, besides the coordinator's.
const (
	// StatusQueued: signed and kept, not yet acknowledged by the coordinator.
	StatusQueued = "queued"
	// StatusRefused: the coordinator refused the record itself (invalid, replayed).
	StatusRefused = "refused"
)

// Retry timing of the applicant; variables so that tests can shorten them.
var (
	applyRetryMin   = 500 * time.Millisecond
	applyRetryMax   = 30 * time.Second
	applyStatusPoll = 30 * time.Second
)

type applicant struct {
	n    *Node
	wake chan struct{}
	mu   sync.Mutex // one change of the own application at a time
}

func newApplicant(n *Node) *applicant {
	return &applicant{n: n, wake: make(chan struct{}, 1)}
}

func (a *applicant) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// coordinatorID is the coordinator applications go to: the first trusted one.
func (a *applicant) coordinatorID() (peer.ID, error) {
	ids, err := a.n.cfg.TrustedCoordinators()
	if err != nil {
		return "", err
	}
	if len(ids) == 0 {
		return "", badRequest(errors.New("no coordinator to apply to: set trust.coordinators in config.toml (or init with --bootstrap)"))
	}
	return ids[0], nil
}

// Detected returns the GPUs this node's probe finds (NVML, or the simulated GPUs the
// configuration declares). Where detection fails the application says so in its
// differences instead.
func (a *applicant) Detected() ([]protocol.DetectedGPU, error) {
	gpus, err := DetectGPUs(a.n.cfg, a.n.id)
	if err != nil {
		return nil, err
	}
	return detectedByModel(gpus), nil
}

// Submit signs a new application from a filled-in form and queues it for delivery.
func (a *applicant) Submit(form protocol.Application) (ledger.OwnApplication, error) {
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
	form.Differences = protocol.CompareDetected(form.GPUs, form.Detected)
	if derr != nil {
		form.Differences = append([]string{"GPU detection failed: " + truncateText(derr.Error(), 250)}, form.Differences...)
	}
	form.Answer = ""
	if err := form.ValidateForm(); err != nil {
		return ledger.OwnApplication{}, badRequest(err)
	}
	var id [6]byte
	rand.Read(id[:])
	form.ID = hex.EncodeToString(id[:])
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.n.clock.Now()
	raw, seq, err := a.seal(form, now)
	if err != nil {
		return ledger.OwnApplication{}, err
	}
	own := ledger.OwnApplication{
		ID: form.ID, Seq: seq, Raw: raw, Coordinator: coord.String(), Status: StatusQueued,
		SubmittedAt: now, UpdatedAt: now,
	}
	if err := a.n.ledger.SetOwnApplication(own); err != nil {
		return own, err
	}
	a.n.log.Info("application queued", "id", form.ID, "coordinator", coord, "differences", form.Differences)
	a.poke()
	return own, nil
}

func (a *applicant) seal(app protocol.Application, now time.Time) ([]byte, uint64, error) {
	seq, err := a.n.ledger.NextSerial("application", now)
	if err != nil {
		return nil, 0, err
	}
	app.Version, app.Provider, app.Seq, app.IssuedAt = protocol.ApplicationVersion, a.n.id.String(), seq, now.UTC()
	raw, err := protocol.Seal(protocol.KindApplication, app, a.n.key)
	if err != nil {
		return nil, 0, badRequest(err)
	}
	return raw, seq, nil
}

// Answer replies to the coordinator's question: the application is signed again with the
// answer and delivered.
func (a *applicant) Answer(message string) (ledger.OwnApplication, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	own, err := a.n.ledger.GetOwnApplication()
	if errors.Is(err, ledger.ErrNotFound) {
		return own, fmt.Errorf("%w: no application yet (gpunex apply)", ErrNotFound)
	}
	if err != nil {
		return own, err
	}
	if strings.TrimSpace(message) == "" {
		return own, badRequest(errors.New("message: the answer is empty"))
	}
	if own.Status != protocol.StatusInfoRequested {
		return own, badRequest(fmt.Errorf("application %s is %s: the coordinator asked nothing to answer", own.ID, own.Status))
	}
	app, err := protocol.OpenApplication(own.Raw)
	if err != nil {
		return own, err
	}
	app.Answer = message
	if err := app.ValidateForm(); err != nil {
		return own, badRequest(err)
	}
	now := a.n.clock.Now()
	raw, seq, err := a.seal(*app, now)
	if err != nil {
		return own, err
	}
	own, err = a.n.ledger.UpdateOwnApplication(func(o *ledger.OwnApplication) error {
		o.Raw, o.Seq, o.Delivered, o.Attempts, o.LastError, o.UpdatedAt = raw, seq, false, 0, "", now
		return nil
	})
	a.poke()
	return own, err
}

// run delivers the queued application until acknowledged, then follows its status until
// it is decided. It survives restarts: everything it needs is in the ledger.
func (a *applicant) run(ctx context.Context) {
	retry := applyRetryMin
	for {
		wait := time.Duration(0)
		own, err := a.n.ledger.GetOwnApplication()
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			wait = time.Hour
		case err != nil:
			a.n.log.Warn("reading own application", "err", err)
			wait = applyRetryMax
		case !own.Delivered:
			if err := a.exchange(ctx, applyRequest{Op: "submit", Record: own.Raw}); err != nil {
				a.n.log.Info("application not delivered yet; will retry", "id", own.ID, "in", retry, "err", err)
				a.note(func(o *ledger.OwnApplication) { o.Attempts++; o.LastError = err.Error() })
				wait, retry = retry, min(2*retry, applyRetryMax)
			} else {
				retry = applyRetryMin
			}
		case own.Status == StatusQueued || isOpen(own.Status):
			wait = applyStatusPoll
			if a.n.clock.Now().Sub(own.UpdatedAt) >= applyStatusPoll {
				if err := a.exchange(ctx, applyRequest{Op: "status"}); err != nil {
					a.n.log.Debug("application status request failed", "err", err)
				}
				a.note(func(o *ledger.OwnApplication) { o.UpdatedAt = a.n.clock.Now() })
			}
		case a.n.holdsCertificate() && a.n.certificateNeedsRenewal(a.n.clock.Now()):
			// The coordinator pushes a renewed certificate; ask as well, in case that push
			// did not reach this node.
			wait = renewAskEvery
			if a.n.clock.Now().Sub(own.UpdatedAt) >= renewAskEvery {
				if err := a.exchange(ctx, applyRequest{Op: "status"}); err != nil {
					a.n.log.Info("asking for a renewed certificate failed; will retry", "in", renewAskEvery, "err", err)
				}
				a.note(func(o *ledger.OwnApplication) { o.UpdatedAt = a.n.clock.Now() })
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
		case <-time.After(wait):
		}
	}
}

func (a *applicant) note(f func(o *ledger.OwnApplication)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n.ledger.UpdateOwnApplication(func(o *ledger.OwnApplication) error { f(o); return nil })
}

// exchange sends one request to the coordinator and takes in its answer.
func (a *applicant) exchange(ctx context.Context, req applyRequest) error {
	coord, err := a.coordinatorID()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	if err := a.n.reach(ctx, coord); err != nil {
		return err
	}
	s, err := a.n.host.NewStream(ctx, coord, protocol.ApplyProtocol)
	if err != nil {
		return fmt.Errorf("open apply stream to %s: %w", coord, err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	if err := writeJSONFrame(s, req); err != nil {
		s.Reset()
		return err
	}
	var resp applyResponse
	if err := readJSONFrame(bufio.NewReader(s), maxApplyFrame, &resp); err != nil {
		s.Reset()
		return fmt.Errorf("coordinator's answer: %w", err)
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
				if o.Status == StatusQueued || isOpen(o.Status) {
					o.Status, o.Message = StatusRefused, resp.Error
				}
			})
			a.n.log.Warn("coordinator refused the application", "reason", resp.Reason, "err", resp.Error)
			return nil
		}
		a.note(func(o *ledger.OwnApplication) {
			if o.Seq == peekSeq(req.Record) {
				o.Delivered, o.LastError = true, ""
				if o.Status == StatusQueued || o.Status == StatusRefused {
					o.Status = protocol.StatusPending
				}
			}
		})
	}
	for _, raw := range [][]byte{resp.Renewal, resp.Notification} {
		if len(raw) > 0 {
			if err := a.n.takeNotification(raw, "apply"); err != nil {
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

// takeNotification checks a coordinator's notification addressed to this node, keeps it,
// and applies it to the own application: status, and the certificate on approval.
func (n *Node) takeNotification(raw []byte, source string) error {
	now := n.clock.Now()
	sn, err := protocol.CheckNotification(raw, now, n.trust.trust, n.id)
	if err != nil {
		n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindNotification), source, protocol.Reason(err)).Inc()
		return err
	}
	subject := fmt.Sprintf("application %s: %s", sn.Application, sn.Status)
	if sn.Tier != "" {
		subject += " (" + sn.Tier + ")"
	}
	added, err := n.ledger.AddNotification(ledger.Notification{
		ReceivedAt: now, From: sn.Signer.String(), Seq: sn.Seq, Subject: subject, Body: sn.Message, Raw: raw,
	})
	if err != nil || !added {
		return err
	}
	n.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindNotification), source).Inc()
	if n.applicant == nil {
		return nil
	}
	n.applicant.mu.Lock()
	defer n.applicant.mu.Unlock()
	own, err := n.ledger.GetOwnApplication()
	if err == nil && own.ID != sn.Application {
		// About an earlier application, while a newer one is reviewed or was refused: a
		// renewal or a revocation of the certificate held.
		switch {
		case sn.Status == protocol.StatusApproved && len(sn.Certificate) > 0:
			return n.takeNewerCertificate(sn.Certificate)
		case sn.Status == protocol.StatusRevoked:
			if held := n.heldCertificate(); held != nil && held.Application == sn.Application && held.Signer == sn.Signer {
				return n.ledger.SetOwnCertificate(nil)
			}
		}
		return nil
	}
	if err != nil || own.ID != sn.Application || sn.Seq <= own.NotificationSeq {
		return nil // about an older application, or older than the status held
	}
	if len(sn.Certificate) > 0 {
		if err := n.ledger.SetOwnCertificate(sn.Certificate); err != nil {
			return err
		}
	}
	if sn.Status == protocol.StatusRevoked {
		if err := n.ledger.SetOwnCertificate(nil); err != nil {
			return err
		}
	}
	_, err = n.ledger.UpdateOwnApplication(func(o *ledger.OwnApplication) error {
		o.Status, o.Tier, o.Message, o.UpdatedAt, o.NotificationSeq = sn.Status, sn.Tier, sn.Message, now, sn.Seq
		return nil
	})
	n.log.Info("coordinator notification", "application", sn.Application, "status", sn.Status, "tier", sn.Tier, "message", sn.Message)
	if n.prov != nil {
		n.prov.poke() // publish with the new certificate, or stop
	}
	return err
}

// takeNewerCertificate keeps a renewal of the certificate held (same application, same
// coordinator, issued later), or a certificate when none is held, and republishes the
// offer with it. A certificate of another application does not replace the one held.
func (n *Node) takeNewerCertificate(raw []byte) error {
	c, err := protocol.OpenCertificate(raw, n.trust.trust)
	if err != nil || c.Provider != n.id.String() || n.trust.revocationOf(c) != nil {
		return err
	}
	if h := n.heldCertificate(); h != nil && (h.Application != c.Application || h.Signer != c.Signer || !c.IssuedAt.After(h.IssuedAt)) {
		return nil
	}
	if err := n.ledger.SetOwnCertificate(raw); err != nil {
		return err
	}
	n.log.Info("certificate renewed", "serial", c.Serial, "expires_at", c.ExpiresAt)
	if n.prov != nil {
		n.prov.poke()
	}
	return nil
}

// heldCertificate opens the certificate this node holds (nil when none or unreadable).
func (n *Node) heldCertificate() *protocol.SignedCertificate {
	raw, err := n.ledger.OwnCertificate()
	if err != nil || len(raw) == 0 {
		return nil
	}
	c, err := protocol.OpenCertificate(raw, n.trust.trust)
	if err != nil {
		return nil
	}
	return c
}

// handleNotify takes a notification pushed by a coordinator.
func (n *Node) handleNotify(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(applyTimeout))
	raw, err := readFrame(bufio.NewReader(s), maxNotifyFrame)
	resp := applyResponse{OK: true}
	if err == nil {
		err = n.takeNotification(raw, "push")
	}
	if err != nil {
		resp = applyResponse{Error: err.Error(), Reason: protocol.Reason(err)}
	}
	writeJSONFrame(s, resp)
}

// pushNotification delivers a notification to a provider's node.
func (n *Node) pushNotification(ctx context.Context, p peer.ID, raw []byte) error {
	if err := n.reach(ctx, p); err != nil {
		return err
	}
	s, err := n.host.NewStream(ctx, p, protocol.NotifyProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	if err := writeFrame(s, raw); err != nil {
		s.Reset()
		return err
	}
	var resp applyResponse
	if err := readJSONFrame(bufio.NewReader(s), 4096, &resp); err != nil {
		return err
	}
	if !resp.OK {
		return fmt.Errorf("provider refused the notification: %s", resp.Error)
	}
	return nil
}

// reach makes sure the host knows an address of p: connected already, in the peerstore,
// or found through the DHT.
func (n *Node) reach(ctx context.Context, p peer.ID) error {
	if n.host.Network().Connectedness(p) == network.Connected || len(n.host.Peerstore().Addrs(p)) > 0 {
		return nil
	}
	ai, err := n.dht.FindPeer(ctx, p)
	if err != nil {
		return fmt.Errorf("find %s: %w", p, err)
	}
	n.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, 10*time.Minute)
	return nil
}

// openStream opens a stream for an operator's request (a job proposal, a job's control).
// A dial that fails because an earlier one failed moments ago (libp2p's dial backoff) is
// tried once more at once: the operator asked now, and the peer may be back.
func (n *Node) openStream(ctx context.Context, p peer.ID, proto libp2pprotocol.ID) (network.Stream, error) {
	s, err := n.host.NewStream(ctx, p, proto)
	if err != nil && errors.Is(err, swarm.ErrDialBackoff) {
		if sw, ok := n.host.Network().(*swarm.Swarm); ok {
			sw.Backoff().Clear(p)
			s, err = n.host.NewStream(ctx, p, proto)
		}
	}
	return s, err
}

// Notifications returns the notices kept for the operator, oldest first.
func (n *Node) Notifications() ([]ledger.Notification, error) {
	return n.ledger.Notifications()
}

func truncateText(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
