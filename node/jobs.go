package node

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// Jobs: a renter proposes, the provider answers with a lease or a reason, the renter
// countersigns, sends or names the image, and the provider runs it in its sandbox
// (docs/protocols/jobs.md).

// jobMsg is one frame of the job and job-control streams.
type jobMsg struct {
	Type string `json:"type"`
	// propose, accept (lease), countersign, receipt, receipt-countersign: a signed record.
	Record []byte `json:"record,omitempty"`
	// reject and error: why. counter: the price the provider would take.
	Reason string             `json:"reason,omitempty"`
	Price  protocol.MicroUSDC `json:"price_micro_usdc_per_gpu_hour,omitempty"`
	// control requests.
	Op     string `json:"op,omitempty"` // status, logs, cancel, fetch
	Job    string `json:"job,omitempty"`
	Follow bool   `json:"follow,omitempty"`
	// log: a chunk of the job's output.
	Data []byte `json:"data,omitempty"`
	// status and end.
	Status *JobView `json:"status,omitempty"`
	// accept: the provider already holds the proposal's image archive; the renter does
	// not send it.
	ImageCached bool `json:"image_cached,omitempty"`
}

const (
	maxJobFrame    = protocol.MaxProposalSize + 1024
	jobStepTimeout = 30 * time.Second
)

// ErrJobRefused wraps a provider's refusal of a proposal; its text is the reason.
var ErrJobRefused = errors.New("proposal refused")

// JobView is a job as the API and the control stream show it.
type JobView struct {
	ID          string             `json:"id"`
	Side        string             `json:"side"`
	Peer        string             `json:"peer"`
	State       string             `json:"state"`
	Error       string             `json:"error,omitempty"`
	Model       string             `json:"model"`
	GPUs        int                `json:"gpus"`
	GPUUUIDs    []string           `json:"gpu_uuids,omitempty"`
	Price       protocol.MicroUSDC `json:"price_micro_usdc_per_gpu_hour"`
	PriceUSDC   string             `json:"price_usdc_per_gpu_hour"`
	Image       string             `json:"image"`
	CreatedAt   time.Time          `json:"created_at"`
	StartedAt   time.Time          `json:"started_at,omitzero"`
	EndsAt      time.Time          `json:"ends_at,omitzero"`
	ExitCode    int                `json:"exit_code"`
	ExitReason  string             `json:"exit_reason,omitempty"`
	Seconds     int64              `json:"seconds"`
	Cost        protocol.MicroUSDC `json:"cost_micro_usdc"`
	CostUSDC    string             `json:"cost_usdc"`
	Receipt     []byte             `json:"receipt,omitempty"`
	Countersign bool               `json:"receipt_countersigned"`
}

func viewJob(j ledger.Job) JobView {
	v := JobView{ID: j.ID, Side: j.Side, Peer: j.Peer, State: j.State, Error: j.Error, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt,
		ExitCode: j.ExitCode, ExitReason: j.ExitReason, GPUUUIDs: j.GPUs, Receipt: j.Receipt, Countersign: len(j.ReceiptCountersig) > 0}
	if p, err := openProposal(j.Proposal); err == nil {
		v.Model, v.GPUs = p.Model, p.GPUs
		v.Image = p.Image.Ref
		if v.Image == "" {
			v.Image = "archive sha256:" + p.Image.ArchiveSHA256[:12]
		}
	}
	if l, _, err := protocol.OpenLease(j.Lease); err == nil {
		v.Price, v.EndsAt = l.Price, l.EndsAt
	}
	if r, err := openReceipt(j.Receipt); err == nil {
		v.Seconds, v.Cost = r.Seconds, r.Amount
	} else if !j.StartedAt.IsZero() && j.State == ledger.JobRunning {
		v.Seconds = int64(time.Since(j.StartedAt) / time.Second)
		v.Cost = protocol.Cost(v.Price, v.GPUs, v.Seconds)
	}
	v.PriceUSDC, v.CostUSDC = v.Price.String(), v.Cost.String()
	return v
}

// openProposal reads a stored proposal (checked when it arrived).
func openProposal(raw []byte) (*protocol.Proposal, error) {
	env, err := protocol.Open(raw)
	if err != nil {
		return nil, err
	}
	var p protocol.Proposal
	if err := decodeJSONStrict(env.Payload, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// openReceipt reads a stored receipt (checked when it was made or received).
func openReceipt(raw []byte) (*protocol.Receipt, error) {
	if len(raw) == 0 {
		return nil, ErrNotFound
	}
	env, err := protocol.Open(raw)
	if err != nil {
		return nil, err
	}
	var r protocol.Receipt
	if err := decodeJSONStrict(env.Payload, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func sendMsg(w io.Writer, m jobMsg) error { return writeJSONFrame(w, m) }

func readMsg(r *bufio.Reader) (jobMsg, error) {
	var m jobMsg
	err := readJSONFrame(r, maxJobFrame, &m)
	return m, err
}

// hashingReader computes the SHA-256 of what is read through it.
type hashingReader struct {
	r io.Reader
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func newHashingReader(r io.Reader) *hashingReader { return &hashingReader{r: r, h: sha256.New()} }

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}

func (h *hashingReader) sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

// fileSHA256 hashes a file and returns its hex digest and size.
func fileSHA256(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

func jobErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrJobRefused, fmt.Sprintf(format, args...))
}

func decodeJSONStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// RunJobLoggerIfInvoked turns the process into a job's log writer when containerd's shim
// started it as one (sandbox.RunLoggerIfInvoked), and returns at once otherwise. The
// gpunex binary calls it first thing: the shim runs that binary to write job logs.
func RunJobLoggerIfInvoked() { sandbox.RunLoggerIfInvoked() }
