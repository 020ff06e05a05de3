package money

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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
	id            peer.ID
	key           crypto.PrivKey // signs the decisions
	ledger        Stores
	clock         clock.Clock
	log           *slog.Logger
	metrics       *metrics.Metrics
	equivocations *equivocations
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
		if stored.Equivocation {
			s.equivocations.found(h.Job)
		}
	}
	return err
}

func disputeView(d ledger.Dispute) api.DisputeView {
	return api.DisputeView{Job: d.Job, Renter: d.Renter, Provider: d.Provider, ReceivedAt: d.ReceivedAt, State: d.State,
		ClaimedUSDC: d.Claimed.String(), RenterSaysUSDC: d.Amount.String(), Reason: d.Reason, DecidedAt: d.DecidedAt,
		ChargedUSDC: d.Charged.String(), Dispute: d.Record, Receipt: d.Receipt, Decision: d.Decision, Equivocation: d.Equivocation}
}

// view is a dispute with what the provider's report adds: the reported receipt's amount
// and the floor.
func (s *disputes) view(d ledger.Dispute) (api.DisputeView, error) {
	v := disputeView(d)
	if h, err := s.ledger.Escrow.GetHold(d.Job); err == nil {
		v.HoldExpiresAt = h.ExpiresAt
	}
	b, err := s.bounds(d)
	if err != nil {
		return v, err
	}
	v.FloorUSDC = b.floor.String()
	if b.reported {
		v.ReportedUSDC = b.report.Terms.Amount.String()
	}
	return v, nil
}

// Disputes lists the disputes, open ones only unless all is set.
func (s *disputes) Disputes(all bool) ([]api.DisputeView, error) {
	ds, err := s.ledger.Escrow.Disputes(!all)
	out := []api.DisputeView{}
	for _, d := range ds {
		v, _ := s.view(d)
		out = append(out, v)
	}
	return out, err
}

// Dispute returns one dispute.
func (s *disputes) Dispute(job string) (api.DisputeView, error) {
	d, err := s.ledger.Escrow.GetDispute(job)
	if errors.Is(err, ledger.ErrNotFound) {
		return api.DisputeView{}, fmt.Errorf("%w: no dispute of job %s", api.ErrNotFound, job)
	} else if err != nil {
		return api.DisputeView{}, err
	}
	return s.view(d)
}

// decisionBounds are what a decision of a dispute may charge, from the provider's report.
type decisionBounds struct {
	report   ledger.JobReport
	reported bool // the provider has reported the job; else only 0 may be decided
	// floor is what the renter's countersigned checkpoints prove; cap the most a decision
	// charges: the reported receipt's amount, or the smaller receipt when the provider
	// signed two.
	floor, cap protocol.MicroUSDC
}

// bounds reads the provider's report of a disputed job: 0 and 0 while it has not reported.
func (s *disputes) bounds(d ledger.Dispute) (decisionBounds, error) {
	rep, err := s.ledger.Escrow.GetJobReport(d.Job, d.Provider)
	if errors.Is(err, ledger.ErrNotFound) {
		return decisionBounds{}, nil
	} else if err != nil {
		return decisionBounds{}, err
	}
	rec, _, err := protocol.OpenReceipt(rep.Receipt)
	if err != nil {
		return decisionBounds{}, err
	}
	c := d.Cap(rep)
	floor := protocol.Cost(rec.Price, rec.GPUs, min(rep.CheckpointSeconds, rec.Seconds))
	return decisionBounds{report: rep, reported: true, floor: min(floor, c), cap: c}, nil
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
	b, err := s.bounds(d)
	if err != nil {
		return api.DisputeView{}, err
	}
	if !b.reported && d.State == ledger.DisputeOpen {
		return api.DisputeView{}, api.Conflict(s.notReported(d))
	}
	var amount protocol.MicroUSDC
	switch {
	case req.For == "provider":
		amount = b.cap
	case req.For == "renter":
		amount = min(max(d.Amount, b.floor), b.cap)
	case req.For == "" && req.USDC != "":
		if amount, err = protocol.ParseUSDC(req.USDC); err != nil {
			return api.DisputeView{}, api.Invalid(err)
		}
		if amount < b.floor || amount > b.cap {
			return api.DisputeView{}, api.Invalid(fmt.Errorf("decide between %s USDC (the renter's countersigned checkpoints) and %s USDC (%s)", b.floor, b.cap, capWhat(d)))
		}
	default:
		return api.DisputeView{}, api.Invalid(errors.New("decide for the provider, for the renter, or an amount in USDC"))
	}
	dec := protocol.Decision{Version: protocol.JobVersion, Coordinator: s.id.String(), Job: job, Receipt: protocol.RecordSHA256(b.report.Receipt),
		Amount: amount, Note: req.Note, DecidedAt: s.clock.Now().UTC()}
	decision, err := protocol.Seal(protocol.KindDecision, dec, s.key)
	if err != nil {
		return api.DisputeView{}, api.Invalid(err)
	}
	d, e, err := s.ledger.Escrow.DecideDispute(job, decision, amount, s.clock.Now())
	switch {
	case errors.Is(err, ledger.ErrDisputeClosed):
		return api.DisputeView{}, api.Conflict(err)
	case errors.Is(err, ledger.ErrNotReported):
		return api.DisputeView{}, api.Conflict(s.notReported(d))
	case err != nil:
		return api.DisputeView{}, err
	}
	s.log.Info("dispute decided", "job", job, "rule", e.Rule, "charge_usdc", e.Charge.String(), "provider_earns_usdc", e.Net.String())
	return s.view(d)
}

// notReported is why a dispute the provider has not reported cannot be decided yet.
func (s *disputes) notReported(d ledger.Dispute) error {
	until := "its expiry"
	if h, err := s.ledger.Escrow.GetHold(d.Job); err == nil {
		until = h.ExpiresAt.UTC().Format(time.RFC1123)
	}
	return fmt.Errorf("the provider has not reported job %s yet: wait for its report, and decide then (at least what the renter's countersigned checkpoints prove); without a report the hold returns to the renter at %s", d.Job, until)
}

// capWhat says what bounds a decision from above.
func capWhat(d ledger.Dispute) string {
	if d.Equivocation {
		return "the smaller of the provider's two receipts"
	}
	return "the receipt"
}

// equivocations deals with a provider caught signing two receipts for one job
// (ledger.Dispute.Equivocation): the decision charges at most the smaller; here the
// coordinator's operator is told, and the provider's completion counts a failed job.
type equivocations struct {
	ledger   Stores
	clock    clock.Clock
	log      *slog.Logger
	alert    func(key, subject, body string) // nil: no alert
	halfLife time.Duration                   // of the providers' completion score
}

// whyEquivocated is the reliability event of a provider that signed two receipts.
func whyEquivocated(job string) string {
	return fmt.Sprintf("job %s: two receipts signed for one job", job)
}

// found records that the provider of job's dispute signed two receipts for it.
func (s *equivocations) found(job string) {
	d, err := s.ledger.Escrow.GetDispute(job)
	if err != nil {
		return
	}
	rep, err := s.ledger.Escrow.GetJobReport(job, d.Provider)
	if err != nil {
		return
	}
	now := s.clock.Now()
	s.log.Warn("a provider signed two receipts for one job: a decision charges at most the smaller", "job", job, "provider", d.Provider,
		"disputed_usdc", d.Claimed.String(), "reported_usdc", rep.Terms.Amount.String())
	s.ledger.Reliability.UpdateReliability(d.Provider, func(rs *ledger.ReliabilityState) error {
		rs.AddEvent(whyEquivocated(job))
		rs.Reliability.Completion.Add(now, 0, s.halfLife)
		return nil
	})
	if s.alert != nil {
		s.alert("equivocation", fmt.Sprintf("provider signed two receipts for job %s", job),
			fmt.Sprintf("Provider %s handed renter %s a receipt of %s USDC for job %s and reported one of %s USDC. The renter disputes it: a decision charges at most %s USDC (gpunex coordinator disputes show %s). Two receipts for one job are its own signed proof of cheating: consider revoking its certificate.",
				d.Provider, d.Renter, d.Claimed, job, rep.Terms.Amount, d.Cap(rep), job))
	}
}
