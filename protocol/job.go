package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Job records: a renter's proposal, the provider's lease, usage receipts, and the
// countersignature by which the other side agrees to a lease or a receipt. See
// docs/protocols/jobs.md.

const (
	// JobVersion is the payload version of every job record.
	JobVersion = 1
	// MaxProposalSize caps a proposal envelope (command line and environment included).
	MaxProposalSize = 32 << 10
	// MaxLeaseSize caps a lease envelope.
	MaxLeaseSize = 8 << 10
	// MaxReceiptSize caps a usage receipt envelope.
	MaxReceiptSize = 4 << 10
	// MaxCountersignatureSize caps a countersignature envelope.
	MaxCountersignatureSize = 2 << 10
	// MaxJobDuration is the longest lease.
	MaxJobDuration = 30 * 24 * time.Hour
	// ProposalTTL is how long a proposal may be accepted after it was issued.
	ProposalTTL = 2 * time.Minute
	maxArgs     = 256
	maxArgLen   = 4096
	maxEnv      = 128
)

// JobProtocol is the negotiation stream: proposal, answer, countersignature, image, start.
const JobProtocol = "/gpunex/job/1.0.0"

// JobControlProtocol carries a renter's requests about a running or ended job: status,
// logs (optionally followed), cancel, output fetch.
const JobControlProtocol = "/gpunex/job-control/1.0.0"

// JobMsg is one JSON frame of the job and job-control streams.
type JobMsg struct {
	Type string `json:"type"`
	// propose, accept (lease), countersign, receipt, receipt-countersign: a signed record.
	Record []byte `json:"record,omitempty"`
	// reject and error: why. counter: the price the provider would take.
	Reason string    `json:"reason,omitempty"`
	Price  MicroUSDC `json:"price_micro_usdc_per_gpu_hour,omitempty"`
	// control requests.
	Op     string `json:"op,omitempty"` // status, logs, cancel, fetch, checkpoint, extend
	Job    string `json:"job,omitempty"`
	Follow bool   `json:"follow,omitempty"`
	// extend: the seconds the renter adds to its job's lease (extend.go).
	Seconds int64 `json:"seconds,omitempty"`
	// The extend exchange's accept: the provider's usage checkpoint of the new lease, for
	// the seconds run so far; its countersign: the renter's countersignature of that
	// checkpoint. The extension holds only with both, so that the provider never gives up
	// countersigned usage for a longer lease (docs/protocols/jobs.md, "Extending a lease").
	Checkpoint []byte `json:"checkpoint,omitempty"`
	// log: a chunk of the job's output.
	Data []byte `json:"data,omitempty"`
	// status and end.
	Status *JobStatus `json:"status,omitempty"`
	// accept: the provider already holds the proposal's image archive; the renter does
	// not send it.
	ImageCached bool `json:"image_cached,omitempty"`
}

// MaxJobFrame caps one frame of the job streams.
const MaxJobFrame = MaxProposalSize + 1024

// JobStatus is a job as its provider reports it on the job streams.
type JobStatus struct {
	ID          string    `json:"id"`
	Side        string    `json:"side"`
	Peer        string    `json:"peer"`
	State       string    `json:"state"`
	Error       string    `json:"error,omitempty"`
	Model       string    `json:"model"`
	GPUs        int       `json:"gpus"`
	GPUUUIDs    []string  `json:"gpu_uuids,omitempty"`
	Price       MicroUSDC `json:"price_micro_usdc_per_gpu_hour"`
	PriceUSDC   string    `json:"price_usdc_per_gpu_hour"`
	Image       string    `json:"image"`
	CreatedAt   time.Time `json:"created_at"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	EndsAt      time.Time `json:"ends_at,omitzero"`
	ExitCode    int       `json:"exit_code"`
	ExitReason  string    `json:"exit_reason,omitempty"`
	Seconds     int64     `json:"seconds"`
	Cost        MicroUSDC `json:"cost_micro_usdc"`
	CostUSDC    string    `json:"cost_usdc"`
	Receipt     []byte    `json:"receipt,omitempty"`
	Countersign bool      `json:"receipt_countersigned"`
	// MeteredSeconds is the latest checkpoint both sides signed: what the renter owes at
	// least. Disputed says the renter disputed the final receipt.
	MeteredSeconds int64 `json:"metered_seconds"`
	Disputed       bool  `json:"disputed,omitempty"`
	// Ports are the ports the job declared (its proposal's), which its renter reaches
	// through job tunnels while it runs.
	Ports []int `json:"ports,omitempty"`
}

// Image says what a job runs: a registry reference the provider pulls, or an OCI image
// archive the renter streams, identified by the SHA-256 of the archive's bytes.
type Image struct {
	Ref           string `json:"ref,omitempty"`
	ArchiveSHA256 string `json:"archive_sha256,omitempty"` // hex
	ArchiveSize   int64  `json:"archive_size,omitempty"`
}

// Proposal is a renter's request to run a job on a provider's GPUs.
type Proposal struct {
	Version  int       `json:"version"`
	Job      string    `json:"job"` // chosen by the renter: 16 lower-case hex digits
	Renter   string    `json:"renter"`
	Provider string    `json:"provider"`
	IssuedAt time.Time `json:"issued_at"`
	Model    string    `json:"model"`
	GPUs     int       `json:"gpus"`
	// MaxSeconds is the longest the job may run; the lease ends then.
	MaxSeconds int64 `json:"max_seconds"`
	// MaxPrice is the most the renter pays, in micro-USDC per GPU-hour.
	MaxPrice MicroUSDC `json:"max_price_micro_usdc_per_gpu_hour"`
	Image    Image     `json:"image"`
	Args     []string  `json:"args,omitempty"`
	Env      []string  `json:"env,omitempty"`
	Egress   bool      `json:"egress,omitempty"`
	// Ports are the TCP ports the job serves its renter through job tunnels
	// (JobTunnelProtocol); none is reachable otherwise. Omitted when empty: a provider
	// built before ports refuses a proposal naming some (its strict decoding knows no
	// such member), and takes one without them as before.
	Ports []int `json:"ports,omitempty"`
	// Hold is the coordinator's signed escrow hold for this job (an EscrowHold envelope):
	// a provider that requires escrow starts the job only against it.
	Hold []byte `json:"escrow_hold,omitempty"`
	// Input, when set, is the data the renter sends once the lease holds, read-only at
	// /input (input.go; docs/protocols/jobs.md, "Data in").
	Input *InputRef `json:"input,omitempty"`
}

// Limits are the sandbox limits a lease grants.
type Limits struct {
	MemoryBytes  int64 `json:"memory_bytes"`
	CPUMillis    int64 `json:"cpu_millis"`
	Pids         int64 `json:"pids"`
	ScratchBytes int64 `json:"scratch_bytes"`
}

// Lease is the provider's signed acceptance of a proposal, with its terms. It binds only
// once the renter countersigns it.
type Lease struct {
	Version  int    `json:"version"`
	Job      string `json:"job"`
	Proposal string `json:"proposal_sha256"` // hex SHA-256 of the renter's proposal envelope
	Renter   string `json:"renter"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	GPUs     int    `json:"gpus"`
	// Price is the provider's price, at most the proposal's MaxPrice, in micro-USDC per
	// GPU-hour.
	Price    MicroUSDC `json:"price_micro_usdc_per_gpu_hour"`
	IssuedAt time.Time `json:"issued_at"`
	// EndsAt is the latest the job may run until: issued_at + max_seconds.
	EndsAt time.Time `json:"ends_at"`
	Limits Limits    `json:"limits"`
	Egress bool      `json:"egress"`
	// Extends is the hex SHA-256 of the lease this one extends (a later EndsAt, every other
	// term the same; extend.go), empty for a job's first lease.
	Extends string `json:"extends,omitempty"`
	// Ports are the proposal's, which the provider agrees to serve (omitted when empty).
	Ports []int `json:"ports,omitempty"`
}

// Receipt is a provider's signed account of a job's use of its GPUs. The renter
// countersigns it; both keep it; payment is computed from it.
type Receipt struct {
	Version   int       `json:"version"`
	Job       string    `json:"job"`
	Lease     string    `json:"lease_sha256"` // hex SHA-256 of the lease envelope
	Provider  string    `json:"provider"`
	Renter    string    `json:"renter"`
	Model     string    `json:"model"`
	GPUs      int       `json:"gpus"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	Seconds   int64     `json:"seconds"`
	Price     MicroUSDC `json:"price_micro_usdc_per_gpu_hour"`
	// Amount is Cost(Price, GPUs, Seconds).
	Amount   MicroUSDC `json:"amount_micro_usdc"`
	Reason   string    `json:"reason"` // how the job ended: exited, oom, timeout, cancelled, ...
	ExitCode int       `json:"exit_code"`
}

// Countersignature is the other side's signature over a lease or receipt envelope.
type Countersignature struct {
	Version  int       `json:"version"`
	Of       Kind      `json:"of"`     // lease or receipt
	SHA256   string    `json:"sha256"` // hex SHA-256 of the countersigned envelope
	Job      string    `json:"job"`
	Signer   string    `json:"signer"`
	SignedAt time.Time `json:"signed_at"`
}

// CheckLeaseTerms applies the range rules of a lease on its own (a coordinator or an
// auditor holds the lease, not the proposal): a price, a GPU count and a period that a
// proposal could have asked for, so that every amount computed from it is in range, issued
// no later than now plus MaxClockSkew.
func CheckLeaseTerms(l *Lease, now time.Time) error {
	switch {
	case l.IssuedAt.After(now.Add(MaxClockSkew)):
		return futureErr(KindLease, "issued at", l.IssuedAt, now)
	case !ValidJobID(l.Job):
		return invalid(KindLease, "job %q is not 16 lower-case hex digits", l.Job)
	case l.Price <= 0 || l.Price > MaxPricePerGPUHour:
		return invalid(KindLease, "price %d micro-USDC out of range", l.Price)
	case l.GPUs < 1 || l.GPUs > MaxGPUsPerItem:
		return invalid(KindLease, "gpus %d out of range 1-%d", l.GPUs, MaxGPUsPerItem)
	case l.IssuedAt.IsZero() || !l.EndsAt.After(l.IssuedAt) || l.EndsAt.Sub(l.IssuedAt) > MaxJobDuration:
		return invalid(KindLease, "period out of range")
	case checkText("model", l.Model, true) != nil:
		return invalid(KindLease, "model %q", l.Model)
	}
	return nil
}

// Cost is what GPUs x seconds cost at a price per GPU-hour, in micro-USDC, rounded down
// to the micro-USDC: price x gpus x seconds / 3600.
func Cost(price MicroUSDC, gpus int, seconds int64) MicroUSDC {
	return MicroUSDC(int64(price) * int64(gpus) * seconds / 3600)
}

// RecordSHA256 is the hex SHA-256 of a record's envelope: how leases and receipts refer to
// the record they follow from.
func RecordSHA256(raw []byte) string {
	h := sha256.Sum256(raw)
	return hex.EncodeToString(h[:])
}

// ValidJobID reports whether s is a job ID: 16 lower-case hex digits.
func ValidJobID(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func openKind(raw []byte, kind Kind) (*Envelope, error) {
	env, err := Open(raw)
	if err != nil {
		return nil, err
	}
	if env.Kind != kind {
		return nil, fmt.Errorf("%w: expected a %s, got %s", ErrUnknownKind, kind, env.Kind)
	}
	return env, nil
}

func invalid(kind Kind, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, kind, fmt.Sprintf(format, args...))
}

// CheckProposal opens a proposal and applies every stateless rule at time now: signed by
// the renter it names, addressed to a valid provider, fresh, and well formed.
func CheckProposal(raw []byte, now time.Time) (*Proposal, error) {
	env, err := openKind(raw, KindProposal)
	if err != nil {
		return nil, err
	}
	var p Proposal
	if err := decodePayload(env, JobVersion, &p, func() int { return p.Version }); err != nil {
		return nil, err
	}
	if p.Renter != env.signerText {
		return nil, fmt.Errorf("%w: proposal names renter %s but is signed by %s", ErrWrongSigner, p.Renter, env.Signer)
	}
	bad := func(format string, args ...any) error { return invalid(KindProposal, format, args...) }
	switch {
	case !ValidJobID(p.Job):
		return nil, bad("job %q is not 16 lower-case hex digits", p.Job)
	case p.IssuedAt.IsZero():
		return nil, bad("issued_at is required")
	case p.GPUs < 1 || p.GPUs > MaxGPUsPerItem:
		return nil, bad("gpus %d out of range 1-%d", p.GPUs, MaxGPUsPerItem)
	case p.MaxSeconds < 1 || p.MaxSeconds > int64(MaxJobDuration/time.Second):
		return nil, bad("max_seconds %d out of range 1-%d", p.MaxSeconds, int64(MaxJobDuration/time.Second))
	case p.MaxPrice <= 0 || p.MaxPrice > MaxPricePerGPUHour:
		return nil, bad("max price %d micro-USDC out of range", p.MaxPrice)
	case (p.Image.Ref == "") == (p.Image.ArchiveSHA256 == ""):
		return nil, bad("image: give either a registry reference or an archive digest")
	case p.Image.ArchiveSHA256 != "" && (len(p.Image.ArchiveSHA256) != 64 || strings.Trim(p.Image.ArchiveSHA256, "0123456789abcdef") != ""):
		return nil, bad("image archive_sha256 is not 64 lower-case hex digits")
	case p.Image.ArchiveSHA256 != "" && p.Image.ArchiveSize <= 0:
		return nil, bad("image archive_size must be positive")
	case len(p.Image.Ref) > 512:
		return nil, bad("image ref too long")
	case len(p.Args) > maxArgs || len(p.Env) > maxEnv:
		return nil, bad("at most %d arguments and %d environment variables", maxArgs, maxEnv)
	}
	if err := CheckPorts(p.Ports); err != nil {
		return nil, bad("ports: %v", err)
	}
	if _, err := peer.Decode(p.Provider); err != nil {
		return nil, bad("provider %q is not a peer ID", p.Provider)
	}
	if p.Input != nil { // data in (input.go)
		if err := p.Input.check(); err != nil {
			return nil, bad("%v", err)
		}
	}
	if err := checkText("model", p.Model, true); err != nil || p.Model != NormalizeModel(p.Model) {
		return nil, bad("model %q", p.Model)
	}
	for _, a := range p.Args {
		if len(a) > maxArgLen || strings.ContainsRune(a, 0) {
			return nil, bad("argument too long or holding a NUL byte")
		}
	}
	for _, e := range p.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || len(e) > maxArgLen || strings.ContainsRune(e, 0) || strings.HasPrefix(k, "GPUNEX_") {
			return nil, bad("environment entry %.40q: expected K=V, K not starting with GPUNEX_", e)
		}
	}
	if err := checkIssued(KindProposal, p.IssuedAt, p.IssuedAt.Add(ProposalTTL), now); err != nil {
		return nil, err
	}
	return &p, nil
}

// CheckLease opens a lease and checks it against the proposal it answers: signed by that
// proposal's provider, same job, GPUs and model, a price within the renter's maximum, issued
// no earlier than the proposal (less MaxClockSkew), and an end within the proposal's
// duration.
func CheckLease(raw []byte, proposalRaw []byte, p *Proposal) (*Lease, error) {
	env, err := openKind(raw, KindLease)
	if err != nil {
		return nil, err
	}
	var l Lease
	if err := decodePayload(env, JobVersion, &l, func() int { return l.Version }); err != nil {
		return nil, err
	}
	if l.Provider != env.signerText || l.Provider != p.Provider {
		return nil, fmt.Errorf("%w: lease signed by %s for provider %s; the proposal went to %s", ErrWrongSigner, env.Signer, l.Provider, p.Provider)
	}
	bad := func(format string, args ...any) error { return invalid(KindLease, format, args...) }
	switch {
	case l.Job != p.Job || l.Renter != p.Renter || l.Model != p.Model || l.GPUs != p.GPUs || l.Egress != p.Egress || !slices.Equal(l.Ports, p.Ports):
		return nil, bad("terms differ from the proposal")
	case l.Proposal != RecordSHA256(proposalRaw):
		return nil, bad("lease answers another proposal")
	case l.Price <= 0 || l.Price > p.MaxPrice:
		return nil, bad("price %s above the renter's maximum %s", l.Price, p.MaxPrice)
	case l.IssuedAt.IsZero() || !l.EndsAt.After(l.IssuedAt) || l.EndsAt.Sub(l.IssuedAt) > time.Duration(p.MaxSeconds)*time.Second:
		return nil, bad("lease period longer than the proposal's max_seconds")
	case l.IssuedAt.Before(p.IssuedAt.Add(-MaxClockSkew)):
		// A lease dated before the proposal it answers would let its receipt claim the
		// time in between.
		return nil, bad("lease issued at %s, before the proposal (%s)", l.IssuedAt.UTC().Format(time.RFC3339), p.IssuedAt.UTC().Format(time.RFC3339))
	case l.Limits.MemoryBytes <= 0 || l.Limits.CPUMillis <= 0 || l.Limits.Pids <= 0 || l.Limits.ScratchBytes <= 0:
		return nil, bad("limits must be positive")
	}
	return &l, nil
}

// OpenLease reads a lease that was checked before (a stored one).
func OpenLease(raw []byte) (*Lease, peer.ID, error) {
	env, err := openKind(raw, KindLease)
	if err != nil {
		return nil, "", err
	}
	var l Lease
	if err := decodePayload(env, JobVersion, &l, func() int { return l.Version }); err != nil {
		return nil, "", err
	}
	return &l, env.Signer, nil
}

// OpenReceipt reads a receipt's payload and signer, checking only its signature and
// format (CheckReceipt checks it against its lease).
func OpenReceipt(raw []byte) (*Receipt, peer.ID, error) {
	env, err := openKind(raw, KindReceipt)
	if err != nil {
		return nil, "", err
	}
	var r Receipt
	if err := decodePayload(env, JobVersion, &r, func() int { return r.Version }); err != nil {
		return nil, "", err
	}
	if r.Provider != env.signerText {
		return nil, "", fmt.Errorf("%w: receipt names provider %s but is signed by %s", ErrWrongSigner, r.Provider, env.Signer)
	}
	return &r, env.Signer, nil
}

// CheckReceipt opens a usage receipt and checks it against its lease at time now (when the
// receiver got it): signed by the lease's provider, within the lease's period and ended no
// later than now (each give or take MaxClockSkew), for its GPUs at its price, with the
// amount that follows from them.
func CheckReceipt(raw []byte, leaseRaw []byte, l *Lease, now time.Time) (*Receipt, error) {
	env, err := openKind(raw, KindReceipt)
	if err != nil {
		return nil, err
	}
	var r Receipt
	if err := decodePayload(env, JobVersion, &r, func() int { return r.Version }); err != nil {
		return nil, err
	}
	if r.Provider != env.signerText || r.Provider != l.Provider {
		return nil, fmt.Errorf("%w: receipt signed by %s; the lease is with %s", ErrWrongSigner, env.Signer, l.Provider)
	}
	bad := func(format string, args ...any) error { return invalid(KindReceipt, format, args...) }
	switch {
	case r.Job != l.Job || r.Renter != l.Renter || r.Model != l.Model || r.GPUs != l.GPUs || r.Price != l.Price:
		return nil, bad("terms differ from the lease")
	case r.Lease != RecordSHA256(leaseRaw):
		return nil, bad("receipt follows from another lease")
	case r.EndedAt.After(now.Add(MaxClockSkew)):
		return nil, futureErr(KindReceipt, "ends at", r.EndedAt, now)
	case r.StartedAt.Before(l.IssuedAt.Add(-MaxClockSkew)) || r.EndedAt.Before(r.StartedAt) || r.EndedAt.After(l.EndsAt.Add(MaxClockSkew)):
		return nil, bad("period %s - %s outside the lease", r.StartedAt.Format(time.RFC3339), r.EndedAt.Format(time.RFC3339))
	case r.Seconds < 0 || r.Seconds > int64(r.EndedAt.Sub(r.StartedAt)/time.Second)+1 || r.Seconds > int64(l.EndsAt.Sub(l.IssuedAt)/time.Second)+1:
		return nil, bad("%d seconds exceed the period or the lease", r.Seconds)
	case r.Amount != Cost(r.Price, r.GPUs, r.Seconds):
		return nil, bad("amount %d is not price x gpus x seconds / 3600 = %d", r.Amount, Cost(r.Price, r.GPUs, r.Seconds))
	}
	return &r, nil
}

// CheckCountersignature opens a countersignature of the record whose envelope is signed,
// made by want no later than now plus MaxClockSkew.
func CheckCountersignature(raw []byte, signed []byte, of Kind, want peer.ID, now time.Time) (*Countersignature, error) {
	env, err := openKind(raw, KindCountersignature)
	if err != nil {
		return nil, err
	}
	var c Countersignature
	if err := decodePayload(env, JobVersion, &c, func() int { return c.Version }); err != nil {
		return nil, err
	}
	if env.Signer != want || c.Signer != env.signerText {
		return nil, fmt.Errorf("%w: countersigned by %s; expected %s", ErrWrongSigner, env.Signer, want)
	}
	if c.Of != of || c.SHA256 != RecordSHA256(signed) {
		return nil, invalid(KindCountersignature, "it countersigns another record")
	}
	if c.SignedAt.After(now.Add(MaxClockSkew)) {
		return nil, futureErr(KindCountersignature, "signed at", c.SignedAt, now)
	}
	return &c, nil
}

// JobReportProtocol carries a provider's final receipt of a job, with the lease both sides
// signed, to its coordinator: the coordinator scores job completion from them (and pays
// from them, later).
const JobReportProtocol = "/gpunex/job-report/1.0.0"

// JobReport is the frame a provider sends on the job-report stream; the coordinator answers
// with a JSON object: {"ok": "true"} or {"error": why}.
type JobReport struct {
	Lease             []byte `json:"lease"`
	LeaseCountersig   []byte `json:"lease_countersignature"`
	Receipt           []byte `json:"receipt"`
	ReceiptCountersig []byte `json:"receipt_countersignature,omitempty"`
	// Checkpoint is the job's latest usage checkpoint the renter countersigned, with that
	// countersignature: what the provider is paid at least when the renter never
	// countersigns the receipt.
	Checkpoint           []byte `json:"checkpoint,omitempty"`
	CheckpointCountersig []byte `json:"checkpoint_countersignature,omitempty"`
}

const (
	// MaxJobReportFrame caps a job report (each record travels base64-encoded).
	MaxJobReportFrame = 3 * (MaxLeaseSize + MaxReceiptSize + 3*MaxCountersignatureSize + MaxCheckpointSize)
	// MaxJobReportAnswer caps the coordinator's answer.
	MaxJobReportAnswer = 4096
)

// ProviderFault says whether a receipt's reason puts the end of a job on the provider:
// it shut down mid-lease or lost the job. A job that exited, hit its own limits, was
// cancelled by the renter or ran to the end of its lease is not the provider's fault.
func ProviderFault(reason string) bool {
	return reason == "provider shutting down" || strings.HasPrefix(reason, "lost")
}
