package money

import (
	"context"
	"slices"
	"strings"
	"time"

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
	w.ledger.Jobs.UpdateJob(j.ID, func(j *ledger.Job) error {
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
