package money

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// Charges: a provider's job report turns the job's escrow hold into a charge and the
// provider's earning, by the rule its records allow (docs/settlement.md, "What a job is
// charged"); reports arriving together share one ledger transaction.

// Misbehaviour is where a peer that went past its limits is reported (a *p2p.Peer).
type Misbehaviour interface {
	Misbehaved(id peer.ID) bool
}

// charges hears job reports and charges their holds.
type charges struct {
	ledger   Stores
	clock    clock.Clock
	log      *slog.Logger
	metrics  *metrics.Metrics
	offers   Offers
	peers    Misbehaviour
	halfLife time.Duration // of the providers' completion score
	// disputeWindow is how long an uncountersigned receipt waits before the checkpoint
	// rule charges it.
	disputeWindow time.Duration
	// queue feeds the group-commit loop that records job reports in batches.
	queue chan chargeRequest
	// reportRate limits job reports per provider.
	reportRate *p2p.PeerRate
	// equivocations hears of reports of another receipt than the one their renter disputes.
	equivocations *equivocations
}

// chargeRequest is a checked job report waiting for the group commit.
type chargeRequest struct {
	item ledger.ReportCharge
	done chan chargeResult
}

type chargeResult struct {
	out ledger.ReportOutcome
	err error
}

// charge records a job report and charges its hold, through the group commit: reports
// arriving together share one ledger transaction.
func (s *charges) charge(ctx context.Context, it ledger.ReportCharge) (ledger.ReportOutcome, error) {
	req := chargeRequest{item: it, done: make(chan chargeResult, 1)}
	select {
	case s.queue <- req:
	case <-ctx.Done():
		return ledger.ReportOutcome{}, ctx.Err()
	}
	select {
	case r := <-req.done:
		return r.out, r.err
	case <-ctx.Done():
		return ledger.ReportOutcome{}, ctx.Err()
	}
}

// commitLoop drains the charges channel, up to 1,000 reports per ledger transaction.
func (s *charges) commitLoop(ctx context.Context) {
	for {
		var batch []chargeRequest
		select {
		case <-ctx.Done():
			return
		case r := <-s.queue:
			batch = append(batch, r)
		}
	fill:
		for len(batch) < 1000 {
			select {
			case r := <-s.queue:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		items := make([]ledger.ReportCharge, len(batch))
		for i, r := range batch {
			items[i] = r.item
		}
		outs, err := s.ledger.Escrow.ChargeReports(items)
		for i, r := range batch {
			if i < len(outs) {
				r.done <- chargeResult{out: outs[i]}
			} else {
				r.done <- chargeResult{err: err}
			}
		}
	}
}

// chargeDue charges the receipts whose dispute window has passed (the checkpoint rule).
func (s *charges) chargeDue() {
	es, err := s.ledger.Escrow.ChargeDue(s.clock.Now())
	if err != nil {
		s.log.Warn("charging receipts past their dispute window", "err", err)
	}
	for _, e := range es {
		s.log.Info("job charged", "job", e.Job, "provider", e.Provider, "rule", e.Rule, "charge_usdc", e.Charge.String(), "provider_earns_usdc", e.Net.String())
	}
}

// dueCheck is how often receipts past their dispute window are looked for.
func dueCheck(window time.Duration) time.Duration {
	return min(max(window/8, time.Second), time.Minute)
}

// HandleJobReport takes a provider's final receipt on a coordinator. Only a party with
// standing is heard: the job must have an escrow hold here naming the reporting provider
// (holds are placed only for certified providers), the lease must be signed by that
// provider and countersigned by the hold's renter, and every record must be dated no
// later than this coordinator's clock plus protocol.MaxClockSkew. The charge follows the
// rule the records allow (docs/settlement.md); the outcome counts for job completion once
// per job, dated by when it arrived here, at most the lease's end.
func (st *charges) HandleJobReport(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	remote := s.Conn().RemotePeer()
	if !st.reportRate.Allow(remote, time.Now()) {
		st.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", "rate_limited").Inc()
		st.peers.Misbehaved(remote)
		protocol.WriteJSONFrame(s, map[string]string{"error": "not recorded: more than " + strconv.Itoa(reportsPerMinute) + " reports in a minute: slow down"})
		return
	}
	var r protocol.JobReport
	err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxJobReportFrame, &r)
	var it ledger.ReportCharge
	var rec *protocol.Receipt
	now := st.clock.Now()
	if err == nil {
		it, rec, err = st.checkReport(remote, r, now)
	}
	if err != nil {
		st.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", protocol.Reason(err)).Inc()
		protocol.WriteJSONFrame(s, map[string]string{"error": err.Error()})
		return
	}
	out, err := st.charge(context.Background(), it)
	if err != nil {
		protocol.WriteJSONFrame(s, map[string]string{"error": "not recorded: " + err.Error()})
		return
	}
	if out.Refused != "" {
		st.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", "no_standing").Inc()
		protocol.WriteJSONFrame(s, map[string]string{"error": out.Refused})
		return
	}
	if out.Equivocation {
		st.equivocations.found(rec.Job)
	}
	if e := out.Earning; e != nil {
		st.log.Info("job charged", "job", rec.Job, "provider", remote, "rule", e.Rule, "charge_usdc", e.Charge.String(), "provider_earns_usdc", e.Net.String())
	}
	// A job counted as abandoned at its hold's expiry (abandoned.go) is counted once: a
	// report arriving after that does not add a second outcome.
	if a, err := st.ledger.Escrow.GetAbandonment(rec.Job); out.Added && err == nil && !a.Counted.IsZero() {
		out.Added = false
	}
	if out.Added {
		st.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindReceipt), "report").Inc()
		halfLife := st.halfLife
		fault := it.Report.ProviderFault
		at := now
		if l, _, err := protocol.OpenLease(r.Lease); err == nil && at.After(l.EndsAt) {
			at = l.EndsAt
		}
		st.ledger.Reliability.UpdateReliability(remote.String(), func(rs *ledger.ReliabilityState) error {
			good := 1.0
			if fault {
				good = 0
				rs.AddEvent(protocol.WhyInterrupted(rec.Job, rec.Reason))
			}
			rs.Reliability.Completion.Add(at, good, halfLife)
			return nil
		})
	}
	answer := map[string]string{"ok": "true"}
	if out.Pending {
		answer["pending"] = "true"
	}
	protocol.WriteJSONFrame(s, answer)
}

// checkReport checks a job report's records at now and returns the charge they make.
func (st *charges) checkReport(remote peer.ID, r protocol.JobReport, now time.Time) (ledger.ReportCharge, *protocol.Receipt, error) {
	if !certifiedHere(st.offers, remote) {
		// "not recorded": the provider sends it again (its offer may not have reached this
		// coordinator yet); a stranger's retries cost it its own rate.
		return ledger.ReportCharge{}, nil, fmt.Errorf("not recorded: %w: %s has no certified offer at this coordinator, or its offer has not reached it yet", protocol.ErrNotCertified, remote)
	}
	l, signer, err := protocol.OpenLease(r.Lease)
	if err != nil {
		return ledger.ReportCharge{}, nil, err
	}
	if signer != remote {
		return ledger.ReportCharge{}, nil, fmt.Errorf("%w: lease signed by %s, reported by %s", protocol.ErrWrongSigner, signer, remote)
	}
	renter, err := peer.Decode(l.Renter)
	if err != nil {
		return ledger.ReportCharge{}, nil, fmt.Errorf("%w: lease renter %q", protocol.ErrInvalid, l.Renter)
	}
	if _, err := protocol.CheckCountersignature(r.LeaseCountersig, r.Lease, protocol.KindLease, renter, now); err != nil {
		return ledger.ReportCharge{}, nil, err
	}
	if err := protocol.CheckLeaseTerms(l, now); err != nil {
		return ledger.ReportCharge{}, nil, err
	}
	rec, err := protocol.CheckReceipt(r.Receipt, r.Lease, l, now)
	if err != nil {
		return ledger.ReportCharge{}, nil, err
	}
	countersigned := false
	if len(r.ReceiptCountersig) > 0 {
		if _, err := protocol.CheckCountersignature(r.ReceiptCountersig, r.Receipt, protocol.KindReceipt, renter, now); err != nil {
			return ledger.ReportCharge{}, nil, fmt.Errorf("the renter's countersignature of the receipt: %w", err)
		}
		countersigned = true
	}
	var cpSeconds int64
	if len(r.Checkpoint) > 0 {
		cp, err := protocol.CheckCheckpoint(r.Checkpoint, r.Lease, l, now)
		if err != nil {
			return ledger.ReportCharge{}, nil, fmt.Errorf("checkpoint: %w", err)
		}
		if _, err := protocol.CheckCountersignature(r.CheckpointCountersig, r.Checkpoint, protocol.KindCheckpoint, renter, now); err != nil {
			return ledger.ReportCharge{}, nil, fmt.Errorf("the renter's countersignature of the checkpoint: %w", err)
		}
		cpSeconds = cp.Seconds
	}
	report := ledger.JobReport{Job: rec.Job, Provider: remote.String(), ReceivedAt: now,
		Lease: r.Lease, LeaseCountersig: r.LeaseCountersig, Receipt: r.Receipt, ReceiptCountersig: r.ReceiptCountersig,
		ProviderFault: protocol.ProviderFault(rec.Reason)}
	if cpSeconds > 0 || len(r.Checkpoint) > 0 {
		report.Checkpoint, report.CheckpointCountersig, report.CheckpointSeconds = r.Checkpoint, r.CheckpointCountersig, cpSeconds
	}
	return ledger.ReportCharge{Report: report,
		Receipt: protocol.RecordSHA256(r.Receipt), Amount: rec.Amount, Model: rec.Model, GPUs: rec.GPUs,
		Seconds: rec.Seconds, EndedAt: rec.EndedAt, Renter: rec.Renter,
		Countersigned: countersigned, CheckpointAmount: protocol.CheckpointCharge(rec, cpSeconds),
		PendingUntil: now.Add(st.disputeWindow)}, rec, nil
}
