package node

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gpunex/gpunex/node/internal/benchmarks"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Onboarding routes of the local API (docs/api.md).

func (a *APIServer) onboardingRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "POST /v1/apply", answer: a.apply},
		{pattern: "GET /v1/apply", answer: a.applyStatus},
		{pattern: "POST /v1/apply/answer", answer: a.applyAnswer},
		{pattern: "GET /v1/notifications", answer: a.notifications},
		{pattern: "GET /v1/coordinator/applications", answer: a.applications},
		{pattern: "GET /v1/coordinator/applications/{id}", answer: a.application},
		{pattern: "POST /v1/coordinator/applications/{id}/decision", answer: a.decide},
		{pattern: "POST /v1/coordinator/revoke", answer: a.revoke},
		{pattern: "POST /v1/coordinator/challenge", answer: a.challengeProvider},
	}
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
	return a.n.applicant.View(own), nil
}

func (a *APIServer) applyStatus(r *http.Request) (any, error) {
	if err := a.needApplicant(); err != nil {
		return nil, err
	}
	own, err := a.n.ledger.Applicant.GetOwnApplication()
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("%w: no application yet: apply with `gpunex apply`", api.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return a.n.applicant.View(own), nil
}

func (a *APIServer) applyAnswer(r *http.Request) (any, error) {
	if err := a.needApplicant(); err != nil {
		return nil, err
	}
	var req api.AnswerRequest
	if err := decodeBody(r, 8192, &req); err != nil {
		return nil, err
	}
	own, err := a.n.applicant.Answer(req.Message)
	if err != nil {
		return nil, err
	}
	return a.n.applicant.View(own), nil
}

func (a *APIServer) notifications(r *http.Request) (any, error) {
	ns, err := a.n.ledger.Notifications.Notifications()
	if err != nil {
		return nil, err
	}
	out := []api.NotificationView{}
	for _, x := range ns {
		out = append(out, api.NotificationView{ReceivedAt: x.ReceivedAt, From: x.From, Subject: x.Subject, Body: x.Body})
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
		return nil, api.Invalid(fmt.Errorf("status %q: pending, info-requested, approved, rejected or revoked", status))
	}
	switch sort := r.URL.Query().Get("sort"); sort {
	case "", "submitted":
		return a.n.coord.Applications(status, false)
	case "due":
		return a.n.coord.Applications(status, true)
	default:
		return nil, api.Invalid(fmt.Errorf("sort %q: submitted or due", sort))
	}
}

func (a *APIServer) application(r *http.Request) (any, error) {
	if err := a.needCoordinator(); err != nil {
		return nil, err
	}
	id, err := applicationID(r)
	if err != nil {
		return nil, err
	}
	app, err := a.n.ledger.Applications.GetApplication(id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("%w: no application %s", api.ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	return a.n.coord.View(app, true), nil
}

func (a *APIServer) decide(r *http.Request) (any, error) {
	if err := a.needCoordinator(); err != nil {
		return nil, err
	}
	id, err := applicationID(r)
	if err != nil {
		return nil, err
	}
	var d api.Decision
	if err := decodeBody(r, 8192, &d); err != nil {
		return nil, err
	}
	app, err := a.n.coord.Decide(id, d)
	if err != nil {
		return nil, err
	}
	return a.n.coord.View(app, true), nil
}

func (a *APIServer) revoke(r *http.Request) (any, error) {
	if err := a.needCoordinator(); err != nil {
		return nil, err
	}
	var req api.RevokeRequest
	if err := decodeBody(r, 8192, &req); err != nil {
		return nil, err
	}
	p, err := peer.Decode(req.Provider)
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("provider %q: not a peer ID", req.Provider))
	}
	raw, err := a.n.coord.Revoke(r.Context(), p, req.Reason, req.Actor)
	if err != nil {
		return nil, err
	}
	return api.RevokeResult{Provider: p.String(), Revocation: raw}, nil
}

// challengeProvider answers POST /v1/coordinator/challenge: the coordinator benchmarks a
// provider now.
func (a *APIServer) challengeProvider(r *http.Request) (any, error) {
	var req struct {
		Provider string `json:"provider"`
	}
	if err := decodeBody(r, 4096, &req); err != nil {
		return nil, err
	}
	p, err := peer.Decode(req.Provider)
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("provider %q: not a peer ID", req.Provider))
	}
	if a.n.benchCoord == nil {
		return nil, fmt.Errorf("%w: only a coordinator challenges providers", api.ErrWrongRole)
	}
	att, err := a.n.benchCoord.ChallengeProvider(r.Context(), p)
	if err != nil {
		return nil, err
	}
	return benchmarks.View(att), nil
}
