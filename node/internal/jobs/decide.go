package jobs

import (
	"bufio"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// The provider's end of the job stream (/gpunex/job/1.0.0): a proposal is checked and
// decided by the provider's policy (decide), answered with a signed lease, a counter-offer
// or a refusal; once the renter countersigns, the image is taken and the job started
// (docs/protocols/jobs.md). The renter's end is propose.go.

// HandleJob runs the provider's side of a negotiation.
func (r *Runner) HandleJob(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	in := bufio.NewReader(s)
	refuse := func(reason string, err error) {
		r.metrics.JobProposals.WithLabelValues(reason).Inc()
		sendMsg(s, protocol.JobMsg{Type: "reject", Reason: err.Error()})
		r.log.Info("proposal refused", "renter", remote, "reason", reason, "err", err)
	}
	now := r.clock.Now()
	if !r.rate.Allow(remote, now) {
		r.peer.Misbehaved(remote)
		refuse("rate_limited", fmt.Errorf("more than %d proposals in a minute from %s: slow down", r.cfg.ProposalsPerMinute, remote))
		return
	}
	// Identities rotating on one network share four times one peer's rate (the host's own
	// address is exempt: a devnet's renters).
	if !r.nets.Take(s.Conn(), time.Now(), 1) {
		r.peer.Misbehaved(remote)
		refuse("rate_limited", fmt.Errorf("more than %d proposals in a minute from %s's network: slow down", 4*r.cfg.ProposalsPerMinute, remote))
		return
	}
	m, err := readMsg(in)
	if err != nil || m.Type != "propose" {
		if err == nil {
			err = fmt.Errorf("%w: expected a proposal, got %q", protocol.ErrMalformed, m.Type)
		}
		refuse(protocol.Reason(err), err)
		return
	}
	proposalRaw := m.Record
	p, err := protocol.CheckProposal(proposalRaw, now)
	if err == nil && p.Renter != remote.String() {
		err = fmt.Errorf("%w: proposal signed by %s arrived from %s", protocol.ErrWrongSigner, p.Renter, remote)
	}
	if err == nil && p.Provider != r.peer.ID.String() {
		err = fmt.Errorf("%w: proposal addressed to %s", protocol.ErrInvalid, p.Provider)
	}
	if err != nil {
		refuse(protocol.Reason(err), err)
		return
	}
	lease, gpus, counter, err := r.decide(p, proposalRaw, now)
	if counter > 0 {
		r.metrics.JobProposals.WithLabelValues("countered").Inc()
		sendMsg(s, protocol.JobMsg{Type: "counter", Price: counter, Reason: err.Error()})
		return
	}
	if err != nil {
		refuse("policy", err)
		return
	}
	defer func() {
		if err != nil {
			r.Release(p.Job)
		}
	}()
	cached := r.cachedImage(p)
	if err = sendMsg(s, protocol.JobMsg{Type: "accept", Record: lease, ImageCached: cached != ""}); err != nil {
		return
	}
	m, err = readMsg(in)
	if err == nil && m.Type != "countersign" {
		err = fmt.Errorf("expected the lease's countersignature, got %q", m.Type)
	}
	if err == nil {
		_, err = protocol.CheckCountersignature(m.Record, lease, protocol.KindLease, remote, r.clock.Now())
	}
	if err != nil {
		r.metrics.JobProposals.WithLabelValues("countersign_failed").Inc()
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	var uuids []string
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	if err = r.ledger.CreateJob(ledger.Job{
		ID: p.Job, Side: "provider", Peer: remote.String(), State: ledger.JobLeased, CreatedAt: now, UpdatedAt: now,
		Proposal: proposalRaw, Lease: lease, LeaseCountersig: m.Record, GPUs: uuids,
	}); err != nil {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	r.metrics.JobProposals.WithLabelValues("accepted").Inc()
	ref := cached
	if ref == "" {
		ref, err = r.receiveImage(s, in, p)
	}
	// A pull and the start take their time: the renter waits up to two minutes after
	// the image, and learns the outcome either way.
	s.SetDeadline(time.Now().Add(providerStartTimeout))
	if err == nil {
		err = r.start(p, lease, ref, gpus)
	}
	if err != nil {
		r.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
			j.State, j.Error, j.UpdatedAt = ledger.JobFailed, err.Error(), r.clock.Now()
			return nil
		})
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
		return
	}
	j, _ := r.ledger.GetJob(p.Job)
	v := viewJob(j, r.clock.Now())
	sendMsg(s, protocol.JobMsg{Type: "started", Status: wireStatus(v)})
}

// providerStartTimeout bounds a provider's pull and start of a job's image; the renter
// waits a minute longer for the outcome.
const providerStartTimeout = 10 * time.Minute

// decide applies the provider's policy to a checked proposal. It returns a signed lease and
// the GPUs reserved for it, or the price to counter with, or why not.
func (r *Runner) decide(p *protocol.Proposal, raw []byte, now time.Time) (lease []byte, gpus []sandbox.GPU, counter protocol.MicroUSDC, err error) {
	if r.rtErr != nil {
		return nil, nil, 0, jobErr("this provider cannot run jobs right now: %v", r.rtErr)
	}
	if slices.Contains(r.cfg.BlockedRenters, p.Renter) {
		return nil, nil, 0, jobErr("renter %s is blocked by this provider", p.Renter)
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if detectErr := r.gpus.unavailable(); detectErr != nil {
		return nil, nil, 0, jobErr("this provider cannot run jobs right now: %v", detectErr)
	}
	if closed {
		return nil, nil, 0, jobErr("the provider is shutting down")
	}
	if r.publisher == nil || !r.publisher.Open(now) {
		return nil, nil, 0, jobErr("outside the provider's availability window")
	}
	var item *protocol.OfferGPUs
	egress := ""
	if cur := r.publisher.Current(); cur != nil && cur.Offer.Withdrawn == "" {
		egress = cur.Offer.Egress
		for i := range cur.Offer.GPUs {
			if cur.Offer.GPUs[i].Model == p.Model {
				item = &cur.Offer.GPUs[i]
			}
		}
	}
	if item == nil {
		return nil, nil, 0, jobErr("no %s on offer here now", p.Model)
	}
	if p.Egress && egress == "" {
		return nil, nil, 0, jobErr("this provider gives jobs no network (its jobs.egress is %q): propose without egress, or pick an offer with egress (gpunex offers search --egress)", protocol.EgressDeny)
	}
	if p.GPUs > item.Count {
		return nil, nil, 0, jobErr("%d x %s asked, %d offered", p.GPUs, p.Model, item.Count)
	}
	if item.PricePerGPUHour > p.MaxPrice {
		return nil, nil, item.PricePerGPUHour, fmt.Errorf("the price is %s USDC per GPU-hour, above your maximum of %s", item.PricePerGPUHour, p.MaxPrice)
	}
	if max := r.cfg.MaxImageMB << 20; p.Image.ArchiveSize > max {
		return nil, nil, 0, jobErr("image archive of %d MB, this provider takes at most %d MB", p.Image.ArchiveSize>>20, r.cfg.MaxImageMB)
	}
	if _, err := r.ledger.GetJob(p.Job); err == nil {
		return nil, nil, 0, fmt.Errorf("%w: job %s was proposed before", protocol.ErrReplay, p.Job)
	}
	if err := r.checkEscrow(p, item.PricePerGPUHour, now); err != nil {
		return nil, nil, 0, err
	}
	if gpus, err = r.Reserve(p.Job, p.Model, p.GPUs); err != nil {
		return nil, nil, 0, err
	}
	cfg := r.cfg
	l := protocol.Lease{
		Version: protocol.JobVersion, Job: p.Job, Proposal: protocol.RecordSHA256(raw), Renter: p.Renter, Provider: p.Provider,
		Model: p.Model, GPUs: p.GPUs, Price: item.PricePerGPUHour, IssuedAt: now.UTC(),
		EndsAt: now.UTC().Add(time.Duration(p.MaxSeconds) * time.Second),
		Limits: protocol.Limits{
			MemoryBytes: int64(p.GPUs) * cfg.MemoryMBPerGPU << 20, CPUMillis: int64(p.GPUs) * cfg.CPUMillisPerGPU,
			Pids: cfg.Pids, ScratchBytes: cfg.ScratchMB << 20,
		},
		Egress: p.Egress,
	}
	if lease, err = protocol.Seal(protocol.KindLease, l, r.peer.Key); err != nil {
		r.Release(p.Job)
		return nil, nil, 0, err
	}
	return lease, gpus, 0, nil
}

// checkEscrow applies jobs.require_escrow: the proposal carries a hold signed by a trusted
// coordinator that covers the job's maximum cost at this provider's price and lasts past
// the lease's end. Without the setting a hold, when given, is still checked.
func (r *Runner) checkEscrow(p *protocol.Proposal, price protocol.MicroUSDC, now time.Time) error {
	if len(p.Hold) == 0 {
		if r.cfg.RequireEscrow {
			return jobErr("this provider requires an escrow hold from its coordinator: deposit USDC (gpunex wallet deposit) and propose again")
		}
		return nil
	}
	h, err := protocol.CheckHold(p.Hold, now, protocol.NewTrust(r.trusted...))
	if err != nil {
		return jobErr("escrow hold refused: %v", err)
	}
	if err := protocol.CheckHoldCovers(h, p, price, now.Add(time.Duration(p.MaxSeconds)*time.Second)); err != nil {
		return jobErr("escrow hold refused: %v", err)
	}
	return nil
}
