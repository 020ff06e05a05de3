package protocol

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Certificate, revocation and notification records: what a coordinator signs about a
// provider. See docs/protocols/onboarding.md.

const (
	// CertificateVersion is the certificate payload version this code writes and accepts.
	CertificateVersion = 1
	// MaxCertificateSize caps a marshalled certificate envelope; a certificate travels
	// inside every offer, so it stays small.
	MaxCertificateSize = 2 << 10
	// MaxCertificateValidity is the longest validity a certificate may claim.
	MaxCertificateValidity = 366 * 24 * time.Hour
	// RevocationVersion is the revocation payload version.
	RevocationVersion = 1
	// MaxRevocationSize caps a marshalled revocation envelope.
	MaxRevocationSize = 2 << 10
	// NotificationVersion is the notification payload version.
	NotificationVersion = 1
	// MaxNotificationSize caps a marshalled notification envelope (it may carry a
	// certificate).
	MaxNotificationSize = 8 << 10
)

// Errors of the trust checks, on top of the stateless ones of record.go.
var (
	ErrUntrusted = errors.New("signed by a coordinator this node does not trust")
	// ErrSelfSigned: a certificate its own provider signed, by a key nobody here trusts:
	// only that provider can make it.
	ErrSelfSigned   = errors.New("certificate signed by its own provider")
	ErrNotCertified = errors.New("offer without a valid certificate")
	ErrRevoked      = errors.New("certificate revoked")
	ErrNotApproved  = errors.New("offer exceeds what the certificate approves")
)

// Certificate is the payload of a certificate record: a coordinator approves a provider
// for a tier and a set of GPUs until an expiry.
type Certificate struct {
	Version       int            `json:"version"`
	Coordinator   string         `json:"coordinator"` // peer ID of the signer
	Provider      string         `json:"provider"`
	Serial        uint64         `json:"serial"` // increasing per coordinator
	Application   string         `json:"application"`
	Tier          string         `json:"tier"`
	GPUs          []CertifiedGPU `json:"gpus"`
	CommitmentEnd time.Time      `json:"commitment_end"`
	IssuedAt      time.Time      `json:"issued_at"`
	ExpiresAt     time.Time      `json:"expires_at"`
}

// CertifiedGPU is one approved GPU model and the most the provider may offer of it.
type CertifiedGPU struct {
	Model string `json:"model"`
	Count int    `json:"count"`
}

// SignedCertificate is a certificate that passed the stateless checks.
type SignedCertificate struct {
	Certificate
	Signer peer.ID
	Raw    []byte
}

// Trust is the set of coordinator keys a node accepts certificates, revocations and
// notifications from.
type Trust map[peer.ID]bool

// NewTrust builds a Trust from peer IDs.
func NewTrust(ids ...peer.ID) Trust {
	t := Trust{}
	for _, id := range ids {
		t[id] = true
	}
	return t
}

// check refuses a signer outside the set. A nil Trust checks nothing: only `gpunex
// verify` uses it, and it prints the signer for the reader to judge.
func (t Trust) check(kind Kind, signer peer.ID) error {
	if t != nil && !t[signer] {
		return fmt.Errorf("%w: %s from %s", ErrUntrusted, kind, signer)
	}
	return nil
}

// CheckCertificate opens a certificate and applies every stateless rule at time now,
// including that its signer is trusted.
func CheckCertificate(raw []byte, now time.Time, trust Trust) (*SignedCertificate, error) {
	c, err := OpenCertificate(raw, trust)
	if err != nil {
		return nil, err
	}
	if err := checkIssued(KindCertificate, c.IssuedAt, c.ExpiresAt, now); err != nil {
		return nil, err
	}
	return c, nil
}

// OpenCertificate applies every stateless rule but time: a certificate that expired (or is
// not issued yet) opens. A coordinator uses it to renew the certificates it issued.
func OpenCertificate(raw []byte, trust Trust) (*SignedCertificate, error) {
	env, err := Open(raw)
	if err != nil {
		return nil, err
	}
	if env.Kind != KindCertificate {
		return nil, fmt.Errorf("%w: expected a certificate, got %s", ErrUnknownKind, env.Kind)
	}
	var c Certificate
	if err := decodePayload(env, CertificateVersion, &c, func() int { return c.Version }); err != nil {
		return nil, err
	}
	if c.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: certificate names coordinator %s but is signed by %s", ErrWrongSigner, c.Coordinator, env.Signer)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := trust.check(KindCertificate, env.Signer); err != nil {
		if c.Provider == c.Coordinator {
			return nil, fmt.Errorf("%w: %s", ErrSelfSigned, c.Provider)
		}
		return nil, err
	}
	return &SignedCertificate{Certificate: c, Signer: env.Signer, Raw: raw}, nil
}

func (c *Certificate) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: certificate: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if _, err := peer.Decode(c.Provider); err != nil {
		return bad("provider %q is not a peer ID", c.Provider)
	}
	if c.Serial == 0 {
		return bad("serial must be positive")
	}
	if !ValidApplicationID(c.Application) {
		return bad("application %q is not an application ID", c.Application)
	}
	if c.Tier != TierEnterprise && c.Tier != TierCommunity {
		return bad("tier %q", c.Tier)
	}
	if len(c.GPUs) == 0 || len(c.GPUs) > MaxOfferItems {
		return bad("%d GPU models, 1-%d allowed", len(c.GPUs), MaxOfferItems)
	}
	seen := map[string]bool{}
	for _, g := range c.GPUs {
		if err := checkText("model", g.Model, true); err != nil || g.Model != NormalizeModel(g.Model) || seen[g.Model] {
			return bad("model %q", g.Model)
		}
		seen[g.Model] = true
		if g.Count < 1 || g.Count > MaxGPUsPerItem {
			return bad("model %s: count %d out of range", g.Model, g.Count)
		}
	}
	if c.IssuedAt.IsZero() || !c.ExpiresAt.After(c.IssuedAt) || c.ExpiresAt.Sub(c.IssuedAt) > MaxCertificateValidity {
		return bad("validity from %s to %s", c.IssuedAt.Format(time.RFC3339), c.ExpiresAt.Format(time.RFC3339))
	}
	return nil
}

// Covers checks that an offer stays within the certificate: same provider, and only
// approved models, each at most at the approved count.
func (c *Certificate) Covers(o *Offer) error {
	if o.Provider != c.Provider {
		return fmt.Errorf("%w: certificate of %s attached to an offer of %s", ErrWrongSigner, c.Provider, o.Provider)
	}
	for _, g := range o.GPUs {
		ok := false
		for _, a := range c.GPUs {
			if a.Model == g.Model {
				if g.Count > a.Count {
					return fmt.Errorf("%w: %d x %s offered, %d approved", ErrNotApproved, g.Count, g.Model, a.Count)
				}
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("%w: model %s is not approved", ErrNotApproved, g.Model)
		}
	}
	return nil
}

// Revocation is the payload of a revocation record: every certificate its coordinator
// issued to the provider at or before IssuedAt stops being valid.
type Revocation struct {
	Version     int       `json:"version"`
	Coordinator string    `json:"coordinator"`
	Provider    string    `json:"provider"`
	IssuedAt    time.Time `json:"issued_at"`
	Reason      string    `json:"reason"`
}

// SignedRevocation is a revocation that passed the checks.
type SignedRevocation struct {
	Revocation
	Signer   peer.ID
	Provider peer.ID
	Raw      []byte
}

// Revokes reports whether the revocation covers a certificate.
func (r *SignedRevocation) Revokes(c *SignedCertificate) bool {
	return c.Signer == r.Signer && c.Provider == r.Revocation.Provider && !c.IssuedAt.After(r.IssuedAt)
}

// CheckRevocation opens a revocation and applies every rule at time now, including that
// its signer is trusted. Revocations do not expire.
func CheckRevocation(raw []byte, now time.Time, trust Trust) (*SignedRevocation, error) {
	env, err := Open(raw)
	if err != nil {
		return nil, err
	}
	if env.Kind != KindRevocation {
		return nil, fmt.Errorf("%w: expected a revocation, got %s", ErrUnknownKind, env.Kind)
	}
	var r Revocation
	if err := decodePayload(env, RevocationVersion, &r, func() int { return r.Version }); err != nil {
		return nil, err
	}
	if r.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: revocation names coordinator %s but is signed by %s", ErrWrongSigner, r.Coordinator, env.Signer)
	}
	p, err := peer.Decode(r.Provider)
	if err != nil {
		return nil, fmt.Errorf("%w: revocation: provider %q is not a peer ID", ErrInvalid, r.Provider)
	}
	if r.IssuedAt.IsZero() {
		return nil, fmt.Errorf("%w: revocation: issued_at is required", ErrInvalid)
	}
	if err := checkFreeText("reason", r.Reason, 500, true); err != nil {
		return nil, fmt.Errorf("%w: revocation: %v", ErrInvalid, err)
	}
	if err := trust.check(KindRevocation, env.Signer); err != nil {
		return nil, err
	}
	if err := checkIssued(KindRevocation, r.IssuedAt, time.Time{}, now); err != nil {
		return nil, err
	}
	return &SignedRevocation{Revocation: r, Signer: env.Signer, Provider: p, Raw: raw}, nil
}

// The statuses of an application.
const (
	StatusPending       = "pending"
	StatusInfoRequested = "info-requested"
	StatusApproved      = "approved"
	StatusRejected      = "rejected"
	StatusRevoked       = "revoked"
)

// Notification is the payload of a notification record: a coordinator tells a provider
// about its application or certificate.
type Notification struct {
	Version     int       `json:"version"`
	Coordinator string    `json:"coordinator"`
	Provider    string    `json:"provider"`
	Seq         uint64    `json:"seq"` // increasing per coordinator
	IssuedAt    time.Time `json:"issued_at"`
	Application string    `json:"application,omitempty"`
	Status      string    `json:"status"` // pending, info-requested, approved, rejected, revoked
	Tier        string    `json:"tier,omitempty"`
	// Message is the reviewer's note, reason or question.
	Message string `json:"message,omitempty"`
	// Certificate is the certificate issued on approval.
	Certificate []byte `json:"certificate,omitempty"`
	// DecisionDue is when the coordinator expects to decide, while the application awaits
	// its review (its business days, docs/onboarding.md, "Review deadlines").
	DecisionDue time.Time `json:"decision_due,omitzero"`
}

// SignedNotification is a notification that passed the checks.
type SignedNotification struct {
	Notification
	Signer peer.ID
	Raw    []byte
}

// CheckNotification opens a notification addressed to provider ("" accepts any addressee)
// and applies every rule at time now, including that its signer is trusted and that an
// attached certificate is valid and names the same provider.
func CheckNotification(raw []byte, now time.Time, trust Trust, provider peer.ID) (*SignedNotification, error) {
	env, err := Open(raw)
	if err != nil {
		return nil, err
	}
	if env.Kind != KindNotification {
		return nil, fmt.Errorf("%w: expected a notification, got %s", ErrUnknownKind, env.Kind)
	}
	var n Notification
	if err := decodePayload(env, NotificationVersion, &n, func() int { return n.Version }); err != nil {
		return nil, err
	}
	if n.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: notification names coordinator %s but is signed by %s", ErrWrongSigner, n.Coordinator, env.Signer)
	}
	if _, err := peer.Decode(n.Provider); err != nil {
		return nil, fmt.Errorf("%w: notification: provider %q is not a peer ID", ErrInvalid, n.Provider)
	}
	if provider != "" && n.Provider != provider.String() {
		return nil, fmt.Errorf("%w: notification addressed to %s, not to this node", ErrInvalid, n.Provider)
	}
	if n.Seq == 0 || n.IssuedAt.IsZero() {
		return nil, fmt.Errorf("%w: notification: seq and issued_at are required", ErrInvalid)
	}
	switch n.Status {
	case StatusPending, StatusInfoRequested, StatusApproved, StatusRejected, StatusRevoked:
	default:
		return nil, fmt.Errorf("%w: notification status %q", ErrInvalid, n.Status)
	}
	if n.Application != "" && !ValidApplicationID(n.Application) {
		return nil, fmt.Errorf("%w: notification: application %q", ErrInvalid, n.Application)
	}
	if err := checkFreeText("message", n.Message, maxNoteLen, false); err != nil {
		return nil, fmt.Errorf("%w: notification: %v", ErrInvalid, err)
	}
	if err := trust.check(KindNotification, env.Signer); err != nil {
		return nil, err
	}
	if err := checkIssued(KindNotification, n.IssuedAt, time.Time{}, now); err != nil {
		return nil, err
	}
	if len(n.Certificate) > 0 {
		c, err := CheckCertificate(n.Certificate, now, trust)
		if err != nil {
			return nil, fmt.Errorf("notification's certificate: %w", err)
		}
		if c.Provider != n.Provider || c.Signer != env.Signer {
			return nil, fmt.Errorf("%w: notification carries a certificate for %s from %s", ErrWrongSigner, c.Provider, c.Signer)
		}
	}
	return &SignedNotification{Notification: n, Signer: env.Signer, Raw: raw}, nil
}

// OfferCertificate checks the certificate an offer carries at time now: present, valid,
// from a trusted coordinator, for this provider, and covering every GPU offered. Revocations
// are the caller's to check (they are state).
func OfferCertificate(o *Offer, now time.Time, trust Trust) (*SignedCertificate, error) {
	return CertifyOffer(o, func(raw []byte) (*SignedCertificate, error) { return CheckCertificate(raw, now, trust) })
}

// CertifyOffer is OfferCertificate with the certificate checked by check (a node caches
// the signature checks of certificates it has seen).
func CertifyOffer(o *Offer, check func(raw []byte) (*SignedCertificate, error)) (*SignedCertificate, error) {
	if len(o.Certificate) == 0 {
		return nil, fmt.Errorf("%w: provider %s attached none", ErrNotCertified, o.Provider)
	}
	c, err := check(o.Certificate)
	if err != nil {
		return nil, fmt.Errorf("offer's certificate: %w", err)
	}
	if err := c.Covers(o); err != nil {
		return nil, err
	}
	return c, nil
}

// Onboarding protocols and topics.
const (
	// ApplyProtocol carries applications and status requests from a provider to a
	// coordinator.
	ApplyProtocol = "/gpunex/apply/1.0.0"
	// NotifyProtocol carries a coordinator's signed notification to a provider.
	NotifyProtocol = "/gpunex/notify/1.0.0"
	// RevocationsTopic is the gossipsub topic of revocations.
	RevocationsTopic = "/gpunex/revocations/1"
	// RevocationSyncProtocol hands a joining node every revocation a peer holds.
	RevocationSyncProtocol = "/gpunex/revocation-sync/1.0.0"
	// MaxSyncRevocations caps one revocation sync answer.
	MaxSyncRevocations = 100_000
)

// ApplyRequest is what a provider sends on the apply stream.
type ApplyRequest struct {
	Op     string `json:"op"`               // "submit" or "status"
	Record []byte `json:"record,omitempty"` // the signed application, for "submit"
}

// ApplyResponse is the coordinator's answer on the apply stream, and a provider's answer
// to a notification pushed on the notify stream.
type ApplyResponse struct {
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"` // rejection label (invalid, replay, ...)
	// Notification is the latest signed notification about the provider's application.
	Notification []byte `json:"notification,omitempty"`
	// Renewal is the latest notification of the provider's latest approved application,
	// when that is not its latest application: it carries the certificate in force (a
	// renewed one, say) while a newer application is reviewed or was refused.
	Renewal []byte `json:"renewal,omitempty"`
}

const (
	// MaxApplyFrame caps an apply-stream frame: the record travels base64-encoded inside it.
	MaxApplyFrame = MaxApplicationSize*4/3 + 1024
	// MaxNotifyAnswer caps a provider's answer to a pushed notification.
	MaxNotifyAnswer = 4096
)
