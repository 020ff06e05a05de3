package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Onboarding routes of the local API (docs/api.md).

// OwnApplicationView is the answer of GET /v1/apply.
type OwnApplicationView struct {
	ID          string                `json:"id"`
	Status      string                `json:"status"` // queued, pending, info-requested, approved, rejected, revoked, refused
	Tier        string                `json:"tier,omitempty"`
	Message     string                `json:"message,omitempty"`
	Delivered   bool                  `json:"delivered"`
	Attempts    int                   `json:"attempts"`
	LastError   string                `json:"last_error,omitempty"`
	Coordinator string                `json:"coordinator"`
	SubmittedAt time.Time             `json:"submitted_at"`
	UpdatedAt   time.Time             `json:"updated_at"`
	Application *protocol.Application `json:"application,omitempty"`
	Certificate *protocol.Certificate `json:"certificate,omitempty"`
}

// AnswerRequest is the body of POST /v1/apply/answer.
type AnswerRequest struct {
	Message string `json:"message"`
}

// RevokeRequest is the body of POST /v1/coordinator/revoke.
type RevokeRequest struct {
	Provider string `json:"provider"`
	Reason   string `json:"reason"`
	Actor    string `json:"actor"`
}

// RevokeResult is its answer.
type RevokeResult struct {
	Provider   string `json:"provider"`
	Revocation []byte `json:"revocation"` // the signed record
}

// NotificationView is one entry of GET /v1/notifications.
type NotificationView struct {
	ReceivedAt time.Time `json:"received_at"`
	From       string    `json:"from"`
	Subject    string    `json:"subject"`
	Body       string    `json:"body,omitempty"`
}

func (a *APIServer) routeOnboarding(mux *http.ServeMux) {
	a.route(mux, "POST /v1/apply", a.apply)
	a.route(mux, "GET /v1/apply", a.applyStatus)
	a.route(mux, "POST /v1/apply/answer", a.applyAnswer)
	a.route(mux, "GET /v1/notifications", a.notifications)
	a.route(mux, "GET /v1/coordinator/applications", a.applications)
	a.route(mux, "GET /v1/coordinator/applications/{id}", a.application)
	a.route(mux, "POST /v1/coordinator/applications/{id}/decision", a.decide)
	a.route(mux, "POST /v1/coordinator/revoke", a.revoke)
	a.route(mux, "POST /v1/coordinator/challenge", func(r *http.Request) (any, error) {
		var req struct {
			Provider string `json:"provider"`
		}
		if err := decodeBody(r, 4096, &req); err != nil {
			return nil, err
		}
		p, err := peer.Decode(req.Provider)
		if err != nil {
			return nil, badRequest(fmt.Errorf("provider %q: not a peer ID", req.Provider))
		}
		a, err := a.n.ChallengeProvider(r.Context(), p)
		if err != nil {
			return nil, err
		}
		return attestationView(a), nil
	})
}

func decodeBody(r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest(fmt.Errorf("request body: %w", err))
	}
	return nil
}

func (a *APIServer) needApplicant() error {
	if a.n.applicant == nil {
		return fmt.Errorf("%w: this node is a %s; only providers apply", ErrWrongRole, a.n.cfg.Role)
	}
	return nil
}

func (a *APIServer) needCoordinator() error {
	if a.n.coord == nil {
		return fmt.Errorf("%w: this node is a %s, not a coordinator", ErrWrongRole, a.n.cfg.Role)
	}
	return nil
}

func (a *APIServer) apply(r *http.Request) (any, error) {
	if err := a.needApplicant(); err != nil {
		return nil, err
	}
	var form protocol.Application
	if err := decodeBody(r, protocol.MaxApplicationSize, &form); err != nil {
		return nil, err
	}
	own, err := a.n.applicant.Submit(form)
	if err != nil {
		return nil, err
	}
	return a.n.ownApplicationView(own), nil
}

func (a *APIServer) applyStatus(r *http.Request) (any, error) {
	if err := a.needApplicant(); err != nil {
		return nil, err
	}
	own, err := a.n.ledger.GetOwnApplication()
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("%w: no application yet: apply with `gpunex apply`", ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return a.n.ownApplicationView(own), nil
}

func (n *Node) ownApplicationView(own ledger.OwnApplication) OwnApplicationView {
	v := OwnApplicationView{
		ID: own.ID, Status: own.Status, Tier: own.Tier, Message: own.Message, Delivered: own.Delivered,
		Attempts: own.Attempts, LastError: own.LastError, Coordinator: own.Coordinator,
		SubmittedAt: own.SubmittedAt, UpdatedAt: own.UpdatedAt,
	}
	if app, err := protocol.OpenApplication(own.Raw); err == nil {
		v.Application = app
	}
	if raw, err := n.ledger.OwnCertificate(); err == nil {
		if c, err := protocol.CheckCertificate(raw, n.clock.Now(), n.trust.trust); err == nil && n.trust.revocationOf(c) == nil {
			v.Certificate = &c.Certificate
		}
	}
	return v
}

func (a *APIServer) applyAnswer(r *http.Request) (any, error) {
	if err := a.needApplicant(); err != nil {
		return nil, err
	}
	var req AnswerRequest
	if err := decodeBody(r, 8192, &req); err != nil {
		return nil, err
	}
	own, err := a.n.applicant.Answer(req.Message)
	if err != nil {
		return nil, err
	}
	return a.n.ownApplicationView(own), nil
}

func (a *APIServer) notifications(r *http.Request) (any, error) {
	ns, err := a.n.Notifications()
	if err != nil {
		return nil, err
	}
	out := []NotificationView{}
	for _, x := range ns {
		out = append(out, NotificationView{ReceivedAt: x.ReceivedAt, From: x.From, Subject: x.Subject, Body: x.Body})
	}
	return out, nil
}

func (a *APIServer) applications(r *http.Request) (any, error) {
	if err := a.needCoordinator(); err != nil {
		return nil, err
	}
	status := r.URL.Query().Get("status")
	switch status {
	case "", protocol.StatusPending, protocol.StatusInfoRequested, protocol.StatusApproved, protocol.StatusRejected, protocol.StatusRevoked:
	default:
		return nil, badRequest(fmt.Errorf("status %q: pending, info-requested, approved, rejected or revoked", status))
	}
	return a.n.coord.Applications(status)
}

func (a *APIServer) application(r *http.Request) (any, error) {
	if err := a.needCoordinator(); err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	if !protocol.ValidApplicationID(id) {
		return nil, badRequest(fmt.Errorf("application ID %q: 12 lower-case hex digits", id))
	}
	app, err := a.n.ledger.GetApplication(id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("%w: no application %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	return viewApplication(app, true), nil
}

func (a *APIServer) decide(r *http.Request) (any, error) {
	if err := a.needCoordinator(); err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	if !protocol.ValidApplicationID(id) {
		return nil, badRequest(fmt.Errorf("application ID %q: 12 lower-case hex digits", id))
	}
	var d Decision
	if err := decodeBody(r, 8192, &d); err != nil {
		return nil, err
	}
	app, err := a.n.coord.Decide(id, d)
	if err != nil {
		return nil, err
	}
	return viewApplication(app, true), nil
}

func (a *APIServer) revoke(r *http.Request) (any, error) {
	if err := a.needCoordinator(); err != nil {
		return nil, err
	}
	var req RevokeRequest
	if err := decodeBody(r, 8192, &req); err != nil {
		return nil, err
	}
	p, err := peer.Decode(req.Provider)
	if err != nil {
		return nil, badRequest(fmt.Errorf("provider %q: not a peer ID", req.Provider))
	}
	raw, err := a.n.coord.Revoke(r.Context(), p, req.Reason, req.Actor)
	if err != nil {
		return nil, err
	}
	return RevokeResult{Provider: p.String(), Revocation: raw}, nil
}
