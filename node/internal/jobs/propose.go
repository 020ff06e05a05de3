package jobs

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
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

// The renter's end of the job stream (/gpunex/job/1.0.0): a proposal to one provider's
// offer, with an escrow hold, and once the provider leased GPUs for it, the lease
// countersigned, the image archive sent and the start awaited (docs/protocols/jobs.md).
// A job asked for by model goes through placement.go first. The provider's end is
// decide.go.

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

// proposal is the unsigned proposal of req to provider, for model at price at most, under
// a new job ID.
func (r *Renter) proposal(req api.JobRequest, provider peer.ID, model string, price protocol.MicroUSDC, img *archive) protocol.Proposal {
	var id [8]byte
	rand.Read(id[:])
	p := protocol.Proposal{
		Version: protocol.JobVersion, Job: hex.EncodeToString(id[:]), Renter: r.peer.ID.String(), Provider: provider.String(),
		IssuedAt: r.clock.Now().UTC(), Model: model, GPUs: req.GPUs, MaxSeconds: req.MaxSeconds, MaxPrice: price,
		Image: protocol.Image{Ref: req.Image}, Args: req.Args, Env: req.Env, Egress: req.Egress,
	}
	if img != nil {
		p.Image.ArchiveSHA256, p.Image.ArchiveSize = img.sha256, img.size
	}
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
	if so.Cert != nil {
		holder = so.Cert.Signer
	}
	p.Hold, holdErr = r.escrow.RequestHold(ctx, p, holder)
	if holdErr != nil {
		r.log.Info("job proposed without an escrow hold", "job", p.Job, "coordinator", holder, "why", holdErr)
	} else {
		defer func() {
			if err != nil {
				r.giveHoldBack(p.Job, holder, leased)
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
// never ran. A refused proposal's hold comes back before propose returns, so that the next
// offer of a placement finds the funds; a job that failed after its lease is retried
// later (its provider may still be marking the failure).
func (r *Renter) giveHoldBack(job string, holder peer.ID, leased bool) {
	if !leased {
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
	if img != nil && !imageCached {
		s.SetDeadline(time.Now().Add(jobStepTimeout + time.Duration(p.Image.ArchiveSize>>20)*time.Second))
		if _, err := img.f.Seek(0, io.SeekStart); err != nil {
			return fail(err)
		}
		if _, err := io.Copy(s, img.f); err != nil {
			return fail(fmt.Errorf("send image archive: %w", err))
		}
	}
	// The provider takes up to 10 minutes to pull the image and start: wait for its word
	// rather than give up on a job it may still start (and charge).
	s.SetDeadline(time.Now().Add(providerStartTimeout + time.Minute))
	m, err := readMsg(in)
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
