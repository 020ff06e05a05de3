package onboarding

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/notify"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// The coordinator's side of onboarding: it takes applications over the apply stream, keeps
// the queue in its ledger, records every decision with who, when and why, signs
// certificates, notifications and revocations, and tells the applicant
// (docs/protocols/onboarding.md).

const (
	applyTimeout = 10 * time.Second
	// applicationsPerMinute is the most apply-stream requests served to one peer a minute.
	applicationsPerMinute = 20
	// SubmitsPerHour is how many submissions (new applications, updates, answers) one peer
	// may make an hour, with as many at once; a network (IPv4 address, IPv6 /48) four
	// times that, so that rotating peer IDs buys nothing.
	SubmitsPerHour = 10
)

// The queue's limits (docs/protocols/onboarding.md, section 9): variables so that tests can
// change them.
var (
	// MaxOpenApplications caps the review queue: past it, new applications are refused
	// until reviewers catch up (updates and answers to open ones still go through).
	MaxOpenApplications = 5000
	// MaxOpenPerNetwork is how many open applications may have come from one network (an
	// IPv4 address, an IPv6 /48): one stranger cannot take more places than that.
	MaxOpenPerNetwork = 3
	// NewApplicationsPerHour is how many applications that open a place in the queue the
	// whole coordinator takes in an hour (as many at once), from every network together: a
	// flood from many networks fills the queue no faster than reviewers see it. An
	// applicant replacing its own open application does not count.
	NewApplicationsPerHour = 30
	// MailsPerHour is how many e-mails one applicant address gets an hour (as many at once).
	MailsPerHour = 3
	// SupersededKeptFor and RejectedKeptFor are how long an application stays in the queue
	// once superseded by the provider's newer one, or rejected by a reviewer; then it is
	// deleted with its audit trail. Both outlast protocol.MaxApplicationAge, so no record
	// of a deleted application can be submitted again. Approved and revoked applications
	// are kept: they are the history of the certificates issued.
	SupersededKeptFor = 14 * 24 * time.Hour
	RejectedKeptFor   = 90 * 24 * time.Hour
)

// Revocations are the revocations this node knows, and how it takes a new one in (its own
// included): the offers package's trust store and catalogue.
type Revocations interface {
	RevocationsKnown
	TakeRevocation(raw []byte, source string) error
}

// Publisher sends a record to a gossip topic's peers (a *p2p.Topic).
type Publisher interface {
	Publish(ctx context.Context, data []byte) error
}

// CoordinatorDeps are what a coordinator's onboarding needs.
type CoordinatorDeps struct {
	subsystem.Base // the peer, clock, logger and metrics of the node
	// Applications keeps the queue, Links the providers' link measurements (read for the
	// tier), Serials the certificates' serials and the notifications' sequences.
	Applications *ledger.ApplicationStore
	Links        *ledger.LinkStore
	Serials      *ledger.SerialStore
	Config       config.CoordinatorConfig
	// Trust holds the coordinators this one trusts, itself included.
	Trust       protocol.Trust
	Revocations Revocations
	// RevocationsTopic is where revocations are gossiped.
	RevocationsTopic Publisher
	// Models returns the coordinator's model catalogue, which says which models are
	// supported and which reviewed case by case (nil: the first catalogue).
	Models func() *protocol.ModelCatalogue
}

// Coordinator runs the coordinator's onboarding.
type Coordinator struct {
	peer         *p2p.Peer
	id           peer.ID
	applications *ledger.ApplicationStore
	links        *ledger.LinkStore
	serials      *ledger.SerialStore
	clock        clock.Clock
	log          *slog.Logger
	metrics      *metrics.Metrics
	cfg          config.CoordinatorConfig
	trust        protocol.Trust
	revocations  Revocations
	revTopic     Publisher
	models       func() *protocol.ModelCatalogue

	out *notify.Notices
	cal *ReviewCalendar
	mu  sync.Mutex // one submission or decision at a time
	// rate limits apply-stream requests per peer (queue spam).
	rate *p2p.PeerRate
	// submitPeers and submitNets bound submissions per peer and per network; intake, the
	// new applications the queue takes an hour; mails, the e-mails to each address.
	submitPeers *p2p.Budget[peer.ID]
	submitNets  *p2p.Budget[string]
	intake      *p2p.Budget[string]
	mails       *p2p.Budget[string]
	// queue indexes the applications in the ledger.
	queue *queueIndex
}

// NewCoordinator returns a coordinator's onboarding, with the notice channels of its
// configuration (their secret files read now).
func NewCoordinator(d CoordinatorDeps) (*Coordinator, error) {
	oc, err := notify.FromConfig(d.Config.Notify, "coordinator.notify")
	if err != nil {
		return nil, err
	}
	cal, err := NewReviewCalendar(d.Config.Review)
	if err != nil {
		return nil, err
	}
	if d.Models == nil {
		d.Models = protocol.FirstModels
	}
	queue, err := newQueueIndex(d.Applications)
	if err != nil {
		return nil, fmt.Errorf("reading the application queue: %w", err)
	}
	return &Coordinator{cal: cal, models: d.Models, peer: d.Peer, id: d.Peer.ID,
		applications: d.Applications, links: d.Links, serials: d.Serials, clock: d.Clock, log: d.Log, metrics: d.Metrics,
		cfg: d.Config, trust: d.Trust, revocations: d.Revocations, revTopic: d.RevocationsTopic,
		out: notify.New(oc, d.Log.With("subsystem", "notify"), d.Clock), rate: p2p.NewPeerRate(applicationsPerMinute),
		submitPeers: p2p.NewBudget[peer.ID](SubmitsPerHour/60.0, SubmitsPerHour),
		submitNets:  p2p.NewBudget[string](4*SubmitsPerHour/60.0, 4*SubmitsPerHour),
		intake:      p2p.NewBudget[string](float64(NewApplicationsPerHour)/60, float64(NewApplicationsPerHour)),
		mails:       p2p.NewBudget[string](float64(MailsPerHour)/60, float64(MailsPerHour)),
		queue:       queue}, nil
}

// HandleApply serves one request on the apply stream.
func (c *Coordinator) HandleApply(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(applyTimeout))
	var req protocol.ApplyRequest
	var resp protocol.ApplyResponse
	if !c.rate.Allow(s.Conn().RemotePeer(), time.Now()) {
		c.metrics.RecordsRejected.WithLabelValues(string(protocol.KindApplication), "stream", "rate_limited").Inc()
		c.peer.Misbehaved(s.Conn().RemotePeer())
		resp = protocol.ApplyResponse{Error: fmt.Sprintf("more than %d requests in a minute: slow down", applicationsPerMinute), Reason: "rate_limited"}
	} else if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxApplyFrame, &req); err != nil {
		c.metrics.RecordsRejected.WithLabelValues(string(protocol.KindApplication), "stream", protocol.Reason(err)).Inc()
		resp = protocol.ApplyResponse{Error: err.Error(), Reason: protocol.Reason(err)}
	} else {
		resp = c.answer(s.Conn(), req)
	}
	if err := protocol.WriteJSONFrame(s, resp); err != nil {
		s.Reset()
	}
}

// answer serves one request that came over a connection.
func (c *Coordinator) answer(conn network.Conn, req protocol.ApplyRequest) protocol.ApplyResponse {
	resp := protocol.ApplyResponse{OK: true}
	remote := conn.RemotePeer()
	switch req.Op {
	case "submit":
		network, now := applicantNetwork(conn.RemoteMultiaddr()), c.clock.Now()
		if !c.takeSubmission(remote, network, now, 1) {
			c.metrics.RecordsRejected.WithLabelValues(string(protocol.KindApplication), "stream", "rate_limited").Inc()
			c.peer.Misbehaved(remote)
			return protocol.ApplyResponse{Error: fmt.Sprintf("more than %d submissions an hour from this peer or its network: try again later", SubmitsPerHour), Reason: "rate_limited"}
		}
		a, err := c.SubmitFrom(req.Record, network)
		var busy *queueBusy
		if errors.As(err, &busy) {
			c.takeSubmission(remote, network, now, -1) // a try that found no room costs nothing
		}
		if err != nil {
			return protocol.ApplyResponse{Error: err.Error(), Reason: protocol.Reason(err)}
		}
		resp.Notification = a.Notification
	case "status":
		a, ap, ok := c.latestOf(remote)
		if !ok {
			return protocol.ApplyResponse{Error: "no application from this peer", Reason: "not_found"}
		}
		resp.Notification = a.Notification
		if ap.ID != "" && ap.ID != a.ID {
			resp.Renewal = ap.Notification
		}
	default:
		return protocol.ApplyResponse{Error: fmt.Sprintf("unknown op %q", req.Op), Reason: "malformed"}
	}
	return resp
}

// takeSubmission spends n of the submission budgets of a peer and its network (n < 0 gives
// back); false, and nothing spent, when either is short. Loopback (network "") is one network
// for this budget, as it always was: peers on the coordinator's own host share it.
func (c *Coordinator) takeSubmission(p peer.ID, network string, now time.Time, n float64) bool {
	if network == "" {
		network = "loopback"
	}
	if !c.submitNets.Take(network, now, n) {
		return false
	}
	if !c.submitPeers.Take(p, now, n) {
		c.submitNets.Take(network, now, -n)
		return false
	}
	return true
}

// latestOf returns a provider's most recent application, and its most recent approved one
// (zero when none).
func (c *Coordinator) latestOf(p peer.ID) (latest, approved ledger.Application, found bool) {
	s := c.queue.provider(p.String())
	if s.latest == "" {
		return latest, approved, false
	}
	latest, err := c.applications.GetApplication(s.latest)
	if err != nil {
		return latest, approved, false
	}
	if s.approved != "" {
		approved, _ = c.applications.GetApplication(s.approved)
	}
	return latest, approved, true
}

// Certified says whether the coordinator approved a provider and has not revoked it since:
// such a provider may hold a slot in the coordinator's relay. libp2p asks at every
// reservation, from anyone: the answer comes from the queue's index, in memory.
func (c *Coordinator) Certified(p peer.ID) bool {
	return c.queue.provider(p.String()).certified()
}

func isOpen(status string) bool {
	return status == protocol.StatusPending || status == protocol.StatusInfoRequested
}

// Submit takes a signed application into the queue, as SubmitFrom does from no network.
func (c *Coordinator) Submit(raw []byte) (ledger.Application, error) { return c.SubmitFrom(raw, "") }

// SubmitFrom takes a signed application that came from a network ("" for loopback or none)
// into the queue: a new one, an answer to a question, or the same record again (a retry
// whose acknowledgement was lost).
func (c *Coordinator) SubmitFrom(raw []byte, network string) (ledger.Application, error) {
	now := c.clock.Now()
	app, err := protocol.CheckApplication(raw, now)
	if err != nil {
		c.metrics.RecordsRejected.WithLabelValues(string(protocol.KindApplication), "stream", protocol.Reason(err)).Inc()
		return ledger.Application{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	reject := func(err error) (ledger.Application, error) {
		label := protocol.Reason(err)
		var busy *queueBusy
		if errors.As(err, &busy) {
			label = busy.label
		}
		c.metrics.RecordsRejected.WithLabelValues(string(protocol.KindApplication), "stream", label).Inc()
		return ledger.Application{}, err
	}
	actor := "provider " + app.Provider
	proposed, why := protocol.ProposeTier(app)
	same, err := c.applications.GetApplication(app.ID)
	switch {
	case err == nil:
		switch {
		case same.Provider != app.Provider:
			return reject(fmt.Errorf("%w: application ID %s belongs to another provider", protocol.ErrInvalid, app.ID))
		case app.Seq == same.Seq && bytes.Equal(raw, same.Raw):
			return same, nil // delivered again: acknowledge
		case app.Seq <= same.Seq:
			return reject(fmt.Errorf("%w: application %s seq %d, already have %d", protocol.ErrReplay, app.ID, app.Seq, same.Seq))
		case !isOpen(same.Status):
			return reject(fmt.Errorf("%w: application %s is %s; submit a new application for a new review", protocol.ErrInvalid, app.ID, same.Status))
		}
		a, err := c.update(app.ID, func(a *ledger.Application) error {
			a.Raw, a.Seq, a.UpdatedAt = raw, app.Seq, now
			a.ProposedTier, a.TierReasons, a.CaseByCase = proposed, why, app.CaseByCase(c.models())
			if app.Answer != "" && a.Status == protocol.StatusInfoRequested {
				a.Status, a.Message = protocol.StatusPending, ""
				a.ReviewSince, a.Reminded = now, "" // the reviewers' clock starts again
				a.Events = append(a.Events, ledger.Event{At: now, Actor: actor, Action: "answered", Detail: app.Answer})
			} else {
				a.Events = append(a.Events, ledger.Event{At: now, Actor: actor, Action: "updated"})
			}
			return c.sign(a, nil, now)
		})
		if err == nil {
			c.tell(a, false) // the applicant's own doing: its node is told, not its mailbox
		}
		return a, err
	case !errors.Is(err, ledger.ErrNotFound):
		return ledger.Application{}, err
	}
	prov := c.queue.provider(app.Provider)
	if app.Seq <= prov.maxSeq {
		return reject(fmt.Errorf("%w: application seq %d from %s, already have %d", protocol.ErrReplay, app.Seq, app.Provider, prov.maxSeq))
	}
	if err := c.room(prov.open, network, now); err != nil {
		return reject(err)
	}
	for _, id := range prov.open {
		// One open application per provider: the newer replaces the older.
		if _, err := c.update(id, func(a *ledger.Application) error {
			a.Status, a.Message, a.UpdatedAt = protocol.StatusRejected, "superseded by application "+app.ID, now
			a.Events = append(a.Events, ledger.Event{At: now, Actor: actor, Action: "superseded", Detail: "by application " + app.ID})
			return nil
		}); err != nil {
			return ledger.Application{}, err
		}
	}
	a := ledger.Application{
		ID: app.ID, Provider: app.Provider, Status: protocol.StatusPending,
		ProposedTier: proposed, TierReasons: why, CaseByCase: app.CaseByCase(c.models()),
		SubmittedAt: now, UpdatedAt: now, ReviewSince: now, Seq: app.Seq, Raw: raw,
		Events: []ledger.Event{{At: now, Actor: actor, Action: "submitted", Detail: "proposed tier " + proposed}},
	}
	if err := c.sign(&a, nil, now); err != nil {
		return ledger.Application{}, err
	}
	if err := c.put(a, network); err != nil {
		return ledger.Application{}, err
	}
	c.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindApplication), "stream").Inc()
	c.log.Info("application received", "id", a.ID, "provider", a.Provider, "network", network, "proposed_tier", proposed, "case_by_case", a.CaseByCase)
	return a, nil
}

// sign writes the signed notification of an application's current status into a.
func (c *Coordinator) sign(a *ledger.Application, cert []byte, now time.Time) error {
	seq, err := c.serials.NextSerial("notification", now)
	if err != nil {
		return err
	}
	raw, err := protocol.Seal(protocol.KindNotification, protocol.Notification{
		Version: protocol.NotificationVersion, Coordinator: c.id.String(), Provider: a.Provider, Seq: seq,
		IssuedAt: now.UTC(), Application: a.ID, Status: a.Status, Tier: a.Tier, Message: a.Message, Certificate: cert,
		DecisionDue: c.decisionDue(*a).UTC(),
	}, c.peer.Key)
	if err != nil {
		return err
	}
	a.Notification = raw
	return nil
}

// Decide applies a reviewer's decision, signs what it implies (certificate, notification)
// and tells the applicant.
func (c *Coordinator) Decide(id string, d api.Decision) (ledger.Application, error) {
	now := c.clock.Now()
	if strings.TrimSpace(d.Actor) == "" {
		return ledger.Application{}, api.Invalid(errors.New("actor: say who decides (it goes into the audit trail)"))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.update(id, func(a *ledger.Application) error {
		if !isOpen(a.Status) {
			return api.Invalid(fmt.Errorf("application %s is %s: only pending or info-requested applications can be decided", id, a.Status))
		}
		app, err := protocol.OpenApplication(a.Raw)
		if err != nil {
			return fmt.Errorf("stored application %s: %w", id, err)
		}
		var cert []byte
		ev := ledger.Event{At: now, Actor: "operator " + d.Actor, Action: d.Action, Detail: d.Message}
		switch d.Action {
		case "approve":
			tier := d.Tier
			if tier == "" {
				tier = a.ProposedTier
				if tier == protocol.TierEnterprise && c.enterpriseRuledOut(c.measuredLink(a.Provider)) != "" {
					tier = protocol.TierCommunity // the proposal on the measurement
				}
			}
			if err := protocol.CheckTierChoice(app, tier); err != nil {
				return api.Invalid(err)
			}
			if why := c.enterpriseRuledOut(c.measuredLink(a.Provider)); why != "" && tier == protocol.TierEnterprise {
				return api.Invalid(fmt.Errorf("tier enterprise: %s; approve as community, or ask the provider to run its benchmarks again (gpunex bench run) once its link is fixed", why))
			}
			if cert, err = c.issue(app, tier, now); err != nil {
				return err
			}
			a.Status, a.Tier, a.Certificate = protocol.StatusApproved, tier, cert
			ev.Action = "approved"
			ev.Detail = strings.TrimSpace(fmt.Sprintf("tier %s (proposed %s) %s", tier, a.ProposedTier, d.Message))
		case "reject":
			if strings.TrimSpace(d.Message) == "" {
				return api.Invalid(errors.New("reason: a rejection says why"))
			}
			a.Status, ev.Action = protocol.StatusRejected, "rejected"
		case "request-info":
			if strings.TrimSpace(d.Message) == "" {
				return api.Invalid(errors.New("message: ask a question"))
			}
			a.Status, ev.Action = protocol.StatusInfoRequested, "info-requested"
		default:
			return api.Invalid(fmt.Errorf("action %q: approve, reject or request-info", d.Action))
		}
		a.Message, a.UpdatedAt = d.Message, now
		a.Events = append(a.Events, ev)
		return c.sign(a, cert, now)
	})
	if errors.Is(err, ledger.ErrNotFound) {
		return a, fmt.Errorf("%w: no application %s", api.ErrNotFound, id)
	}
	if err != nil {
		return a, err
	}
	c.log.Info("application decided", "id", id, "action", d.Action, "status", a.Status, "tier", a.Tier, "by", d.Actor)
	c.tell(a, true)
	return a, nil
}

// issue signs a certificate for an approved application.
func (c *Coordinator) issue(app *protocol.Application, tier string, now time.Time) ([]byte, error) {
	serial, err := c.serials.NextSerial("certificate", now)
	if err != nil {
		return nil, err
	}
	var gpus []protocol.CertifiedGPU
	for _, g := range app.GPUs {
		merged := false
		for i := range gpus {
			if gpus[i].Model == g.Model {
				gpus[i].Count += g.Count
				merged = true
			}
		}
		if !merged {
			gpus = append(gpus, protocol.CertifiedGPU{Model: g.Model, Count: g.Count})
		}
	}
	for _, g := range gpus {
		if g.Count > protocol.MaxGPUsPerItem {
			return nil, api.Invalid(fmt.Errorf("%d x %s: a certificate approves at most %d of a model", g.Count, g.Model, protocol.MaxGPUsPerItem))
		}
	}
	// Full precision: a revocation and a new approval within one second stay ordered.
	issued := now.UTC()
	return protocol.Seal(protocol.KindCertificate, protocol.Certificate{
		Version: protocol.CertificateVersion, Coordinator: c.id.String(), Provider: app.Provider, Serial: serial,
		Application: app.ID, Tier: tier, GPUs: gpus,
		CommitmentEnd: issued.AddDate(0, app.CommitmentMonths, 0),
		IssuedAt:      issued, ExpiresAt: issued.Add(c.cfg.CertificateValidity.Duration),
	}, c.peer.Key)
}

// Revoke revokes every certificate this coordinator issued to a provider: the revocation is
// stored, gossiped, and the provider is told.
func (c *Coordinator) Revoke(ctx context.Context, provider peer.ID, reason, actor string) ([]byte, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, api.Invalid(errors.New("reason: a revocation says why"))
	}
	if strings.TrimSpace(actor) == "" {
		return nil, api.Invalid(errors.New("actor: say who revokes (it goes into the audit trail)"))
	}
	raw, revoked, err := c.revoke(provider, reason, actor)
	if raw == nil {
		return nil, err
	}
	// Stored: gossip it and tell the provider even if marking an application failed.
	if err := c.revTopic.Publish(ctx, raw); err != nil {
		c.log.Warn("gossiping the revocation failed; peers get it by revocation sync", "err", err)
	}
	for _, a := range revoked {
		c.tell(a, true)
	}
	if err != nil {
		return raw, err
	}
	c.log.Info("provider revoked", "provider", provider, "reason", reason, "by", actor)
	return raw, nil
}

// revoke signs and stores a revocation and marks the provider's approved applications
// revoked, under c.mu: a renewal (renewDue, under c.mu too) cannot sign a certificate dated
// after the revocation before the revocation is stored.
func (c *Coordinator) revoke(provider peer.ID, reason, actor string) ([]byte, []ledger.Application, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	raw, err := protocol.Seal(protocol.KindRevocation, protocol.Revocation{
		Version: protocol.RevocationVersion, Coordinator: c.id.String(), Provider: provider.String(),
		IssuedAt: now.UTC(), Reason: reason,
	}, c.peer.Key)
	if err != nil {
		return nil, nil, err
	}
	if err := c.revocations.TakeRevocation(raw, "self"); err != nil {
		return nil, nil, err
	}
	var revoked []ledger.Application
	for _, id := range c.queue.provider(provider.String()).approvedIDs {
		a, err := c.update(id, func(a *ledger.Application) error {
			if a.Status != protocol.StatusApproved {
				return errStale
			}
			a.Status, a.Message, a.UpdatedAt = protocol.StatusRevoked, reason, now
			a.Events = append(a.Events, ledger.Event{At: now, Actor: "operator " + actor, Action: "revoked", Detail: reason})
			return c.sign(a, nil, now)
		})
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			return raw, revoked, err
		}
		revoked = append(revoked, a)
	}
	return raw, revoked, nil
}

// tell pushes an application's latest notification to the provider's node and sends the
// webhook notice and, when mail is set (a reviewer's or the coordinator's doing, not the
// applicant's), the e-mail, in the background. A provider that is offline gets the
// notification when it next asks for its status. The address is the applicant's choice:
// it gets at most MailsPerHour e-mails an hour, and the name they greet is one bounded line.
func (c *Coordinator) tell(a ledger.Application, mail bool) {
	p, err := peer.Decode(a.Provider)
	if err != nil || len(a.Notification) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
		defer cancel()
		if err := c.pushNotification(ctx, p, a.Notification); err != nil {
			c.log.Debug("notification push failed; the provider gets it on its next status request", "provider", p, "err", err)
		}
	}()
	app, err := protocol.OpenApplication(a.Raw)
	if err != nil {
		return
	}
	subject := fmt.Sprintf("gpunex: application %s %s", a.ID, a.Status)
	if a.Tier != "" {
		subject += " (" + a.Tier + ")"
	}
	body := fmt.Sprintf("Hello %s,\n\nYour gpunex provider application %s (node %s) is now: %s.\n", mailName(app.Name), a.ID, a.Provider, a.Status)
	if a.Tier != "" {
		body += "Tier: " + a.Tier + "\n"
	}
	if a.Message != "" {
		body += "\n" + a.Message + "\n"
	}
	body += "\nSee `gpunex apply status` on your node for details.\n"
	event := map[string]any{"application": a.ID, "provider": a.Provider, "status": a.Status, "tier": a.Tier, "message": a.Message, "at": a.UpdatedAt}
	to := ""
	if mail {
		if c.mails.Take(strings.ToLower(app.Email), c.clock.Now(), 1) {
			to = app.Email
		} else {
			c.log.Info("notice not e-mailed: the address had its e-mails of the hour", "application", a.ID, "per_hour", MailsPerHour)
		}
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := c.out.Send(ctx, notify.Notice{To: to, Subject: subject, Body: body, Event: event})
		if err != nil {
			c.log.Warn("decision notice not delivered", "application", a.ID, "err", err)
		}
	}()
}

// Applications lists the queue, optionally only one status, oldest first or (byDue) by
// due date.
func (c *Coordinator) Applications(status string, byDue bool) ([]api.ApplicationView, error) {
	apps, err := c.applications.Applications()
	if err != nil {
		return nil, err
	}
	out := []api.ApplicationView{}
	for _, a := range apps {
		if status == "" || a.Status == status {
			out = append(out, c.View(a, false))
		}
	}
	if byDue {
		SortByDue(out)
	}
	return out, nil
}

// ViewApplication is an application as the coordinator's API shows it (full adds the
// record and the trail).
func ViewApplication(a ledger.Application, full bool) api.ApplicationView {
	v := api.ApplicationView{
		ID: a.ID, Provider: a.Provider, Status: a.Status, Tier: a.Tier, ProposedTier: a.ProposedTier,
		TierReasons: a.TierReasons, CaseByCase: a.CaseByCase, SubmittedAt: a.SubmittedAt, UpdatedAt: a.UpdatedAt, Message: a.Message,
	}
	if full {
		if app, err := protocol.OpenApplication(a.Raw); err == nil {
			v.Application = app
		}
		v.Certificate = a.Certificate
		for _, e := range a.Events {
			v.Events = append(v.Events, api.Event(e))
		}
	}
	return v
}

// pushNotification delivers a notification to a provider's node.
func (c *Coordinator) pushNotification(ctx context.Context, p peer.ID, raw []byte) error {
	s, err := c.peer.OpenStream(ctx, p, protocol.NotifyProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	if err := protocol.WriteFrame(s, raw); err != nil {
		s.Reset()
		return err
	}
	var resp protocol.ApplyResponse
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxNotifyAnswer, &resp); err != nil {
		return err
	}
	if !resp.OK {
		return fmt.Errorf("provider refused the notification: %s", resp.Error)
	}
	return nil
}
