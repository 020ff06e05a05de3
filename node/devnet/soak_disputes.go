package devnet

import (
	"context"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// The soak's operator: a renter that was killed, partitioned or restarted while its job
// ended disputes a receipt that counts seconds it did not see, and a disputed hold waits
// for the coordinator's operator. The soak plays that operator: every minute, and until
// the run settles, it decides each open dispute whose provider has reported, in turn for
// the provider, for the renter and halfway between, and checks that each decision stays
// within its bounds (the renter's countersigned checkpoints below, the receipt above) and
// that the hold is charged what was decided.

// decidedDispute is what the operator decided for a job, for the checks.
type decidedDispute struct {
	floor, cap, charged protocol.MicroUSDC
}

// operator decides the open disputes every minute until ctx ends.
func (s *soak) operator(ctx context.Context) {
	for sleepCtx(ctx, time.Minute) {
		s.decideDisputes(ctx)
	}
}

// decideDisputes decides every open dispute the coordinator can decide now (its provider
// has reported the job); a dispute its provider never reports closes at the hold's expiry,
// the hold back to the renter.
func (s *soak) decideDisputes(ctx context.Context) {
	cl := s.client(s.coordinatorProc)
	open, err := cl.Disputes(ctx, false)
	if err != nil {
		return
	}
	for _, d := range open {
		if d.State != "open" || d.ReportedUSDC == "" {
			continue
		}
		floor, reported := microUSDC(d.FloorUSDC), microUSDC(d.ReportedUSDC)
		c := min(microUSDC(d.ClaimedUSDC), reported)
		s.mu.Lock()
		turn := s.report.Disputes
		s.mu.Unlock()
		var req api.ResolveRequest
		switch turn % 3 {
		case 0:
			req.For = "provider"
		case 1:
			req.For = "renter"
		default:
			req.USDC = ((floor + c) / 2).String()
		}
		req.Note = "decided by the soak's operator"
		v, err := cl.ResolveDispute(ctx, d.Job, req)
		if err != nil {
			continue // decided or closed meanwhile, or the coordinator is down: next round
		}
		charged := microUSDC(v.ChargedUSDC)
		s.mu.Lock()
		s.report.Disputes++
		s.decided[d.Job] = decidedDispute{floor: floor, cap: c, charged: charged}
		s.mu.Unlock()
		s.say("soak: dispute of job %s (renter says %s, receipt %s, floor %s) decided %+v: charged %s",
			d.Job, d.RenterSaysUSDC, d.ClaimedUSDC, d.FloorUSDC, req, v.ChargedUSDC)
		if charged < floor || charged > c {
			s.breaks("disputes", fmt.Sprintf("job %s decided at %s, outside its bounds %s to %s", d.Job, charged, floor, c))
		}
	}
}

// checkDecided checks a charged hold of a decided dispute: charged what was decided. It
// says whether the job was decided (then the usage check does not apply: the operator
// may charge more than the renter countersigned, up to the receipt).
func (s *soak) checkDecided(h api.HoldView, charge protocol.MicroUSDC) bool {
	s.mu.Lock()
	d, ok := s.decided[h.Job]
	s.mu.Unlock()
	if ok && h.State == "charged" && charge != d.charged {
		s.breaks("disputes", fmt.Sprintf("job %s charged %s, decided %s", h.Job, charge, d.charged))
	}
	return ok
}
