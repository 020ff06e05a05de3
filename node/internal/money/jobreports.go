package money

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// ReportJob sends a job's final receipt and its lease to the provider's coordinator,
// which charges the job's escrow hold and counts the outcome. The job records the
// coordinator's acknowledgement; reportLoop retries until there is one.
func (w *Wallet) ReportJob(ctx context.Context, j ledger.Job) {
	ids, err := w.cfg.TrustedCoordinators()
	if err != nil || len(ids) == 0 {
		return
	}
	to := reportTarget(ids, j.Proposal)
	var answer map[string]string
	report := protocol.JobReport{Lease: j.Lease, LeaseCountersig: j.LeaseCountersig, Receipt: j.Receipt, ReceiptCountersig: j.ReceiptCountersig,
		Checkpoint: j.Checkpoint, CheckpointCountersig: j.CheckpointCountersig}
	if err := w.peer.Exchange(ctx, to, protocol.JobReportProtocol, 10*time.Second, report, protocol.MaxJobReportAnswer, &answer); err != nil {
		w.log.Debug("job report not delivered", "job", j.ID, "err", err)
		return
	}
	sentCountersig := len(j.ReceiptCountersig) > 0
	w.ledger.UpdateJob(j.ID, func(j *ledger.Job) error {
		if answer["ok"] == "true" {
			if j.ReportedAt.IsZero() {
				j.ReportedAt = w.clock.Now()
			}
			j.CountersigReported = j.CountersigReported || sentCountersig
		} else if e := answer["error"]; e != "" && !strings.HasPrefix(e, "not recorded") {
			j.ReportError = e // refused for good: retrying cannot help
		}
		return nil
	})
}

// reportTarget is the coordinator a job's report goes to: the one that signed the job's
// escrow hold (it holds the renter's money and charges it), when this provider trusts it;
// else the first trusted coordinator.
func reportTarget(trusted []peer.ID, proposal []byte) peer.ID {
	if c := protocol.HoldCoordinator(proposal); c != "" && slices.Contains(trusted, c) {
		return c
	}
	return trusted[0]
}

// HandleJobReport takes a provider's final receipt on a coordinator. Only a party with
// standing is heard: the job must have an escrow hold here naming the reporting provider
// (holds are placed only for certified providers), the lease must be signed by that
// provider and countersigned by the hold's renter, and every record must be dated no
// later than this coordinator's clock plus protocol.MaxClockSkew. The charge follows the
// rule the records allow (docs/settlement.md); the outcome counts for job completion once
// per job, dated by when it arrived here, at most the lease's end.
func (st *Settlement) HandleJobReport(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	remote := s.Conn().RemotePeer()
	if !st.reportRate.Allow(remote, time.Now()) {
		st.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", "rate_limited").Inc()
		st.peer.Misbehaved(remote)
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
	if e := out.Earning; e != nil {
		st.log.Info("job charged", "job", rec.Job, "provider", remote, "rule", e.Rule, "charge_usdc", e.Charge.String(), "provider_earns_usdc", e.Net.String())
	}
	// A job counted as abandoned at its hold's expiry (abandoned.go) is counted once: a
	// report arriving after that does not add a second outcome.
	if a, err := st.ledger.GetAbandonment(rec.Job); out.Added && err == nil && !a.Counted.IsZero() {
		out.Added = false
	}
	if out.Added {
		st.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindReceipt), "report").Inc()
		halfLife := st.cfg.Coordinator.HalfLife.Duration
		fault := it.Report.ProviderFault
		at := now
		if l, _, err := protocol.OpenLease(r.Lease); err == nil && at.After(l.EndsAt) {
			at = l.EndsAt
		}
		st.ledger.UpdateReliability(remote.String(), func(rs *ledger.ReliabilityState) error {
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
func (st *Settlement) checkReport(remote peer.ID, r protocol.JobReport, now time.Time) (ledger.ReportCharge, *protocol.Receipt, error) {
	if !st.certifiedHere(remote) {
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
		PendingUntil: now.Add(st.cfg.Settlement.DisputeWindow.Duration)}, rec, nil
}
