package jobs

import (
	"bufio"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// HandleHoldRelease answers a trusted coordinator asking whether a job's hold may be
// released: yes when the job never got a lease here (the job ID is then marked so that no
// proposal for it is taken later) or failed before it started; no once it has a lease.
func (r *Runner) HandleHoldRelease(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	remote := s.Conn().RemotePeer()
	var q protocol.HoldRelease
	if !slices.Contains(r.trusted, remote) {
		protocol.WriteJSONFrame(s, protocol.HoldRelease{Reason: "only a trusted coordinator may ask"})
		return
	}
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxHoldReleaseFrame, &q); err != nil || !protocol.ValidJobID(q.Job) {
		protocol.WriteJSONFrame(s, protocol.HoldRelease{Reason: "bad request"})
		return
	}
	protocol.WriteJSONFrame(s, r.ReleaseAnswer(q.Job))
}

// ReleaseAnswer is the provider's answer to a coordinator asking to release a job's hold.
func (r *Runner) ReleaseAnswer(job string) protocol.HoldRelease {
	now := r.clock.Now()
	err := r.ledger.CreateJob(ledger.Job{ID: job, Side: "provider", State: ledger.JobReleased, CreatedAt: now, UpdatedAt: now,
		Error: "escrow hold released before any lease"})
	if err == nil {
		return protocol.HoldRelease{Job: job, Release: true}
	}
	j, gerr := r.ledger.GetJob(job)
	switch {
	case gerr != nil:
		return protocol.HoldRelease{Job: job, Reason: gerr.Error()}
	case j.State == ledger.JobReleased, j.State == ledger.JobFailed && len(j.Receipt) == 0:
		return protocol.HoldRelease{Job: job, Release: true}
	}
	return protocol.HoldRelease{Job: job, Reason: fmt.Sprintf("job %s is %s here: its final receipt settles the hold", job, j.State)}
}
