// Package jobs runs jobs: the provider's job runner (proposals, GPU leases, the sandbox, job
// watchers, receipts) and every node's renter side (propose, follow, cancel, fetch).
//
// One file per concern; a stream's two ends share its file:
//
//   - runner.go, renter.go: the provider's Runner and the renter's Renter, with their Deps.
//   - negotiation.go: the job stream, both ends, in the order a job goes through them: the
//     renter's proposal (ProposeJob) with its escrow hold, the provider's decision
//     (HandleJob: rate limit, proposal checks, policy, escrow check, lease), the lease
//     countersigned, the image archive sent, the start awaited; the frames of both job
//     streams. placement.go: a job asked for by model, placed on the best offer.
//   - gpuslots.go: the GPU slots: leases by model, delisted and lost GPUs, cleaning
//     between renters, hold after a restart.
//   - images.go: a job's image received or pulled, the per-renter cache, pruning.
//   - lifecycle.go: a job's folder, its start in the sandbox, its watch, its end and
//     receipt; Reconcile after a restart; StopAll.
//   - control.go: the job-control stream (HandleControl, and the renter's control): one
//     request per stream, dispatched by op; status and cancel. A new per-job request
//     starts here.
//   - metering.go: usage checkpoints, both ends; the unmetered stop; abandoned jobs.
//   - output.go: logs and output, both ends; the retention cleanup.
//   - receipts.go: the renter's countersignature or dispute of a final receipt.
//   - holdrelease.go: the answer to a coordinator releasing a job's hold.
//   - jobs.go: the job view and the stored records both sides read back.
package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Jobs: a renter proposes, the provider answers with a lease or a reason, the renter
// countersigns, sends or names the image, and the provider runs it in its sandbox
// (docs/protocols/jobs.md).

const (
	jobStepTimeout = 30 * time.Second
)

// ErrRefused wraps a provider's refusal of a proposal; its text is the reason.
var ErrRefused = errors.New("proposal refused")

// viewJob is a job as the API shows it; now is when a running job's seconds and cost are
// counted to.
func viewJob(j ledger.Job, now time.Time) api.JobView {
	v := api.JobView{JobStatus: protocol.JobStatus{ID: j.ID, Side: j.Side, Peer: j.Peer, State: j.State, Error: j.Error, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt,
		ExitCode: j.ExitCode, ExitReason: j.ExitReason, GPUUUIDs: j.GPUs, Receipt: j.Receipt, Countersign: len(j.ReceiptCountersig) > 0,
		MeteredSeconds: j.CheckpointSeconds, Disputed: len(j.Dispute) > 0}}
	if p, err := openProposal(j.Proposal); err == nil {
		v.Model, v.GPUs, v.Ports = p.Model, p.GPUs, p.Ports
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
		v.Seconds = int64(now.Sub(j.StartedAt) / time.Second)
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
		return nil, api.ErrNotFound
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

func jobErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

func decodeJSONStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// wireStatus is a job's view as the job streams carry it.
func wireStatus(v api.JobView) *protocol.JobStatus {
	st := v.JobStatus
	return &st
}
