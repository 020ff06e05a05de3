package money

import (
	"bufio"
	"context"
	"encoding/json"
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
	report := protocol.JobReport{Lease: j.Lease, LeaseCountersig: j.LeaseCountersig, Receipt: j.Receipt, ReceiptCountersig: j.ReceiptCountersig}
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
	if c := holdCoordinator(proposal); c != "" && slices.Contains(trusted, c) {
		return c
	}
	return trusted[0]
}

// holdCoordinator names the coordinator that signed the escrow hold a proposal carries
// ("" without one).
func holdCoordinator(proposal []byte) peer.ID {
	env, err := protocol.Open(proposal)
	if err != nil {
		return ""
	}
	var p protocol.Proposal
	if json.Unmarshal(env.Payload, &p) != nil || len(p.Hold) == 0 {
		return ""
	}
	h, err := protocol.Open(p.Hold)
	if err != nil || h.Kind != protocol.KindEscrowHold {
		return ""
	}
	return h.Signer
}

// HandleJobReport takes a provider's final receipt on a coordinator: the lease must be
// signed by that provider and countersigned by its renter, and the receipt must follow
// from it. The outcome counts for job completion (provider's fault or not), once per job.
func (st *Settlement) HandleJobReport(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	remote := s.Conn().RemotePeer()
	if !st.reportRate.Allow(remote, time.Now()) {
		st.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", "rate_limited").Inc()
		protocol.WriteJSONFrame(s, map[string]string{"error": "not recorded: more than " + strconv.Itoa(reportsPerMinute) + " reports in a minute: slow down"})
		return
	}
	var r protocol.JobReport
	err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxJobReportFrame, &r)
	var l *protocol.Lease
	if err == nil {
		var signer peer.ID
		if l, signer, err = protocol.OpenLease(r.Lease); err == nil && signer != remote {
			err = fmt.Errorf("%w: lease signed by %s, reported by %s", protocol.ErrWrongSigner, signer, remote)
		}
	}
	if err == nil {
		var renter peer.ID
		if renter, err = peer.Decode(l.Renter); err == nil {
			_, err = protocol.CheckCountersignature(r.LeaseCountersig, r.Lease, protocol.KindLease, renter)
		}
	}
	if err == nil {
		err = protocol.CheckLeaseTerms(l)
	}
	var rec *protocol.Receipt
	if err == nil {
		rec, err = protocol.CheckReceipt(r.Receipt, r.Lease, l)
	}
	if err == nil && len(r.ReceiptCountersig) > 0 {
		renter, _ := peer.Decode(l.Renter)
		if _, cerr := protocol.CheckCountersignature(r.ReceiptCountersig, r.Receipt, protocol.KindReceipt, renter); cerr != nil {
			err = fmt.Errorf("the renter's countersignature of the receipt: %w", cerr)
		}
	}
	if err != nil {
		st.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", protocol.Reason(err)).Inc()
		protocol.WriteJSONFrame(s, map[string]string{"error": err.Error()})
		return
	}
	now := st.clock.Now()
	fault := protocol.ProviderFault(rec.Reason)
	out, err := st.charge(context.Background(), ledger.ReportCharge{
		Report: ledger.JobReport{Job: rec.Job, Provider: remote.String(), ReceivedAt: now,
			Lease: r.Lease, LeaseCountersig: r.LeaseCountersig, Receipt: r.Receipt, ReceiptCountersig: r.ReceiptCountersig, ProviderFault: fault},
		Receipt: protocol.RecordSHA256(r.Receipt), Amount: rec.Amount, Model: rec.Model, GPUs: rec.GPUs,
		Seconds: rec.Seconds, EndedAt: rec.EndedAt, Renter: rec.Renter})
	if err != nil {
		protocol.WriteJSONFrame(s, map[string]string{"error": "not recorded: " + err.Error()})
		return
	}
	if out.Refused != "" {
		st.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "report", "invalid").Inc()
		protocol.WriteJSONFrame(s, map[string]string{"error": out.Refused})
		return
	}
	if e := out.Earning; e != nil {
		st.log.Info("job charged", "job", rec.Job, "provider", remote, "charge_usdc", e.Charge.String(), "provider_earns_usdc", e.Net.String())
	}
	if out.Added {
		st.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindReceipt), "report").Inc()
		halfLife := st.cfg.Coordinator.HalfLife.Duration
		st.ledger.UpdateReliability(remote.String(), func(rs *ledger.ReliabilityState) error {
			good := 1.0
			if fault {
				good = 0
				rs.AddEvent(fmt.Sprintf("job %s interrupted: %s", rec.Job, rec.Reason))
			}
			rs.Reliability.Completion.Add(rec.EndedAt, good, halfLife)
			return nil
		})
	}
	protocol.WriteJSONFrame(s, map[string]string{"ok": "true"})
}
