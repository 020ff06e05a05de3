package money

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/protocol"
)

// Disputes: a renter that does not countersign a final receipt signs what it observed
// instead and sends it to the coordinator holding the job's escrow; the hold then waits
// for the coordinator's decision (docs/settlement.md, "What a job is charged").

// Dispute sends a renter's signed dispute of a receipt to the coordinator that signed the
// job's hold.
func (w *Wallet) Dispute(ctx context.Context, j ledger.Job) error {
	c := protocol.HoldCoordinator(j.Proposal)
	if c == "" {
		return errors.New("the job has no escrow hold: there is no coordinator to dispute with")
	}
	_, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "dispute", Job: j.ID, Dispute: j.Dispute, Receipt: j.Receipt})
	return err
}

// disputes takes the renters' disputes and the coordinator's decisions.
type disputes struct {
	id      peer.ID
	key     crypto.PrivKey // signs the decisions
	ledger  Stores
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
}

// open takes a renter's dispute on the coordinator: the receipt must be signed by
// the provider of the job's hold, and the dispute by its renter, the sender.
func (s *disputes) open(remote peer.ID, req protocol.WalletRequest) error {
	h, err := s.ledger.Escrow.GetHold(req.Job)
	if err != nil {
		return fmt.Errorf("%w: job %s has no escrow hold here", api.ErrNotFound, req.Job)
	}
	if h.Renter != remote.String() {
		return fmt.Errorf("%w: job %s is not yours to dispute", api.ErrInvalid, req.Job)
	}
	rec, signer, err := protocol.OpenReceipt(req.Receipt)
	if err != nil {
		return api.Invalid(err)
	}
	if signer.String() != h.Provider || rec.Job != h.Job || rec.Renter != h.Renter {
		return fmt.Errorf("%w: the receipt is not the job's provider's receipt of this job", api.ErrInvalid)
	}
	now := s.clock.Now()
	d, err := protocol.CheckDispute(req.Dispute, req.Receipt, rec, now)
	if err != nil {
		s.metrics.RecordsRejected.WithLabelValues(string(protocol.KindDispute), "wallet", protocol.Reason(err)).Inc()
		return api.Invalid(err)
	}
	stored, err := s.ledger.Escrow.OpenDispute(ledger.Dispute{Job: h.Job, Renter: h.Renter, Provider: h.Provider, ReceivedAt: now,
		Record: req.Dispute, Receipt: req.Receipt, Amount: d.Amount, Claimed: rec.Amount, Reason: d.Reason})
	if errors.Is(err, ledger.ErrDisputeClosed) {
		return api.Conflict(err)
	}
	if err == nil && stored.ReceivedAt.Equal(now) {
		s.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindDispute), "wallet").Inc()
		s.log.Warn("job disputed by its renter", "job", h.Job, "renter", h.Renter, "provider", h.Provider,
			"claimed_usdc", rec.Amount.String(), "renter_says_usdc", d.Amount.String(), "reason", d.Reason)
	}
	return err
}

func disputeView(d ledger.Dispute) api.DisputeView {
	return api.DisputeView{Job: d.Job, Renter: d.Renter, Provider: d.Provider, ReceivedAt: d.ReceivedAt, State: d.State,
		ClaimedUSDC: d.Claimed.String(), RenterSaysUSDC: d.Amount.String(), Reason: d.Reason, DecidedAt: d.DecidedAt,
		ChargedUSDC: d.Charged.String(), Dispute: d.Record, Receipt: d.Receipt, Decision: d.Decision}
}

// Disputes lists the disputes, open ones only unless all is set.
func (s *disputes) Disputes(all bool) ([]api.DisputeView, error) {
	ds, err := s.ledger.Escrow.Disputes(!all)
	out := []api.DisputeView{}
	for _, d := range ds {
		v := disputeView(d)
		if f, err := s.floor(d); err == nil {
			v.FloorUSDC = f.String()
		}
		out = append(out, v)
	}
	return out, err
}

// Dispute returns one dispute.
func (s *disputes) Dispute(job string) (api.DisputeView, error) {
	d, err := s.ledger.Escrow.GetDispute(job)
	if errors.Is(err, ledger.ErrNotFound) {
		return api.DisputeView{}, fmt.Errorf("%w: no dispute of job %s", api.ErrNotFound, job)
	}
	v := disputeView(d)
	if f, err := s.floor(d); err == nil {
		v.FloorUSDC = f.String()
	}
	return v, err
}

// floor is the least a decision may charge: what the renter's countersigned
// checkpoints prove (0 while the provider has not reported the job).
func (s *disputes) floor(d ledger.Dispute) (protocol.MicroUSDC, error) {
	rep, err := s.ledger.Escrow.GetJobReport(d.Job, d.Provider)
	if errors.Is(err, ledger.ErrNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	rec, _, err := protocol.OpenReceipt(rep.Receipt)
	if err != nil {
		return 0, err
	}
	return protocol.Cost(rec.Price, rec.GPUs, min(rep.CheckpointSeconds, rec.Seconds)), nil
}

// ResolveDispute decides a dispute: the job is charged the amount decided ("provider":
// the receipt's amount; "renter": what the renter said, at least what its checkpoints
// prove; or an amount in USDC between those), under a decision the coordinator signs and
// publishes with the batch that pays it.
func (s *disputes) ResolveDispute(job string, req api.ResolveRequest) (api.DisputeView, error) {
	d, err := s.ledger.Escrow.GetDispute(job)
	if errors.Is(err, ledger.ErrNotFound) {
		return api.DisputeView{}, fmt.Errorf("%w: no dispute of job %s", api.ErrNotFound, job)
	} else if err != nil {
		return api.DisputeView{}, err
	}
	floor, err := s.floor(d)
	if err != nil {
		return api.DisputeView{}, err
	}
	rep, repErr := s.ledger.Escrow.GetJobReport(d.Job, d.Provider)
	var amount protocol.MicroUSDC
	switch {
	case req.For == "provider" && repErr == nil:
		amount = rep.Terms.Amount
	case req.For == "provider":
		return api.DisputeView{}, api.Conflict(fmt.Errorf("the provider has not reported job %s: nothing to charge yet", job))
	case req.For == "renter":
		amount = max(d.Amount, floor)
		if repErr != nil {
			amount = 0
		}
	case req.For == "" && req.USDC != "":
		if amount, err = protocol.ParseUSDC(req.USDC); err != nil {
			return api.DisputeView{}, api.Invalid(err)
		}
		if repErr == nil && (amount < floor || amount > rep.Terms.Amount) {
			return api.DisputeView{}, api.Invalid(fmt.Errorf("decide between %s USDC (the renter's countersigned checkpoints) and %s USDC (the receipt)", floor, rep.Terms.Amount))
		}
	default:
		return api.DisputeView{}, api.Invalid(errors.New("decide for the provider, for the renter, or an amount in USDC"))
	}
	var decision []byte
	if repErr == nil {
		dec := protocol.Decision{Version: protocol.JobVersion, Coordinator: s.id.String(), Job: job, Receipt: protocol.RecordSHA256(rep.Receipt),
			Amount: amount, Note: req.Note, DecidedAt: s.clock.Now().UTC()}
		if decision, err = protocol.Seal(protocol.KindDecision, dec, s.key); err != nil {
			return api.DisputeView{}, api.Invalid(err)
		}
	}
	d, e, err := s.ledger.Escrow.DecideDispute(job, decision, amount, s.clock.Now())
	if errors.Is(err, ledger.ErrDisputeClosed) {
		return api.DisputeView{}, api.Conflict(err)
	} else if err != nil {
		return api.DisputeView{}, err
	}
	if e != nil {
		s.log.Info("dispute decided", "job", job, "rule", e.Rule, "charge_usdc", e.Charge.String(), "provider_earns_usdc", e.Net.String())
	} else {
		s.log.Info("dispute decided: hold returned to the renter", "job", job)
	}
	return disputeView(d), nil
}
