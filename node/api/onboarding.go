package api

import (
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// Types of the onboarding routes: a provider's application, a coordinator's review queue,
// decisions, revocations and notifications.

// Local statuses of a provider's own application, besides the coordinator's
// (protocol.StatusPending, StatusApproved, ...).
const (
	// StatusQueued: signed and kept, not yet acknowledged by the coordinator.
	StatusQueued = "queued"
	// StatusRefused: the coordinator refused the record itself (invalid, replayed).
	StatusRefused = "refused"
)

// OwnApplicationView is the answer of GET /v1/apply.
type OwnApplicationView struct {
	ID          string    `json:"id"`
	Status      string    `json:"status"` // queued, pending, info-requested, approved, rejected, revoked, refused
	Tier        string    `json:"tier,omitempty"`
	Message     string    `json:"message,omitempty"`
	Delivered   bool      `json:"delivered"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error,omitempty"`
	Coordinator string    `json:"coordinator"`
	SubmittedAt time.Time `json:"submitted_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// DecisionDue is when the coordinator said it would decide (while pending).
	DecisionDue time.Time             `json:"decision_due,omitzero"`
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

// Decision is a reviewer's decision on an application.
type Decision struct {
	Action  string `json:"action"` // approve, reject, request-info
	Tier    string `json:"tier,omitempty"`
	Message string `json:"message,omitempty"` // approval note, rejection reason or question
	Actor   string `json:"actor"`             // who decides, for the audit trail
}

// MeasuredLink is a coordinator's own measurement of a provider's link.
type MeasuredLink struct {
	MeasuredAt time.Time `json:"measured_at"`
	RTTMilli   float64   `json:"rtt_ms"`
	UpMbps     float64   `json:"up_mbps"`
	DownMbps   float64   `json:"down_mbps"`
}

// ApplicationView is an application as the coordinator's API shows it.
type ApplicationView struct {
	ID           string    `json:"id"`
	Provider     string    `json:"provider"`
	Status       string    `json:"status"`
	Tier         string    `json:"tier"`
	ProposedTier string    `json:"proposed_tier"`
	TierReasons  []string  `json:"tier_reasons,omitempty"`
	CaseByCase   []string  `json:"case_by_case,omitempty"`
	SubmittedAt  time.Time `json:"submitted_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// DecisionDue, AgeBusinessDays and Overdue: while the application awaits a decision
	// (pending), when it is due, how many business days it has waited, whether it is late.
	DecisionDue     time.Time `json:"decision_due,omitzero"`
	AgeBusinessDays int       `json:"age_business_days,omitempty"`
	Overdue         bool      `json:"overdue,omitempty"`
	// MeasuredLink is this coordinator's latest measurement of the applicant's link (its
	// benchmark runs); LinkGaps the declared bandwidths it contradicts.
	MeasuredLink *MeasuredLink         `json:"measured_link,omitempty"`
	LinkGaps     []string              `json:"link_gaps,omitempty"`
	Message      string                `json:"message,omitempty"`
	Application  *protocol.Application `json:"application,omitempty"`
	Certificate  []byte                `json:"certificate,omitempty"`
	Events       []Event               `json:"events,omitempty"`
	// The serial and expiry of the latest certificate issued on the application (renewals
	// replace it), in the list too.
	CertificateSerial  uint64    `json:"certificate_serial,omitempty"`
	CertificateExpires time.Time `json:"certificate_expires,omitzero"`
}

// Event is one step of an application's audit trail: who did what, when.
type Event struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Detail string    `json:"detail,omitempty"`
}
