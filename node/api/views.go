package api

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// Version is the gpunex software version, of the node and of the CLI alike; set at build
// time with -ldflags "-X github.com/gpunex/gpunex/node/api.Version=...".
var Version = "0.1.0-dev"

// Status is the answer of GET /v1/status.
type Status struct {
	PeerID      string    `json:"peer_id"`
	Role        string    `json:"role"`
	Version     string    `json:"version"`
	Addrs       []string  `json:"addrs"`
	Peers       int       `json:"peers"`
	OffersKnown int       `json:"offers_known"`
	StartedAt   time.Time `json:"started_at"`
	// Sandbox is how a provider runs jobs (absent on other roles).
	Sandbox *SandboxStatus `json:"sandbox,omitempty"`
	// Reachability is what AutoNAT says of the node: "public" (peers dial it), "private"
	// (behind NAT: peers reach it through its relays, then hole-punch where they can) or
	// "unknown" (not checked yet); a coordinator is public by its role. Relayed says its
	// addresses include relay addresses (…/p2p-circuit), which its offers carry.
	Reachability string `json:"reachability"`
	Relayed      bool   `json:"relayed"`
}

// SandboxStatus says how a provider's jobs run, and what is off and why
// (docs/sandbox.md).
type SandboxStatus struct {
	// Error says why no job can run (containerd unreachable); empty when jobs run.
	Error string `json:"error,omitempty"`
	// Egress is the policy in force for jobs with egress (deny, public-only, allow), and
	// EgressOff why it is deny when the configuration asked for more.
	Egress     string `json:"egress"`
	EgressMbps int64  `json:"egress_mbps,omitempty"`
	EgressOff  string `json:"egress_off,omitempty"`
	// UserNamespaces says whether jobs run in user namespaces of their own, and
	// UserNamespacesOff why not.
	UserNamespaces    bool   `json:"user_namespaces"`
	UserNamespacesOff string `json:"user_namespaces_off,omitempty"`
}

// GossipView is a peer's gossipsub score as this node keeps it (GET /v1/gossip/{peer}):
// below -1000 everything it sends is ignored (docs/protocols/offers.md, "Peer scoring").
type GossipView struct {
	Peer  string  `json:"peer"`
	Score float64 `json:"score"`
	Known bool    `json:"known"`
}

// OfferRecordView is the answer of GET /v1/offers/record.
type OfferRecordView struct {
	Provider string          `json:"provider"`
	Offer    *protocol.Offer `json:"offer"`
	Raw      []byte          `json:"raw"` // the signed envelope as received (base64 in JSON)
}

// SetPriceRequest is the body of POST /v1/provider/price.
type SetPriceRequest struct {
	Model string `json:"model"`
	USDC  string `json:"usdc"`
}

// BatchRecordView is a batch with its latest signed record.
type BatchRecordView struct {
	BatchView
	Record []byte `json:"record"`
}

// BundleView is a batch's audit bundle with the other batches known.
type BundleView struct {
	Bundle *protocol.AuditBundle `json:"bundle"`
	Known  [][]byte              `json:"known"`
}

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

// Progress reports a run's steps.
type Progress func(step, steps int, what string)

// BenchView is the answer of GET /v1/bench.
type BenchView struct {
	Attestation *protocol.Attestation `json:"attestation"`
	// Receipt is the coordinator's measurement of the run's network: the figures that count.
	Receipt *protocol.NetworkReceipt `json:"network_receipt,omitempty"`
	// EnterpriseBelow says which Enterprise minimum the host falls under ("" when none).
	EnterpriseBelow string `json:"enterprise_below,omitempty"`
	Raw             []byte `json:"raw"`
}

// BenchPoint is one benchmark run as the provider's history keeps it (GET
// /v1/provider/history): each GPU's figures and verdict, and the host's.
type BenchPoint struct {
	GPUs         []protocol.GPUBenchmark `json:"gpus"`
	StorageWrite float64                 `json:"storage_write_mbps"`
	StorageRead  float64                 `json:"storage_read_mbps"`
	UpMbps       float64                 `json:"up_mbps"`   // as the coordinator measured it
	DownMbps     float64                 `json:"down_mbps"` // as the coordinator measured it
	HostBelow    string                  `json:"host_below,omitempty"`
}

// ScorePoint is one score record the provider was given, as its history keeps it.
type ScorePoint struct {
	Coordinator string   `json:"coordinator"`
	Seq         uint64   `json:"seq"`
	Score       int      `json:"score"`
	Uptime      float64  `json:"uptime"`
	Completion  float64  `json:"completion"`
	Consistency float64  `json:"benchmark_consistency"`
	Why         []string `json:"why,omitempty"`
}

// HistoryView is the answer of GET /v1/provider/history: what the provider's charts draw.
type HistoryView struct {
	From   time.Time     `json:"from"`
	Scores []HistoryItem `json:"scores"` // ScorePoint values
	Bench  []HistoryItem `json:"bench"`  // BenchPoint values
	// Week is the last 7 days hour by hour, in the provider's time zone: the hours its
	// availability declared (less its maintenance) against the uptime probes it answered.
	Week UptimeWeek `json:"week"`
}

// HistoryItem is one point of a history series.
type HistoryItem struct {
	At    time.Time       `json:"at"`
	Value json.RawMessage `json:"value"`
}

// UptimeWeek compares the declared schedule with the probes answered over 7 days.
type UptimeWeek struct {
	Timezone string       `json:"timezone"`
	Hours    []UptimeHour `json:"hours"` // oldest first, the current hour last
	// Since is when the provider answered its first probe on record (nil: none yet): the
	// hours before it are not counted.
	Since *time.Time `json:"since,omitempty"`
	// Declared is the number of past hours since then that the schedule declared; Answered
	// those of them in which the provider answered at least one of its coordinators' probes.
	Declared int `json:"declared_hours"`
	Answered int `json:"answered_hours"`
}

// UptimeHour is one hour of the week.
type UptimeHour struct {
	Start    time.Time `json:"start"`
	Declared bool      `json:"declared"` // inside the declared availability, outside maintenance
	Probes   int       `json:"probes"`   // probes answered
}

// DownloadRequest is the body of POST /v1/dashboard/download: the API path to download
// (a job's output).
type DownloadRequest struct {
	Path string `json:"path"`
}

// PayoutSettingsView is the answer of GET and PUT /v1/provider/payout: how the provider
// is paid and whether its coordinators have the settings.
type PayoutSettingsView struct {
	// Settings are nil when none are set: earnings then wait at the coordinator.
	Settings *protocol.PayoutSettings `json:"settings"`
	// FromConfig is true when they are [payout] of config.toml, false when they were chosen
	// from the dashboard (DELETE /v1/provider/payout goes back to config.toml).
	FromConfig bool             `json:"from_config"`
	Deliveries []PayoutDelivery `json:"deliveries"`
}

// PayoutRequest is the body of PUT /v1/provider/payout. Spaces in the IBAN and BIC are
// dropped and letters made capitals.
type PayoutRequest struct {
	Method        string `json:"method"`   // usdc or bank
	Schedule      string `json:"schedule"` // weekly or monthly
	SolanaAddress string `json:"solana_address,omitempty"`
	AccountName   string `json:"account_name,omitempty"`
	IBAN          string `json:"iban,omitempty"`
	BIC           string `json:"bic,omitempty"`
}

// PayoutDelivery is where the latest signed settings stand with one trusted coordinator.
type PayoutDelivery struct {
	Coordinator string     `json:"coordinator"`
	Seq         uint64     `json:"seq,omitempty"` // of the settings being delivered
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	Error       string     `json:"error,omitempty"` // why the last try failed
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

// EarningsQuery selects what `gpunex earnings` shows.
type EarningsQuery struct {
	Period string    `json:"period"` // week or month: the current one
	From   time.Time `json:"from,omitzero"`
	To     time.Time `json:"to,omitzero"`
	By     string    `json:"by"` // gpu or model
}

// EarningRow is one paid-for job.
type EarningRow struct {
	Job            string    `json:"job"`
	EndedAt        time.Time `json:"ended_at"`
	Model          string    `json:"model"`
	GPUs           int       `json:"gpus"`
	Seconds        int64     `json:"seconds"`
	ChargeUSDC     string    `json:"charge_usdc"`
	CommissionUSDC string    `json:"commission_usdc"`
	NetUSDC        string    `json:"net_usdc"`
	Net            int64     `json:"net_micro_usdc"`
	Batch          string    `json:"batch,omitempty"`
	Paid           bool      `json:"paid"`
}

// EarningsGroup sums earnings per GPU or per model.
type EarningsGroup struct {
	Key        string `json:"key"`
	Jobs       int    `json:"jobs"`
	GPUSeconds int64  `json:"gpu_seconds"`
	NetUSDC    string `json:"net_usdc"`
	Net        int64  `json:"net_micro_usdc"`
}

// EarningsView is what `gpunex earnings` prints.
type EarningsView struct {
	From           time.Time       `json:"from"`
	To             time.Time       `json:"to"`
	TotalUSDC      string          `json:"total_usdc"` // net earned in the period
	Total          int64           `json:"total_micro_usdc"`
	ChargedUSDC    string          `json:"charged_usdc"`
	CommissionUSDC string          `json:"commission_usdc"`
	PendingUSDC    string          `json:"pending_usdc"` // earned, not paid yet (any period)
	Pending        int64           `json:"pending_micro_usdc"`
	PaidUSDC       string          `json:"paid_usdc"` // paid out, all time
	By             string          `json:"by"`
	Groups         []EarningsGroup `json:"groups"`
	History        []EarningRow    `json:"history"`
	Payouts        []PayoutRow     `json:"payouts"`
	// Truncated says History lists only the latest jobs of the period (the totals cover
	// them all; Groups only those listed): narrow the period to see the rest.
	Truncated bool `json:"truncated,omitempty"`
	// Unreachable names the trusted coordinators other than the first that did not answer:
	// their earnings are missing from every figure.
	Unreachable []string `json:"unreachable,omitempty"`
}

// JobView is a job as the API shows it: the fields its provider reports on the job streams
// (protocol.JobStatus), and, for a job just placed by model, how it was placed.
type JobView struct {
	protocol.JobStatus
	// Placement is set in the answer of POST /v1/jobs to a request naming a model and no
	// provider or offer: which offer took the job and why, and which were tried before it.
	Placement *Placement `json:"placement,omitempty"`
}

// Placement says how a job asked for by model found its provider: the offers matching the
// search, best merit first (see RankTerms), were proposed the job in turn until one took it.
type Placement struct {
	// Search is what was searched, in words ("model H100-80GB, region eu-west, 1 GPU or
	// more"); Matched how many offers matched it; Tries the most that were to be tried.
	Search  string `json:"search"`
	Matched int    `json:"matched"`
	Tries   int    `json:"tries"`
	// Chosen says which provider took the job and why, in words.
	Chosen string `json:"chosen"`
	// Attempts are the offers proposed to, in order: the last one took the job.
	Attempts []PlacementAttempt `json:"attempts"`
}

// PlacementAttempt is one offer a job was proposed to while it was placed.
type PlacementAttempt struct {
	// Rank is the offer's place in the search (1: the best merit).
	Rank      int     `json:"rank"`
	Offer     string  `json:"offer"`
	Provider  string  `json:"provider"`
	PriceUSDC string  `json:"price_usdc_per_gpu_hour"`
	Score     int     `json:"score"`
	Tier      string  `json:"tier"`
	Region    string  `json:"region"`
	Merit     float64 `json:"merit"`
	// Why says why the offer was ranked there, in words.
	Why string `json:"why"`
	// Outcome is "accepted" (the provider took the job), "refused" (it refused or
	// countered the proposal), "unreachable" (it did not answer) or "failed" (the job was
	// leased but did not start); Error says why when it is not accepted.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// Placement limits: how many offers POST /v1/jobs tries by default, and at most.
const (
	DefaultTries = 3
	MaxTries     = 10
)

// JobRequest is what a renter asks for (POST /v1/jobs).
type JobRequest struct {
	// Provider (a peer ID) or Offer (an offer ID, "<peer>/<MODEL>") names where to run.
	// Without either, Model places the job: the offers of that model matching Region,
	// Tier, Egress, MaxPrice and GPUs are proposed the job best merit first, until one
	// takes it or Tries of them were asked (0: DefaultTries; at most MaxTries).
	Provider string `json:"provider,omitempty"`
	Offer    string `json:"offer,omitempty"`
	Model    string `json:"model,omitempty"`
	Region   string `json:"region,omitempty"`
	Tier     string `json:"tier,omitempty"`
	Tries    int    `json:"tries,omitempty"`
	GPUs     int    `json:"gpus"`
	// MaxSeconds is the longest the job may run.
	MaxSeconds int64 `json:"max_seconds"`
	// MaxPrice in USDC per GPU-hour; empty takes the offer's price.
	MaxPrice string `json:"max_price_usdc,omitempty"`
	// Image (a registry reference) or ImageArchive (a path to an OCI archive on this
	// machine, streamed to the provider).
	Image        string   `json:"image,omitempty"`
	ImageArchive string   `json:"image_archive,omitempty"`
	Args         []string `json:"args,omitempty"`
	Env          []string `json:"env,omitempty"`
	Egress       bool     `json:"egress,omitempty"`
}

// Ordinal writes n as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 21st.
func Ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// Maintenance is a planned maintenance window (From, To) or recurring rule.
type Maintenance struct {
	ID   string    `json:"id"`
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	Rule string    `json:"rule,omitempty"` // e.g. "first sunday 02:00 2h Europe/Paris"
	Note string    `json:"note,omitempty"`
}

// MaintenanceView is the answer of GET /v1/provider/maintenance.
type MaintenanceView struct {
	Planned   []Maintenance                `json:"planned"`
	Announced []protocol.MaintenanceWindow `json:"announced"`
}

// Availability is the weekly schedule in which a provider offers its GPUs, as set by PUT
// /v1/provider/availability. Windows are "DAYS HH:MM-HH:MM" in Timezone; none means 24/7.
// Source names the calendar it was imported from; Follow (a duration such as "6h") has the
// node read a calendar URL again that often.
type Availability struct {
	Timezone string   `json:"timezone"`
	Windows  []string `json:"windows"`
	Source   string   `json:"source,omitempty"`
	Follow   string   `json:"follow,omitempty"`
}

// AvailabilityView is the answer of GET, PUT and DELETE /v1/provider/availability.
type AvailabilityView struct {
	Availability
	Text       string     `json:"text"`        // e.g. "mon-fri 08:00-20:00 (Europe/Paris)", or "24/7"
	FromConfig bool       `json:"from_config"` // [provider.availability] of the config is in force
	OpenNow    bool       `json:"open_now"`
	NextChange *time.Time `json:"next_change,omitempty"`
	SetAt      time.Time  `json:"set_at,omitzero"`
	Checked    time.Time  `json:"checked,omitzero"` // when a followed calendar was last read
	Error      string     `json:"error,omitempty"`  // why that read was not applied
}

// PeerView is the answer of GET /v1/peers/{id}: how this node is connected to a peer.
// Path is "direct", "relayed" (only through a relay: a hole punch has not succeeded) or ""
// (not connected); Conns lists the remote address of each connection.
type PeerView struct {
	ID    string   `json:"id"`
	Path  string   `json:"path"`
	Conns []string `json:"conns"`
}

// ClockView is the answer of GET /v1/clock: this node's clock against its coordinator's.
// OffsetMillis is positive when this node's clock is ahead.
type ClockView struct {
	Coordinator     string    `json:"coordinator"`
	OffsetMillis    int64     `json:"offset_ms"`
	RoundTripMillis int64     `json:"round_trip_ms"`
	MeasuredAt      time.Time `json:"measured_at"`
}

// PriceAdvice is what `gpunex price recommend` prints for one market.
type PriceAdvice struct {
	protocol.Market
	RecommendedUSDC string `json:"recommended_usdc"`
	MedianListUSDC  string `json:"median_list_usdc"`
	MedianLeaseUSDC string `json:"median_lease_usdc"`
	LeasedGPUHours  string `json:"leased_gpu_hours"`
	// YourPrice is this provider's current price for the model, when it sells it.
	YourPriceUSDC string    `json:"your_price_usdc,omitempty"`
	IssuedAt      time.Time `json:"stats_issued_at"`
	WindowHours   int64     `json:"window_hours"`
	CommissionBPS int       `json:"commission_bps"`
	Coordinator   string    `json:"coordinator"`
}

// PayoutRunOptions are the options of `gpunex coordinator payouts run`.
type PayoutRunOptions struct {
	// Now pays every provider with pending earnings at least Min, whatever its schedule.
	Now bool `json:"now"`
	// Min overrides settlement.min_payout_usdc when set.
	Min *protocol.MicroUSDC `json:"min_micro_usdc,omitempty"`
	// DryRun plans and checks the batch but stores and sends nothing.
	DryRun bool `json:"dry_run"`
}

// PayoutView is one payout as the CLI shows it.
type PayoutView struct {
	Provider    string             `json:"provider"`
	Method      string             `json:"method"`
	Destination string             `json:"destination"`
	Amount      protocol.MicroUSDC `json:"amount_micro_usdc"`
	AmountUSDC  string             `json:"amount_usdc"`
	Receipts    int                `json:"receipts"`
	MerkleRoot  string             `json:"merkle_root"`
	Transaction string             `json:"transaction,omitempty"`
	Explorer    string             `json:"explorer,omitempty"`
	Paid        bool               `json:"paid"`
}

// DisputeView is a renter's dispute of a job's receipt as a coordinator shows it.
type DisputeView struct {
	Job            string    `json:"job"`
	Renter         string    `json:"renter"`
	Provider       string    `json:"provider"`
	ReceivedAt     time.Time `json:"received_at"`
	State          string    `json:"state"` // open or decided
	ClaimedUSDC    string    `json:"claimed_usdc"`
	RenterSaysUSDC string    `json:"renter_says_usdc"`
	// FloorUSDC is what the renter's countersigned checkpoints prove: the least a
	// decision may charge.
	FloorUSDC   string    `json:"floor_usdc,omitempty"`
	Reason      string    `json:"reason"`
	DecidedAt   time.Time `json:"decided_at,omitzero"`
	ChargedUSDC string    `json:"charged_usdc,omitempty"`
	// The signed records: the renter's dispute, the provider's receipt, the decision.
	Dispute  []byte `json:"dispute,omitempty"`
	Receipt  []byte `json:"receipt,omitempty"`
	Decision []byte `json:"decision,omitempty"`
}

// ResolveRequest decides a dispute: For "provider" or "renter", or an amount in USDC.
type ResolveRequest struct {
	For  string `json:"for,omitempty"`
	USDC string `json:"usdc,omitempty"`
	Note string `json:"note,omitempty"`
}

// DeferredView is a payout moved out of a batch, and why.
type DeferredView struct {
	Provider   string    `json:"provider"`
	AmountUSDC string    `json:"amount_usdc"`
	Receipts   int       `json:"receipts"`
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// BatchView is a payout batch as the CLI shows it.
type BatchView struct {
	BatchID      string       `json:"batch_id"`
	State        string       `json:"state"`
	DryRun       bool         `json:"dry_run,omitempty"`
	CreatedAt    time.Time    `json:"created_at"`
	Payouts      []PayoutView `json:"payouts"`
	TotalUSDC    string       `json:"total_usdc"`
	Total        int64        `json:"total_micro_usdc"`
	Transactions []string     `json:"transactions"`
	FeesLamports uint64       `json:"fees_lamports"`
	MerkleRoot   string       `json:"merkle_root"`
	Error        string       `json:"error,omitempty"`
	// Skipped says why providers with pending earnings are not in the batch.
	Skipped []string `json:"skipped,omitempty"`
	// Deferred are the payouts taken out of the batch before they were sent (a closed
	// token account, repeated failures, the operator's replan): the next batch pays them.
	Deferred []DeferredView `json:"deferred,omitempty"`
}

// SearchFilter selects offers. Zero fields match everything.
type SearchFilter struct {
	Model    string
	Region   string
	MaxPrice protocol.MicroUSDC // per GPU-hour
	MinGPUs  int
	// Egress keeps only offers whose jobs may reach the network.
	Egress bool
	// Tier keeps only offers certified at this tier (community, enterprise).
	Tier string
	// Coordinator keeps only offers certified by this coordinator (a peer ID).
	Coordinator string
	// Sort orders the rows: "" (merit, see RankTerms), "placement" (price less the tier
	// and commitment bonus), "price", "score" (reliability, highest first) or "perf"
	// (performance score per USDC, highest first). Rows without the figure sort last.
	Sort string
}

// OfferRow is one GPU model of one provider's live offer, as search shows it.
type OfferRow struct {
	ID             string             `json:"id"`
	Provider       string             `json:"provider"`
	Model          string             `json:"model"`
	GPUs           int                `json:"gpus"`
	VRAMGB         int                `json:"vram_gb"`
	PriceUSDC      string             `json:"price_usdc_per_gpu_hour"`
	PriceMicroUSDC protocol.MicroUSDC `json:"price_micro_usdc_per_gpu_hour"`
	Region         string             `json:"region"`
	Availability   string             `json:"availability"`
	Simulated      bool               `json:"simulated"`
	// Egress is what the provider's jobs with egress reach ("public-only", "allow"; ""
	// for none), EgressMbps its per-job cap (0: none).
	Egress     string    `json:"egress"`
	EgressMbps int64     `json:"egress_mbps,omitempty"`
	Seq        uint64    `json:"seq"`
	IssuedAt   time.Time `json:"issued_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Tier and CommitmentEnd come from the provider's certificate, Coordinator is its
	// signer: the coordinator that holds a renter's money for a job on this offer and
	// scores the provider.
	Coordinator   string    `json:"coordinator"`
	Tier          string    `json:"tier"`
	CommitmentEnd time.Time `json:"commitment_end"`
	// PlacementMicroUSDC is the price search ranks by: the price less the placement
	// bonus of the tier and the commitment (see PlacementBonusBP).
	PlacementMicroUSDC protocol.MicroUSDC `json:"placement_micro_usdc"`
	// Measured figures of the model's GPUs (mean over them) from the offer's benchmark
	// attestation; absent when the provider has none.
	Bench *RowBench `json:"bench,omitempty"`
	// Score is the provider's reliability score (0-100) from a trusted coordinator's
	// latest score record; absent when none is held.
	Score *int `json:"score,omitempty"`
	// Rank holds the terms of the default order (see Rank).
	Rank RankTerms `json:"rank"`
}

// RankTerms are the terms of a row's merit, the default search order (highest first):
//
//	merit = (score/100)^2 x perf x (1 + bonus) / price_vs_market
//
// score is the reliability score (90, a new provider's, when none is held); perf is the
// measured performance score over 100 (0.8 when unmeasured); bonus is the tier and
// commitment placement bonus (PlacementBonusBP / 10000); price_vs_market is the row's price
// over the median price of the same model in the same region among the rows found (1 when
// it is the only one).
type RankTerms struct {
	Score         int     `json:"score"`
	Perf          float64 `json:"perf"`
	Bonus         float64 `json:"bonus"`
	PriceVsMarket float64 `json:"price_vs_market"`
	Merit         float64 `json:"merit"`
}

// RowBench is the measured performance of one model's GPUs in an offer.
type RowBench struct {
	FP32TFLOPS   float64   `json:"fp32_tflops"`
	FP16TFLOPS   float64   `json:"fp16_tflops"`
	TensorTFLOPS float64   `json:"tensor_tflops"`
	MemBandwidth float64   `json:"mem_bandwidth_gbps"`
	PerfScore    int       `json:"perf_score"`
	MeasuredAt   time.Time `json:"measured_at"`
	// GPUs are the per-GPU figures.
	GPUs []protocol.GPUBenchmark `json:"gpus"`
}

// DepositView is what `gpunex wallet deposit` prints.
type DepositView struct {
	Signature  string             `json:"signature"`
	Amount     protocol.MicroUSDC `json:"amount_micro_usdc"`
	AmountUSDC string             `json:"amount_usdc"`
	Credited   bool               `json:"credited"`
	Explorer   string             `json:"explorer,omitempty"`
	Balance    *BalanceView       `json:"balance,omitempty"`
}

// BalanceView is a renter's balance at the coordinator.
type BalanceView struct {
	// Coordinator is the coordinator that keeps this account (GET /v1/wallet/balance).
	Coordinator   string             `json:"coordinator,omitempty"`
	Available     protocol.MicroUSDC `json:"available_micro_usdc"`
	Held          protocol.MicroUSDC `json:"held_micro_usdc"`
	AvailableUSDC string             `json:"available_usdc"`
	HeldUSDC      string             `json:"held_usdc"`
	DepositedUSDC string             `json:"deposited_usdc"`
	ChargedUSDC   string             `json:"charged_usdc"`
	Holds         []HoldView         `json:"holds"`
	// Wallet is the node's own Solana wallet and its USDC, when configured.
	Wallet     string `json:"wallet,omitempty"`
	WalletUSDC string `json:"wallet_usdc,omitempty"`
}

// HoldView is one escrow hold.
type HoldView struct {
	Job        string    `json:"job"`
	Provider   string    `json:"provider"`
	AmountUSDC string    `json:"amount_usdc"`
	State      string    `json:"state"`
	ChargeUSDC string    `json:"charge_usdc,omitempty"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// WalletInfo is a coordinator's treasury facts (see protocol.TreasuryInfo).
type WalletInfo = protocol.TreasuryInfo

// PayoutRow is one payout of a provider (see protocol.PayoutRow).
type PayoutRow = protocol.PayoutRow

// Event is one step of an application's audit trail: who did what, when.
type Event struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Detail string    `json:"detail,omitempty"`
}

// ModelsView is a model catalogue as a node uses it (GET /v1/models): the catalogue of
// the coordinator a provider benchmarks against (a coordinator's own), seq 0 being the
// compiled-in first one.
type ModelsView struct {
	Coordinator string                `json:"coordinator,omitempty"`
	Seq         uint64                `json:"seq"`
	IssuedAt    time.Time             `json:"issued_at,omitzero"`
	Models      []protocol.ModelEntry `json:"models"`
}

// ModelEdit is a coordinator's change to its catalogue (POST /v1/coordinator/models): op
// "add" a model not in it, "set" (replace) the entry of one in it, or "remove" one.
type ModelEdit struct {
	Op    string              `json:"op"`
	Entry protocol.ModelEntry `json:"entry"`
}
