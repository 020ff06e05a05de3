package jobs

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// The job stream (/gpunex/job/1.0.0), both ends, in the order a job goes through them
// (docs/protocols/jobs.md): the renter proposes to one provider's offer with an escrow
// hold (ProposeJob, propose; a job asked for by model is placed first, placement.go); the
// provider checks the proposal and decides by its policy (HandleJob, decide), and answers
// with a signed lease, a counter-offer or a refusal; the renter countersigns the lease and
// sends the image archive; the provider takes the image (images.go), starts the job
// (lifecycle.go) and says so. sendMsg and readMsg carry the frames of the job-control
// stream too.

func sendMsg(w io.Writer, m protocol.JobMsg) error { return protocol.WriteJSONFrame(w, m) }

func readMsg(r *bufio.Reader) (protocol.JobMsg, error) {
	var m protocol.JobMsg
	err := protocol.ReadJSONFrame(r, protocol.MaxJobFrame, &m)
	return m, err
}

// The renter's end.

// ProposeJob negotiates a job and, once both sides signed the lease and the image is
// delivered, returns the started job. A request naming a provider or an offer goes there;
// one naming a model only is placed on the best offer that takes it (place).
func (r *Renter) ProposeJob(ctx context.Context, req api.JobRequest) (api.JobView, error) {
	if req.Provider == "" && req.Offer == "" {
		if req.Model == "" {
			return api.JobView{}, api.Invalid(errors.New("name a provider, an offer or a model"))
		}
		return r.place(ctx, req)
	}
	if req.Region != "" || req.Tier != "" || req.Tries != 0 {
		return api.JobView{}, api.Invalid(errors.New("region, tier and tries choose among the offers of a model: give them with a model and no provider or offer"))
	}
	var provider peer.ID
	var err error
	model := protocol.NormalizeModel(req.Model)
	if req.Offer != "" {
		var offered string
		if provider, offered, err = protocol.ParseOfferID(req.Offer); err != nil {
			return api.JobView{}, api.Invalid(err)
		}
		if model != "" && model != offered {
			return api.JobView{}, api.Invalid(fmt.Errorf("offer %s is for %s, not %s", req.Offer, offered, model))
		}
		model = offered
	} else if provider, err = peer.Decode(req.Provider); err != nil {
		return api.JobView{}, api.Invalid(fmt.Errorf("provider %q: not a peer ID", req.Provider))
	}
	so, _ := r.offers.Get(provider)
	if so == nil || !live(so, r.clock.Now()) {
		// Not held yet: a search brings it (and checks it).
		if _, err := r.offers.Search(ctx, api.SearchFilter{Model: model}); err != nil {
			return api.JobView{}, err
		}
		if so, _ = r.offers.Get(provider); so == nil || !live(so, r.clock.Now()) {
			return api.JobView{}, fmt.Errorf("%w: no live, certified offer from %s", api.ErrNotFound, provider)
		}
	}
	img, err := openArchive(req.ImageArchive)
	if err != nil {
		return api.JobView{}, err
	}
	defer img.Close()
	release, err := r.openInputs(req) // data in: hashed once (inputsend.go)
	if err != nil {
		return api.JobView{}, err
	}
	defer release()
	v, _, err := r.propose(ctx, req, so, model, img)
	return v, err
}

// archive is a job's image archive, opened and hashed once however many providers are
// proposed the job.
type archive struct {
	f      *os.File
	sha256 string
	size   int64
}

// openArchive opens and hashes the image archive at path; nil when path is empty.
func openArchive(path string) (*archive, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("image archive: %w", err))
	}
	// Only an image goes to a provider: a job file naming another file (a key) is refused
	// before anything is sent.
	if err := sandbox.CheckImageArchive(f); err != nil {
		f.Close()
		return nil, api.Invalid(fmt.Errorf("image archive %s: %w", path, err))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	a := &archive{f: f}
	if a.sha256, a.size, err = fileSHA256(f); err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

func (a *archive) Close() {
	if a != nil {
		a.f.Close()
	}
}

// fileSHA256 hashes a file and returns its hex digest and size.
func fileSHA256(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// live says whether an offer is unexpired, not withdrawn and certified at now (as the
// offer book counts it).
func live(so *protocol.SignedOffer, now time.Time) bool {
	return so.Offer.Withdrawn == "" && now.Before(so.Offer.ExpiresAt) && so.Cert != nil && now.Before(so.Cert.ExpiresAt)
}

// proposal is the unsigned proposal of req to provider, for model at price at most, under
// a new job ID.
func (r *Renter) proposal(req api.JobRequest, provider peer.ID, model string, price protocol.MicroUSDC, img *archive) protocol.Proposal {
	var id [8]byte
	rand.Read(id[:])
	p := protocol.Proposal{
		Version: protocol.JobVersion, Job: hex.EncodeToString(id[:]), Renter: r.peer.ID.String(), Provider: provider.String(),
		IssuedAt: r.clock.Now().UTC(), Model: model, GPUs: req.GPUs, MaxSeconds: req.MaxSeconds, MaxPrice: price,
		Image: protocol.Image{Ref: req.Image}, Args: req.Args, Env: req.Env, Egress: req.Egress, Ports: req.Ports,
	}
	if img != nil {
		p.Image.ArchiveSHA256, p.Image.ArchiveSize = img.sha256, img.size
	}
	p.Input = r.inputRef(req, p.Job) // data in (inputsend.go)
	return p
}

// seal signs a proposal and checks it as its provider will: a proposal that does not hold
// is the renter's mistake (ErrInvalid).
func (r *Renter) seal(p protocol.Proposal) ([]byte, error) {
	praw, err := protocol.Seal(protocol.KindProposal, p, r.peer.Key)
	if err != nil {
		return nil, api.Invalid(err)
	}
	if _, err := protocol.CheckProposal(praw, r.clock.Now()); err != nil {
		return nil, api.Invalid(err)
	}
	return praw, nil
}

// propose negotiates req with the provider of the live offer so, for model, and once both
// sides signed the lease and the image is delivered, returns the started job. leased says
// the lease was signed: a failure after it is kept in the ledger as a failed job, one
// before it leaves nothing behind.
func (r *Renter) propose(ctx context.Context, req api.JobRequest, so *protocol.SignedOffer, model string, img *archive) (_ api.JobView, leased bool, err error) {
	provider := so.Signer
	item, maxPrice, err := offeredItem(req, so, model)
	if err != nil {
		return api.JobView{}, false, err
	}
	p := r.proposal(req, provider, item.Model, maxPrice, img)
	if err := checkOfferInput(so, p.Input); err != nil { // data in (inputsend.go)
		return api.JobView{}, false, err
	}
	s, err := r.dial(ctx, so)
	if err != nil {
		return api.JobView{}, false, err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	in := bufio.NewReader(s)

	// The escrow hold, once the provider answers: the coordinator that certified the
	// provider (the provider trusts it) sets the job's maximum cost aside from this
	// renter's account there. A renter without an account or funds there proposes without
	// one; a provider requiring escrow says so. A provider that cannot be reached never
	// makes this renter's funds wait for it.
	var holdErr error
	var holder peer.ID
	stopped := false // the provider confirmed a job it leased will not run
	if so.Cert != nil {
		holder = so.Cert.Signer
	}
	p.Hold, holdErr = r.escrow.RequestHold(ctx, p, holder)
	if holdErr != nil {
		r.log.Info("job proposed without an escrow hold", "job", p.Job, "coordinator", holder, "why", holdErr)
	} else {
		defer func() {
			if err != nil {
				r.giveHoldBack(p.Job, holder, leased && !stopped)
			}
		}()
	}
	praw, err := r.seal(p)
	if err != nil {
		return api.JobView{}, false, err
	}
	accepted, err := askProvider(s, in, praw, holdErr)
	if err != nil {
		return api.JobView{}, false, err
	}
	l, err := protocol.CheckLease(accepted.Record, praw, &p)
	if err != nil {
		return api.JobView{}, false, fmt.Errorf("the provider's lease does not hold: %w", err)
	}
	cs, err := r.keepLease(p.Job, provider, praw, accepted.Record)
	if err != nil {
		return api.JobView{}, true, err
	}
	j, err := r.awaitStart(s, in, &p, img, accepted.ImageCached, cs)
	if errors.Is(err, errNotStarted) {
		stopped = r.cancelUnstarted(p.Job) // renterstart.go
	}
	if err != nil {
		return api.JobView{}, true, err
	}
	r.log.Info("job started", "job", p.Job, "provider", provider, "price_usdc", l.Price, "ends_at", l.EndsAt)
	return viewJob(j, r.clock.Now()), true, nil
}

// offeredItem picks what an offer offers of model (its only item when model is empty)
// and the price to propose at most: the offer's, or the request's maximum.
func offeredItem(req api.JobRequest, so *protocol.SignedOffer, model string) (_ *protocol.OfferGPUs, maxPrice protocol.MicroUSDC, err error) {
	provider := so.Signer
	var item *protocol.OfferGPUs
	for i, g := range so.Offer.GPUs {
		if g.Model == model || (model == "" && len(so.Offer.GPUs) == 1) {
			item = &so.Offer.GPUs[i]
		}
	}
	if item == nil {
		return nil, 0, api.Invalid(fmt.Errorf("provider %s offers several models or not %q: name the offer (--offer %s/MODEL)", provider, model, provider))
	}
	if req.Egress && so.Offer.Egress == "" {
		return nil, 0, api.Invalid(fmt.Errorf("provider %s gives jobs no network: drop --egress, or pick an offer with egress (gpunex offers search --egress)", provider))
	}
	maxPrice = item.PricePerGPUHour
	if req.MaxPrice != "" {
		if maxPrice, err = protocol.ParseUSDC(req.MaxPrice); err != nil {
			return nil, 0, api.Invalid(fmt.Errorf("max price: %w", err))
		}
	}
	return item, maxPrice, nil
}

// dial opens the job stream to an offer's provider, at the addresses its offer gives. A
// provider that does not answer within a step's time is given up on.
func (r *Renter) dial(ctx context.Context, so *protocol.SignedOffer) (network.Stream, error) {
	provider := so.Signer
	if len(so.Offer.Addrs) > 0 {
		if ai, err := peer.AddrInfosFromP2pAddrs(multiaddrs(so.Offer.Addrs)...); err == nil {
			for _, a := range ai {
				r.peer.Host.Peerstore().AddAddrs(a.ID, a.Addrs, 10*time.Minute)
			}
		}
	}
	dctx, cancel := context.WithTimeout(ctx, jobStepTimeout)
	defer cancel()
	if err := r.peer.Reach(dctx, provider); err != nil {
		return nil, err
	}
	s, err := r.peer.OpenStream(dctx, provider, protocol.JobProtocol)
	if err != nil {
		return nil, fmt.Errorf("reach provider %s: %w", provider, err)
	}
	return s, nil
}

// giveHoldBack asks for the hold of a job that does not run: the provider confirms it
// never ran. A refused proposal's hold, or that of a job its provider confirmed cancelled
// before its start, comes back before propose returns, so that the next offer of a
// placement finds the funds; another job that failed after its lease is retried later
// (its provider may still be marking the failure).
func (r *Renter) giveHoldBack(job string, holder peer.ID, mayHaveRun bool) {
	if !mayHaveRun {
		rctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if _, rerr := r.escrow.ReleaseHold(rctx, job, holder.String()); rerr == nil {
			return
		}
	}
	go r.escrow.ReleaseAfterFailure(job, holder)
}

// askProvider sends the signed proposal and reads the provider's answer: its accept
// (carrying the lease), or an error saying why not. A refusal is a conflict with the
// provider's state or policy (409), and wraps ErrRefused.
func askProvider(s io.Writer, in *bufio.Reader, praw []byte, holdErr error) (protocol.JobMsg, error) {
	if err := sendMsg(s, protocol.JobMsg{Type: "propose", Record: praw}); err != nil {
		return protocol.JobMsg{}, err
	}
	m, err := readMsg(in)
	if err != nil {
		return m, fmt.Errorf("provider's answer: %w", err)
	}
	switch m.Type {
	case "accept":
		return m, nil
	case "counter":
		return m, api.Conflict(fmt.Errorf("%w: the provider counters at %s USDC per GPU-hour (%s); propose again with that maximum price", ErrRefused, m.Price, m.Reason))
	case "reject":
		reason := strings.TrimPrefix(m.Reason, ErrRefused.Error()+": ")
		if holdErr != nil && strings.Contains(reason, "escrow") {
			reason += " (no hold was given: " + holdErr.Error() + ")"
		}
		return m, api.Conflict(fmt.Errorf("%w: %s", ErrRefused, reason))
	default:
		return m, fmt.Errorf("provider answered %q: %s", m.Type, m.Reason)
	}
}

// keepLease countersigns a checked lease and records the job as leased; it returns the
// countersignature.
func (r *Renter) keepLease(job string, provider peer.ID, praw, leaseRaw []byte) ([]byte, error) {
	cs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindLease, SHA256: protocol.RecordSHA256(leaseRaw), Job: job,
		Signer: r.peer.ID.String(), SignedAt: r.clock.Now().UTC(),
	}, r.peer.Key)
	if err != nil {
		return nil, err
	}
	now := r.clock.Now()
	if err := r.ledger.CreateJob(ledger.Job{
		ID: job, Side: "renter", Peer: provider.String(), State: ledger.JobLeased, CreatedAt: now, UpdatedAt: now,
		Proposal: praw, Lease: leaseRaw, LeaseCountersig: cs,
	}); err != nil {
		return nil, err
	}
	return cs, nil
}

// awaitStart sends the lease's countersignature and the image archive (unless the
// provider holds it already), then waits for the provider's word that the job started,
// and records the start. A failure is kept in the ledger as a failed job.
func (r *Renter) awaitStart(s network.Stream, in *bufio.Reader, p *protocol.Proposal, img *archive, imageCached bool, cs []byte) (ledger.Job, error) {
	fail := func(err error) (ledger.Job, error) {
		r.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
			j.State, j.Error, j.UpdatedAt = ledger.JobFailed, err.Error(), r.clock.Now()
			return nil
		})
		return ledger.Job{}, err
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "countersign", Record: cs}); err != nil {
		return fail(err)
	}
	if err := inputWelcomed(in, p); err != nil { // data in (inputsend.go)
		return fail(err)
	}
	if img != nil && !imageCached {
		s.SetDeadline(time.Now().Add(jobStepTimeout + time.Duration(p.Image.ArchiveSize>>20)*time.Second))
		if _, err := img.f.Seek(0, io.SeekStart); err != nil {
			return fail(err)
		}
		if _, err := io.Copy(s, img.f); err != nil {
			return fail(fmt.Errorf("send image archive: %w", err))
		}
	}
	if err := r.sendInput(p); err != nil { // data in: on a stream of its own (inputsend.go)
		return fail(err)
	}
	// The provider holds what it needs (or pulls it): wait for its word until the start
	// deadline (renterstart.go), not the provider's own 10 minutes.
	m, err := r.readStarted(s, in, startWait(p))
	if errors.Is(err, errNotStarted) {
		return fail(err)
	}
	if err != nil {
		return fail(fmt.Errorf("waiting for the start: %w", err))
	}
	if m.Type != "started" || m.Status == nil {
		return fail(fmt.Errorf("the provider could not start the job: %s", m.Reason))
	}
	return r.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
		now := r.clock.Now()
		j.State, j.StartedAt, j.GPUs, j.UpdatedAt = ledger.JobRunning, m.Status.StartedAt, m.Status.GPUUUIDs, now
		j.ObservedStart, j.LastSeenRunning = now, now
		return nil
	})
}

func multiaddrs(ss []string) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, s := range ss {
		if a, err := ma.NewMultiaddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// The provider's end.

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
	if errors.Is(err, errUnmeteredRenter) {
		refuse("unmetered_renter", err)
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
	if err = sendMsg(s, protocol.JobMsg{Type: "accept", Record: lease, ImageCached: cached.Ref != ""}); err != nil {
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
	img := cached
	if err = r.welcomeInput(s, p); err == nil && img.Ref == "" { // data in (inputs.go)
		img, err = r.receiveImage(s, in, p)
	}
	if err == nil { // data in: the input arrives on a stream of its own (inputs.go)
		err = r.awaitInput(s, in, p, lease)
	}
	// A pull and the start take their time: the renter waits up to its start deadline
	// after the image (renterstart.go), and learns the outcome either way.
	s.SetDeadline(time.Now().Add(providerStartTimeout))
	if err == nil {
		err = r.notCancelled(p.Job)
	}
	if err == nil {
		err = r.start(p, lease, img, gpus)
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

// notCancelled says why a leased job must not start: its renter cancelled it meanwhile
// (it gave up waiting for the start, HandleControl).
func (r *Runner) notCancelled(job string) error {
	if j, err := r.ledger.GetJob(job); err == nil && j.State != ledger.JobLeased {
		return fmt.Errorf("not started: %s", j.Error)
	}
	return nil
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
	if err := r.refuseUnmetered(p.Renter, now); err != nil {
		return nil, nil, 0, err
	}
	r.mu.Lock()
	closed, detectErr := r.closed, r.detectErr
	r.mu.Unlock()
	if detectErr != nil {
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
	if len(p.Ports) > 0 && r.cfg.MaxTunnels == 0 {
		return nil, nil, 0, jobErr("this provider serves no job ports (its jobs.max_tunnels is 0): propose without ports, or pick another provider")
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
	if err := r.checkInput(p); err != nil { // data in (inputs.go)
		return nil, nil, 0, err
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
		Ports:  p.Ports,
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
