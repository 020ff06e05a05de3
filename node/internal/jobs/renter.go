package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// Offers are the offers a renter knows and finds (the offers subsystem's catalogue).
type Offers interface {
	// Get returns the held offer of a provider and when it was last received.
	Get(p peer.ID) (*protocol.SignedOffer, time.Time)
	// Search finds offers, asking the network for more.
	Search(ctx context.Context, f api.SearchFilter) ([]api.OfferRow, error)
}

// Escrow is the renter's side of escrow holds (the money subsystem).
type Escrow interface {
	// RequestHold asks the coordinator to set the proposal's maximum cost aside and
	// returns the signed hold.
	RequestHold(ctx context.Context, p protocol.Proposal, coordinator peer.ID) ([]byte, error)
	// ReleaseHold asks for a job's hold back now, once.
	ReleaseHold(ctx context.Context, job, coordinator string) (api.BalanceView, error)
	// ReleaseAfterFailure asks for a failed proposal's hold back, a few times.
	ReleaseAfterFailure(job string, coordinator peer.ID)
	// Dispute sends the job's signed dispute of its receipt to the coordinator holding
	// its escrow.
	Dispute(ctx context.Context, j ledger.Job) error
	// ReportAbandoned sends the renter's account of a job whose lease ended with no
	// receipt (its lease and latest checkpoint, countersigned) to that coordinator.
	ReportAbandoned(ctx context.Context, j ledger.Job) error
}

// RenterDeps are what a node's renter side needs.
type RenterDeps struct {
	// Peer gives the node's ID and key (proposals and countersignatures are signed with
	// it) and reaches providers.
	Peer    *p2p.Peer
	Ledger  *ledger.JobStore
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	Offers  Offers
	Escrow  Escrow
	// CheckpointInterval is how often Meter asks for each running job's checkpoint.
	CheckpointInterval time.Duration
}

// Renter is a node's side of the jobs it rents: it proposes them, follows and cancels them,
// takes their receipts and fetches their output. Every role has one; it also lists and
// shows the jobs a provider runs.
type Renter struct {
	peer    *p2p.Peer
	ledger  *ledger.JobStore
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	offers  Offers
	escrow  Escrow
	// interval is how often the meter asks for checkpoints.
	interval time.Duration
	// inputs are the inputs of the requests being proposed, and their uploads
	// (inputsend.go).
	inputs *renterInputs
}

// NewRenter returns a node's renter side.
func NewRenter(d RenterDeps) *Renter {
	interval := d.CheckpointInterval
	if interval <= 0 || interval > protocol.CheckpointInterval {
		interval = protocol.CheckpointInterval
	}
	return &Renter{peer: d.Peer, ledger: d.Ledger, clock: d.Clock, log: d.Log, metrics: d.Metrics, offers: d.Offers, escrow: d.Escrow, interval: interval,
		inputs: newRenterInputs()}
}

// renterJob returns a job this node rented.
func (r *Renter) renterJob(id string) (ledger.Job, error) {
	j, err := r.ledger.GetJob(id)
	if errors.Is(err, ledger.ErrNotFound) {
		return j, fmt.Errorf("%w: no job %s", api.ErrNotFound, id)
	}
	return j, err
}

// Jobs lists the jobs this node runs or rented, newest first.
func (r *Renter) Jobs() ([]api.JobView, error) {
	js, err := r.ledger.Jobs()
	if err != nil {
		return nil, err
	}
	out := []api.JobView{}
	for _, j := range js {
		if j.State != ledger.JobReleased { // a job ID whose hold was released: it never ran
			out = append(out, r.withInput(viewJob(j, r.clock.Now())))
		}
	}
	return out, nil
}
