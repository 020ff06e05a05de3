package jobs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Leases that grow, both ends (docs/protocols/jobs.md, "Extending a lease"). Before its
// job's lease ends, the renter raises the job's escrow hold at its coordinator (the wallet
// op extend), then sends the provider the "extend" op of the job-control stream with the
// seconds to add and the raised hold. The provider checks its availability window and the
// hold for the added period and answers with a new lease extending the one in force
// (protocol.CheckExtension: the same terms, a later end, Extends naming it) and a usage
// checkpoint of the new lease for the seconds run so far; the renter countersigns both;
// the provider lets the job's sandbox run that much longer and keeps the new lease as the
// job's, with that checkpoint as its latest: checkpoints and the receipt name the new
// lease from then on, and no countersigned usage is lost to the lease change. Each added
// period is at most the proposal's max_seconds, the whole lease at most
// protocol.MaxJobDuration.

// The provider's end.

// extendLease serves a renter's extend request for its job: a new lease and a checkpoint
// of it out, the renter's countersignatures of both back, the sandbox's wall clock pushed
// back, the new lease and checkpoint kept. Without both countersignatures the lease in
// force and its checkpoint stay.
func (r *Runner) extendLease(s network.Stream, in *bufio.Reader, j ledger.Job, m protocol.JobMsg, remote peer.ID) {
	if !r.startExtending(j.ID) {
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: jobErr("an extension of job %s is under way already", j.ID).Error()})
		return
	}
	// The mark is released before the answer goes out: a renter that asks again as soon as
	// it has the answer finds no extension under way.
	release := sync.OnceFunc(func() { r.doneExtending(j.ID) })
	defer release()
	fail := func(err error) {
		release()
		sendMsg(s, protocol.JobMsg{Type: "error", Reason: err.Error()})
	}
	now := r.clock.Now()
	raw, prev, next, err := r.extendedLease(j, m, now)
	if err != nil {
		r.log.Info("lease extension refused", "job", j.ID, "renter", remote, "why", err)
		fail(err)
		return
	}
	// The usage run so far, signed against the new lease: the renter countersigns it with
	// the lease, so that the job's latest countersigned checkpoint names the lease in force.
	longer := j
	longer.Lease = raw
	cpRaw, cp, err := r.checkpoint(longer)
	if err != nil {
		fail(err)
		return
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "accept", Record: raw, Checkpoint: cpRaw}); err != nil {
		return
	}
	a, err := readMsg(in)
	if err != nil || a.Type != "countersign" {
		return // the renter did not take it: the lease in force stays
	}
	now = r.clock.Now()
	if _, err := protocol.CheckCountersignature(a.Record, raw, protocol.KindLease, remote, now); err != nil {
		fail(err)
		return
	}
	if _, err := protocol.CheckCountersignature(a.Checkpoint, cpRaw, protocol.KindCheckpoint, remote, now); err != nil {
		fail(fmt.Errorf("an extension needs the usage checkpoint of the new lease countersigned: %w", err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.rt.ExtendWallClock(ctx, j.ID, next.EndsAt.Sub(prev.EndsAt)); err != nil {
		fail(fmt.Errorf("the job's sandbox was not extended: %w", err))
		return
	}
	stored, err := r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		if x.State != ledger.JobRunning || !bytes.Equal(x.Lease, j.Lease) {
			return errors.New("the job ended, or its lease changed, meanwhile")
		}
		x.PriorLeases = append(x.PriorLeases, x.Lease)
		x.Lease, x.LeaseCountersig, x.UpdatedAt = raw, a.Record, r.clock.Now()
		// The latest checkpoint named the lease extended, which a report with the new
		// lease cannot carry: the one countersigned with it takes its place.
		x.Checkpoint, x.CheckpointCountersig, x.CheckpointSeconds, x.MeteredAt = cpRaw, a.Checkpoint, cp.Seconds, now
		return nil
	})
	if err != nil {
		fail(err)
		return
	}
	r.log.Info("lease extended", "job", j.ID, "renter", remote, "ends_at", next.EndsAt, "added", next.EndsAt.Sub(prev.EndsAt))
	release()
	sendMsg(s, protocol.JobMsg{Type: "ok", Status: wireStatus(viewJob(stored, r.clock.Now()))})
}

// startExtending marks a job's extension under way, unless one is: two at once would each
// extend the sandbox for one lease kept.
func (r *Runner) startExtending(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.extending == nil {
		r.extending = map[string]bool{}
	}
	if r.extending[id] {
		return false
	}
	r.extending[id] = true
	return true
}

func (r *Runner) doneExtending(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.extending, id)
}

// extendedLease applies the provider's policy to an extend request at now and signs the
// longer lease: the job runs and its lease has not ended, the added seconds are at most
// the proposal's max_seconds, the availability window stays open through the added
// period, and the hold (when the job has one, or escrow is required) covers the whole
// longer lease.
func (r *Runner) extendedLease(j ledger.Job, m protocol.JobMsg, now time.Time) (raw []byte, prev, next *protocol.Lease, err error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, nil, nil, jobErr("the provider is shutting down")
	}
	if slices.Contains(r.cfg.BlockedRenters, j.Peer) {
		return nil, nil, nil, jobErr("renter %s is blocked by this provider", j.Peer)
	}
	if j.State != ledger.JobRunning {
		return nil, nil, nil, jobErr("job %s is %s: only a running job's lease is extended", j.ID, j.State)
	}
	prev, _, err = protocol.OpenLease(j.Lease)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := openProposal(j.Proposal)
	if err != nil {
		return nil, nil, nil, err
	}
	if m.Seconds < 1 || m.Seconds > p.MaxSeconds {
		return nil, nil, nil, jobErr("an extension adds 1 to %d seconds (the job's --max-hours), not %d", p.MaxSeconds, m.Seconds)
	}
	if !now.Before(prev.EndsAt) {
		return nil, nil, nil, jobErr("the lease ended at %s: too late to extend it", prev.EndsAt.UTC().Format(time.RFC3339))
	}
	ends := prev.EndsAt.Add(time.Duration(m.Seconds) * time.Second)
	if ends.Sub(prev.IssuedAt) > protocol.MaxJobDuration {
		return nil, nil, nil, jobErr("a lease lasts at most %s", protocol.MaxJobDuration)
	}
	if !r.openThrough(prev.EndsAt, ends) {
		return nil, nil, nil, jobErr("outside the provider's availability window: it does not stay open from %s to %s",
			prev.EndsAt.UTC().Format(time.RFC3339), ends.UTC().Format(time.RFC3339))
	}
	if err := r.checkExtendedHold(p, protocol.HoldCoordinator(j.Proposal), prev, m.Record, ends, now); err != nil {
		return nil, nil, nil, err
	}
	l := *prev
	l.EndsAt, l.Extends = ends.UTC(), protocol.RecordSHA256(j.Lease)
	raw, err = protocol.Seal(protocol.KindLease, l, r.peer.Key)
	return raw, prev, &l, err
}

// scheduled is a publisher that tells its whole availability schedule (the offers
// subsystem's).
type scheduled interface {
	Schedule() protocol.Schedule
}

// openThrough says whether the availability schedule is open from from until to, without
// a break.
func (r *Runner) openThrough(from, to time.Time) bool {
	if r.publisher == nil {
		return false
	}
	if sp, ok := r.publisher.(scheduled); ok {
		s := sp.Schedule()
		if !s.Open(from) {
			return false
		}
		next, changes := s.NextChange(from)
		return !changes || !next.Before(to)
	}
	return r.publisher.Open(from) && r.publisher.Open(to.Add(-time.Second))
}

// checkExtendedHold checks the raised hold of an extension: signed by the coordinator of
// the job's first hold (or a trusted one when the job had none), covering the longer
// lease's maximum cost at its price and lasting past its end plus the grace. A job that
// ran without a hold is extended without one unless this provider requires escrow.
func (r *Runner) checkExtendedHold(p *protocol.Proposal, first peer.ID, prev *protocol.Lease, hold []byte, ends, now time.Time) error {
	if len(hold) == 0 {
		if first != "" || r.cfg.RequireEscrow {
			return jobErr("an extension needs the job's escrow hold raised to cover the longer lease")
		}
		return nil
	}
	h, err := protocol.CheckHold(hold, now, protocol.NewTrust(r.trusted...))
	if err != nil {
		return jobErr("escrow hold refused: %v", err)
	}
	if first != "" && h.Signer != first {
		return jobErr("escrow hold refused: signed by %s, not by %s, which holds the job's escrow", h.Signer, first)
	}
	whole := *p
	whole.MaxSeconds = int64(ends.Sub(prev.IssuedAt) / time.Second)
	if err := protocol.CheckHoldCovers(h, &whole, prev.Price, ends); err != nil {
		return jobErr("escrow hold refused: %v", err)
	}
	return nil
}

// The renter's end.

// ExtendJob asks for a running rented job's lease to last seconds longer: the job's hold is
// raised at its coordinator first (refused when the balance does not cover the longer
// lease), then the provider is asked (refused outside its availability window), and the
// new lease is countersigned and kept. A refusal leaves the lease as it was.
func (r *Renter) ExtendJob(ctx context.Context, id string, seconds int64) (api.JobView, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return api.JobView{}, err
	}
	now := r.clock.Now()
	if j.Side != "renter" {
		return api.JobView{}, api.Invalid(errors.New("only the renter extends a job's lease"))
	}
	if j.State != ledger.JobRunning {
		return api.JobView{}, api.Conflict(fmt.Errorf("job %s is %s: only a running job's lease is extended", id, j.State))
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return api.JobView{}, err
	}
	p, err := openProposal(j.Proposal)
	if err != nil {
		return api.JobView{}, err
	}
	switch {
	case seconds < 1 || seconds > p.MaxSeconds:
		return api.JobView{}, api.Invalid(fmt.Errorf("an extension adds at most the job's --max-hours (%d s) and more than nothing, not %d s", p.MaxSeconds, seconds))
	case !now.Before(l.EndsAt):
		return api.JobView{}, api.Conflict(fmt.Errorf("the lease ended at %s: too late to extend it", l.EndsAt.UTC().Format(time.RFC3339)))
	}
	ends := l.EndsAt.Add(time.Duration(seconds) * time.Second)
	var hold []byte
	if protocol.HoldCoordinator(j.Proposal) != "" {
		amount := protocol.HoldAmount(l.Price, l.GPUs, int64(ends.Sub(l.IssuedAt)/time.Second))
		if hold, err = r.escrow.ExtendHold(ctx, j, amount, ends.Add(protocol.HoldGrace+time.Minute)); err != nil {
			return api.JobView{}, api.Conflict(fmt.Errorf("the coordinator did not raise the job's hold: %w", err))
		}
	}
	x, err := r.askExtension(ctx, j, l, p, seconds, hold)
	if err != nil {
		return api.JobView{}, err
	}
	j, err = r.ledger.UpdateJob(id, func(cur *ledger.Job) error {
		if !bytes.Equal(cur.Lease, j.Lease) {
			return errors.New("the job's lease changed meanwhile (another extension): see gpunex job status")
		}
		cur.PriorLeases = append(cur.PriorLeases, cur.Lease)
		cur.Lease, cur.LeaseCountersig, cur.UpdatedAt = x.lease, x.leaseCountersig, r.clock.Now()
		// The checkpoint countersigned with the new lease takes the place of the latest,
		// which names the lease extended.
		cur.Checkpoint, cur.CheckpointCountersig, cur.CheckpointSeconds, cur.MeteredAt = x.checkpoint, x.checkpointCountersig, x.seconds, x.at
		return nil
	})
	if err != nil {
		return api.JobView{}, err
	}
	r.log.Info("lease extended", "job", id, "provider", j.Peer, "ends_at", ends, "metered_seconds", x.seconds)
	return r.withInput(viewJob(j, r.clock.Now())), nil
}

// extension is a longer lease the provider took, with the checkpoint of the usage so far
// that came with it, and this node's countersignatures of both.
type extension struct {
	lease, leaseCountersig           []byte
	checkpoint, checkpointCountersig []byte
	seconds                          int64     // the checkpoint's
	at                               time.Time // when this node countersigned it
}

// askExtension sends the extend request to the job's provider, checks the longer lease it
// answers and the checkpoint of it that comes along (no more than this node observed, no
// less than it countersigned already) and countersigns both; it returns them once the
// provider has extended the job.
func (r *Renter) askExtension(ctx context.Context, j ledger.Job, l *protocol.Lease, p *protocol.Proposal, seconds int64, hold []byte) (*extension, error) {
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "extend", Seconds: seconds, Record: hold})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	m, err := readMsg(in)
	if err != nil {
		return nil, fmt.Errorf("provider's answer: %w", err)
	}
	if m.Type != "accept" {
		return nil, api.Conflict(fmt.Errorf("%w: %s", ErrExtensionRefused, m.Reason))
	}
	refuse := func(err error) error {
		sendMsg(s, protocol.JobMsg{Type: "refuse", Reason: err.Error()})
		return err
	}
	next, err := protocol.CheckExtension(m.Record, j.Lease, l, p.MaxSeconds)
	if err != nil {
		return nil, refuse(fmt.Errorf("the provider's longer lease does not hold: %w", err))
	}
	if want := l.EndsAt.Add(time.Duration(seconds) * time.Second); !next.EndsAt.Equal(want) {
		refuse(errors.New("another end than asked"))
		return nil, fmt.Errorf("the provider's longer lease ends at %s, not %s as asked", next.EndsAt.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
	}
	now := r.clock.Now()
	longer := j
	longer.Lease = m.Record
	cp, err := checkObserved(longer, m.Checkpoint, now)
	if err != nil {
		return nil, refuse(fmt.Errorf("the usage checkpoint of the longer lease does not hold: %w", err))
	}
	x := &extension{lease: m.Record, checkpoint: m.Checkpoint, seconds: cp.Seconds, at: now}
	if x.leaseCountersig, err = r.countersign(j.ID, protocol.KindLease, m.Record, now); err != nil {
		return nil, err
	}
	if x.checkpointCountersig, err = r.countersign(j.ID, protocol.KindCheckpoint, m.Checkpoint, now); err != nil {
		return nil, err
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "countersign", Record: x.leaseCountersig, Checkpoint: x.checkpointCountersig}); err != nil {
		return nil, err
	}
	ok, err := readMsg(in)
	if err != nil {
		return nil, fmt.Errorf("provider's answer: %w", err)
	}
	if ok.Type != "ok" {
		return nil, api.Conflict(fmt.Errorf("%w: %s", ErrExtensionRefused, ok.Reason))
	}
	return x, nil
}

// countersign seals this node's countersignature of a record of kind of job id.
func (r *Renter) countersign(id string, kind protocol.Kind, raw []byte, now time.Time) ([]byte, error) {
	return protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: kind, SHA256: protocol.RecordSHA256(raw), Job: id,
		Signer: r.peer.ID.String(), SignedAt: now.UTC(),
	}, r.peer.Key)
}

// ErrExtensionRefused wraps a provider's refusal of a longer lease; its text is the reason.
var ErrExtensionRefused = errors.New("extension refused")
