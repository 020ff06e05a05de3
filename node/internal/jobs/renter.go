package jobs

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// Offers are the offers a renter knows and finds (the offers subsystem's catalogue).
type Offers interface {
	// Get returns the held offer of a provider and when it was last received.
	Get(p peer.ID) (*protocol.SignedOffer, time.Time)
	// Search finds offers, asking the network for more.
	Search(ctx context.Context, f api.SearchFilter) ([]api.OfferRow, error)
}

// Escrow is the renter's side of escrow holds (the money subsystem).
type Escrow interface {
	// RequestHold asks the coordinator to set the proposal's maximum cost aside and
	// returns the signed hold.
	RequestHold(ctx context.Context, p protocol.Proposal, coordinator peer.ID) ([]byte, error)
	// ReleaseHold asks for a job's hold back now, once.
	ReleaseHold(ctx context.Context, job, coordinator string) (api.BalanceView, error)
	// ReleaseAfterFailure asks for a failed proposal's hold back, a few times.
	ReleaseAfterFailure(job string, coordinator peer.ID)
	// Dispute sends the job's signed dispute of its receipt to the coordinator holding
	// its escrow.
	Dispute(ctx context.Context, j ledger.Job) error
	// ReportAbandoned sends the renter's account of a job whose lease ended with no
	// receipt (its lease and latest checkpoint, countersigned) to that coordinator.
	ReportAbandoned(ctx context.Context, j ledger.Job) error
}

// RenterDeps are what a node's renter side needs.
type RenterDeps struct {
	// Peer gives the node's ID and key (proposals and countersignatures are signed with
	// it) and reaches providers.
	Peer    *p2p.Peer
	Ledger  *ledger.JobStore
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	Offers  Offers
	Escrow  Escrow
	// CheckpointInterval is how often Meter asks for each running job's checkpoint.
	CheckpointInterval time.Duration
}

// Renter is a node's side of the jobs it rents: it proposes them, follows and cancels them,
// takes their receipts and fetches their output. Every role has one; it also lists and
// shows the jobs a provider runs.
type Renter struct {
	peer    *p2p.Peer
	ledger  *ledger.JobStore
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	offers  Offers
	escrow  Escrow
	// interval is how often the meter asks for checkpoints.
	interval time.Duration
}

// NewRenter returns a node's renter side.
func NewRenter(d RenterDeps) *Renter {
	interval := d.CheckpointInterval
	if interval <= 0 || interval > protocol.CheckpointInterval {
		interval = protocol.CheckpointInterval
	}
	return &Renter{peer: d.Peer, ledger: d.Ledger, clock: d.Clock, log: d.Log, metrics: d.Metrics, offers: d.Offers, escrow: d.Escrow, interval: interval}
}

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
	var item *protocol.OfferGPUs
	for i, g := range so.Offer.GPUs {
		if g.Model == model || (model == "" && len(so.Offer.GPUs) == 1) {
			item = &so.Offer.GPUs[i]
		}
	}
	if item == nil {
		return api.JobView{}, false, api.Invalid(fmt.Errorf("provider %s offers several models or not %q: name the offer (--offer %s/MODEL)", provider, model, provider))
	}
	if req.Egress && so.Offer.Egress == "" {
		return api.JobView{}, false, api.Invalid(fmt.Errorf("provider %s gives jobs no network: drop --egress, or pick an offer with egress (gpunex offers search --egress)", provider))
	}
	maxPrice := item.PricePerGPUHour
	if req.MaxPrice != "" {
		if maxPrice, err = protocol.ParseUSDC(req.MaxPrice); err != nil {
			return api.JobView{}, false, api.Invalid(fmt.Errorf("max price: %w", err))
		}
	}
	p := r.proposal(req, provider, item.Model, maxPrice, img)
	if len(so.Offer.Addrs) > 0 {
		if ai, err := peer.AddrInfosFromP2pAddrs(multiaddrs(so.Offer.Addrs)...); err == nil {
			for _, a := range ai {
				r.peer.Host.Peerstore().AddAddrs(a.ID, a.Addrs, 10*time.Minute)
			}
		}
	}
	// A provider that does not answer within a step's time is given up on.
	dctx, cancel := context.WithTimeout(ctx, jobStepTimeout)
	defer cancel()
	if err := r.peer.Reach(dctx, provider); err != nil {
		return api.JobView{}, false, err
	}
	s, err := r.peer.OpenStream(dctx, provider, protocol.JobProtocol)
	if err != nil {
		return api.JobView{}, false, fmt.Errorf("reach provider %s: %w", provider, err)
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
		// A job that does not run gives its hold back: the provider confirms it never ran.
		// A refused proposal's hold comes back before this returns, so that the next offer
		// of a placement finds the funds; a job that failed after its lease is retried
		// later (its provider may still be marking the failure).
		defer func() {
			if err == nil {
				return
			}
			if !leased {
				rctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				if _, rerr := r.escrow.ReleaseHold(rctx, p.Job, holder.String()); rerr == nil {
					return
				}
			}
			go r.escrow.ReleaseAfterFailure(p.Job, holder)
		}()
	}
	praw, err := r.seal(p)
	if err != nil {
		return api.JobView{}, false, err
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "propose", Record: praw}); err != nil {
		return api.JobView{}, false, err
	}
	m, err := readMsg(in)
	if err != nil {
		return api.JobView{}, false, fmt.Errorf("provider's answer: %w", err)
	}
	// A refusal is a conflict with the provider's state or policy (409), and wraps ErrRefused.
	switch m.Type {
	case "accept":
	case "counter":
		return api.JobView{}, false, api.Conflict(fmt.Errorf("%w: the provider counters at %s USDC per GPU-hour (%s); propose again with that maximum price", ErrRefused, m.Price, m.Reason))
	case "reject":
		reason := strings.TrimPrefix(m.Reason, ErrRefused.Error()+": ")
		if holdErr != nil && strings.Contains(reason, "escrow") {
			reason += " (no hold was given: " + holdErr.Error() + ")"
		}
		return api.JobView{}, false, api.Conflict(fmt.Errorf("%w: %s", ErrRefused, reason))
	default:
		return api.JobView{}, false, fmt.Errorf("provider answered %q: %s", m.Type, m.Reason)
	}
	accepted := m
	l, err := protocol.CheckLease(m.Record, praw, &p)
	if err != nil {
		return api.JobView{}, false, fmt.Errorf("the provider's lease does not hold: %w", err)
	}
	leaseRaw := m.Record
	cs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindLease, SHA256: protocol.RecordSHA256(leaseRaw), Job: p.Job,
		Signer: r.peer.ID.String(), SignedAt: r.clock.Now().UTC(),
	}, r.peer.Key)
	if err != nil {
		return api.JobView{}, true, err
	}
	now := r.clock.Now()
	if err := r.ledger.CreateJob(ledger.Job{
		ID: p.Job, Side: "renter", Peer: provider.String(), State: ledger.JobLeased, CreatedAt: now, UpdatedAt: now,
		Proposal: praw, Lease: leaseRaw, LeaseCountersig: cs,
	}); err != nil {
		return api.JobView{}, true, err
	}
	fail := func(err error) (api.JobView, bool, error) {
		r.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
			j.State, j.Error, j.UpdatedAt = ledger.JobFailed, err.Error(), r.clock.Now()
			return nil
		})
		return api.JobView{}, true, err
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "countersign", Record: cs}); err != nil {
		return fail(err)
	}
	if img != nil && !accepted.ImageCached {
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
	if m, err = readMsg(in); err != nil {
		return fail(fmt.Errorf("waiting for the start: %w", err))
	}
	if m.Type != "started" || m.Status == nil {
		return fail(fmt.Errorf("the provider could not start the job: %s", m.Reason))
	}
	j, err := r.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
		now := r.clock.Now()
		j.State, j.StartedAt, j.GPUs, j.UpdatedAt = ledger.JobRunning, m.Status.StartedAt, m.Status.GPUUUIDs, now
		j.ObservedStart, j.LastSeenRunning = now, now
		return nil
	})
	if err != nil {
		return api.JobView{}, true, err
	}
	r.log.Info("job started", "job", p.Job, "provider", provider, "price_usdc", l.Price, "ends_at", l.EndsAt)
	return viewJob(j, r.clock.Now()), true, nil
}

// live says whether an offer is unexpired, not withdrawn and certified at now (as the
// offer book counts it).
func live(so *protocol.SignedOffer, now time.Time) bool {
	return so.Offer.Withdrawn == "" && now.Before(so.Offer.ExpiresAt) && so.Cert != nil && now.Before(so.Cert.ExpiresAt)
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

// control opens a job-control stream to a job's provider and sends one request.
func (r *Renter) control(ctx context.Context, j ledger.Job, m protocol.JobMsg) (network.Stream, *bufio.Reader, error) {
	p, err := peer.Decode(j.Peer)
	if err != nil {
		return nil, nil, err
	}
	if err := r.peer.Reach(ctx, p); err != nil {
		return nil, nil, err
	}
	s, err := r.peer.OpenStream(ctx, p, protocol.JobControlProtocol)
	if err != nil {
		return nil, nil, fmt.Errorf("reach provider %s: %w", p, err)
	}
	m.Job = j.ID
	if err := sendMsg(s, m); err != nil {
		s.Reset()
		return nil, nil, err
	}
	return s, bufio.NewReader(s), nil
}

// renterJob returns a job this node rented.
func (r *Renter) renterJob(id string) (ledger.Job, error) {
	j, err := r.ledger.GetJob(id)
	if errors.Is(err, ledger.ErrNotFound) {
		return j, fmt.Errorf("%w: no job %s", api.ErrNotFound, id)
	}
	return j, err
}

// JobLogs writes a job's output to w, following it until the job ends when follow is set.
// When the job has ended, the provider's receipt is checked, countersigned and kept.
func (r *Renter) JobLogs(ctx context.Context, id string, follow bool, w io.Writer) (api.JobView, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return api.JobView{}, err
	}
	if j.Side == "provider" {
		return api.JobView{}, api.Invalid(errors.New("this node runs the job: read its log in the job's folder"))
	}
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "logs", Follow: follow})
	if err != nil {
		return viewJob(j, r.clock.Now()), err
	}
	defer s.Close()
	go func() { <-ctx.Done(); s.Reset() }()
	for {
		m, err := readMsg(in)
		if err != nil {
			return viewJob(j, r.clock.Now()), fmt.Errorf("log stream: %w", err)
		}
		switch m.Type {
		case "log":
			if _, err := w.Write(m.Data); err != nil {
				return viewJob(j, r.clock.Now()), err
			}
			if f, ok := w.(interface{ Flush() }); ok {
				f.Flush()
			}
		case "end":
			if len(m.Record) > 0 {
				if j, err = r.takeReceipt(ctx, j, m.Record); err != nil {
					return viewJob(j, r.clock.Now()), err
				}
			}
			v := viewJob(j, r.clock.Now())
			if m.Status != nil && len(m.Record) == 0 {
				v.State, v.Error = m.Status.State, m.Status.Error
			}
			return v, nil
		case "error":
			return viewJob(j, r.clock.Now()), errors.New(m.Reason)
		}
	}
}

// takeReceipt checks a provider's final receipt against the lease and against what this
// node observed (observedSeconds), and countersigns it, sends the countersignature back and
// keeps both. A receipt charging more than was observed is not countersigned: the renter
// signs a dispute stating what it observed and sends it to the coordinator instead.
func (r *Renter) takeReceipt(ctx context.Context, j ledger.Job, raw []byte) (ledger.Job, error) {
	if len(j.ReceiptCountersig) > 0 || len(j.Dispute) > 0 {
		return j, nil
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return j, err
	}
	now := r.clock.Now()
	rec, err := protocol.CheckReceipt(raw, j.Lease, l, now)
	if err != nil {
		r.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "stream", protocol.Reason(err)).Inc()
		return j, fmt.Errorf("the provider's receipt does not hold: %w", err)
	}
	if observed, end, ok := r.observedSeconds(j, now); ok && rec.Seconds > observed+int64(protocol.MeterTolerance/time.Second) {
		return r.dispute(ctx, j, raw, rec, observed, end)
	}
	cs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindReceipt, SHA256: protocol.RecordSHA256(raw), Job: j.ID,
		Signer: r.peer.ID.String(), SignedAt: now.UTC(),
	}, r.peer.Key)
	if err != nil {
		return j, err
	}
	j, err = r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		x.State, x.Receipt, x.ReceiptCountersig, x.ExitCode, x.ExitReason, x.UpdatedAt = ledger.JobEnded, raw, cs, rec.ExitCode, rec.Reason, r.clock.Now()
		return nil
	})
	if err != nil {
		return j, err
	}
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "receipt-countersign", Record: cs})
	if err != nil {
		return j, nil // kept here; the provider asks again... or learns it at the next request
	}
	defer s.Close()
	readMsg(in)
	return j, nil
}

// observedSeconds is the longest this node can vouch that a job ran, at now: from when it
// learnt of the start to the earlier of now and one checkpoint interval (plus the
// tolerance) after it last saw the job running. ok is false for a job rented before
// metering (nothing observed to compare with).
func (r *Renter) observedSeconds(j ledger.Job, now time.Time) (secs int64, end time.Time, ok bool) {
	if j.ObservedStart.IsZero() {
		return 0, time.Time{}, false
	}
	end = now
	if !j.LastSeenRunning.IsZero() {
		if b := j.LastSeenRunning.Add(r.interval + protocol.MeterTolerance); b.Before(end) {
			end = b
		}
	}
	return max(0, int64(end.Sub(j.ObservedStart)/time.Second)), end, true
}

// dispute refuses a receipt that charges more than this node observed: it signs what it
// observed, keeps the receipt and the dispute, and sends them to the coordinator.
func (r *Renter) dispute(ctx context.Context, j ledger.Job, raw []byte, rec *protocol.Receipt, observed int64, end time.Time) (ledger.Job, error) {
	observed = min(observed, rec.Seconds-1)
	reason := fmt.Sprintf("the receipt charges %d s; this renter saw the job start at %s and run until %s at the latest (%d s)",
		rec.Seconds, j.ObservedStart.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), observed)
	d := protocol.Dispute{Version: protocol.JobVersion, Job: j.ID, Receipt: protocol.RecordSHA256(raw), Renter: r.peer.ID.String(),
		Provider: rec.Provider, ObservedStart: j.ObservedStart.UTC(), ObservedEnd: end.UTC(), Seconds: observed,
		Amount: protocol.Cost(rec.Price, rec.GPUs, observed), Reason: reason, SignedAt: r.clock.Now().UTC()}
	draw, err := protocol.Seal(protocol.KindDispute, d, r.peer.Key)
	if err != nil {
		return j, err
	}
	r.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "stream", "disputed").Inc()
	r.log.Warn("receipt disputed: it charges more than this node observed", "job", j.ID, "provider", rec.Provider,
		"receipt_seconds", rec.Seconds, "observed_seconds", observed)
	j, err = r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		x.State, x.Receipt, x.Dispute, x.ExitCode, x.ExitReason, x.UpdatedAt = ledger.JobEnded, raw, draw, rec.ExitCode, rec.Reason, r.clock.Now()
		x.Error = "disputed: " + reason
		return nil
	})
	if err != nil {
		return j, err
	}
	if err := r.escrow.Dispute(ctx, j); err != nil {
		r.log.Warn("the dispute did not reach the coordinator; the meter sends it again", "job", j.ID, "err", err)
		return j, nil
	}
	return r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error { x.ReportedAt = r.clock.Now(); return nil })
}

// Meter keeps the usage of this node's running rented jobs countersigned: every
// checkpoint interval it asks each job's provider for a checkpoint and countersigns it
// when it matches what this node observed; it takes the final receipt of a job that ended
// and sends again the disputes that did not reach the coordinator.
func (r *Renter) Meter(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(r.interval):
		}
		js, err := r.ledger.Jobs()
		if err != nil {
			continue
		}
		slots := make(chan struct{}, 16)
		var wg sync.WaitGroup
		for _, j := range js {
			pending := j.State == ledger.JobRunning || (len(j.Dispute) > 0 && j.ReportedAt.IsZero())
			if j.Side != "renter" || !pending {
				continue
			}
			select {
			case <-ctx.Done():
			case slots <- struct{}{}:
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					if j.State == ledger.JobRunning {
						// Asked first, so that a receipt the provider holds is taken even
						// when this node comes back after the lease's end.
						r.meterOnce(ctx, j)
						if cur, err := r.ledger.GetJob(j.ID); err == nil && cur.State == ledger.JobRunning && r.leaseOver(cur) {
							r.reportAbandoned(ctx, cur)
						}
					} else if r.escrow.Dispute(ctx, j) == nil {
						r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error { x.ReportedAt = r.clock.Now(); return nil })
					}
				}()
			}
		}
		wg.Wait()
	}
}

// AbandonAfter is how long after a job's lease ends its renter waits for the receipt
// before it takes the job as abandoned by its provider.
var AbandonAfter = 5 * time.Minute

// leaseOver says whether a running job's lease ended AbandonAfter ago with no receipt.
func (r *Renter) leaseOver(j ledger.Job) bool {
	l, _, err := protocol.OpenLease(j.Lease)
	return err == nil && len(j.Receipt) == 0 && !r.clock.Now().Before(l.EndsAt.Add(AbandonAfter))
}

// reportAbandoned ends a job whose provider sent no receipt by its lease's end, and tells
// the coordinator of its escrow, with the usage this node countersigned as proof that it
// ran: the coordinator counts the job against the provider when its hold expires with no
// report from it (docs/protocols/settlement.md, "Abandoned jobs"). A failed delivery is
// tried again at the next interval, until the hold's grace has passed.
func (r *Renter) reportAbandoned(ctx context.Context, j ledger.Job) {
	now := r.clock.Now()
	why := fmt.Sprintf("abandoned by its provider: no receipt by the lease's end (%d s of usage countersigned)", j.CheckpointSeconds)
	var err error
	told := false
	switch {
	case len(j.Checkpoint) == 0:
		why = "the provider sent no receipt by the lease's end, and no usage was countersigned: nothing to report"
	case protocol.HoldCoordinator(j.Proposal) == "":
		why += "; the job has no escrow hold, so no coordinator to tell"
	default:
		if err = r.escrow.ReportAbandoned(ctx, j); err == nil {
			why, told = why+"; the coordinator was told", true
		}
	}
	// The hold is settled already (the provider reported the job, or it expired): nothing
	// to try again.
	final := err != nil && strings.Contains(err.Error(), "settled already")
	if final {
		why = "the provider sent this node no receipt by the lease's end, and the job's hold is settled already at the coordinator (" + err.Error() + ")"
		err = nil
	}
	if l, _, lerr := protocol.OpenLease(j.Lease); err != nil && !final && lerr == nil && now.Before(l.EndsAt.Add(protocol.HoldGrace)) {
		r.log.Debug("the account of an abandoned job was not delivered; trying again", "job", j.ID, "err", err)
		return
	} else if err != nil {
		why += "; the coordinator could not be told: " + err.Error()
	}
	r.log.Warn("job abandoned by its provider", "job", j.ID, "provider", j.Peer, "detail", why)
	r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		if x.State != ledger.JobRunning {
			return nil
		}
		x.State, x.Error, x.UpdatedAt = ledger.JobFailed, why, now
		if told {
			x.AbandonReported = now
		}
		return nil
	})
}

// checkObserved checks a provider's checkpoint of a job against its lease and against what
// this node observed by now: no more seconds than since it saw the start (plus the
// tolerance), no fewer than the last one it countersigned.
func checkObserved(j ledger.Job, raw []byte, now time.Time) (*protocol.Checkpoint, error) {
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return nil, err
	}
	cp, err := protocol.CheckCheckpoint(raw, j.Lease, l, now)
	if err != nil {
		return nil, err
	}
	limit := int64(now.Sub(j.ObservedStart)/time.Second) + int64(protocol.MeterTolerance/time.Second)
	switch {
	case j.ObservedStart.IsZero():
		return nil, errors.New("this node did not see the job start")
	case cp.Seconds > limit:
		return nil, fmt.Errorf("checkpoint counts %d s; this node saw the job start %d s ago", cp.Seconds, limit-int64(protocol.MeterTolerance/time.Second))
	case cp.Seconds < j.CheckpointSeconds:
		return nil, fmt.Errorf("checkpoint counts %d s, less than the %d s already countersigned", cp.Seconds, j.CheckpointSeconds)
	}
	return cp, nil
}

// meterOnce asks a running job's provider for a checkpoint and countersigns it when it is
// no more than this node observed, and no less than the last one.
func (r *Renter) meterOnce(ctx context.Context, j ledger.Job) {
	ctx, cancel := context.WithTimeout(ctx, jobStepTimeout)
	defer cancel()
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "checkpoint"})
	if err != nil {
		r.log.Debug("checkpoint: provider unreachable", "job", j.ID, "err", err)
		return
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	m, err := readMsg(in)
	if err != nil {
		return
	}
	switch m.Type {
	case "end":
		if len(m.Record) > 0 {
			if _, err := r.takeReceipt(ctx, j, m.Record); err != nil {
				r.log.Warn("the job's receipt was not taken", "job", j.ID, "err", err)
			}
		} else if m.Status != nil && m.Status.State == ledger.JobFailed {
			r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
				x.State, x.Error, x.UpdatedAt = ledger.JobFailed, m.Status.Error, r.clock.Now()
				return nil
			})
		}
		return
	case "checkpoint":
	default:
		return
	}
	now := r.clock.Now()
	cp, err := checkObserved(j, m.Record, now)
	if err != nil {
		r.metrics.RecordsRejected.WithLabelValues(string(protocol.KindCheckpoint), "stream", protocol.Reason(err)).Inc()
		r.log.Warn("usage checkpoint refused", "job", j.ID, "provider", j.Peer, "err", err)
		sendMsg(s, protocol.JobMsg{Type: "refuse", Reason: err.Error()})
		return
	}
	cs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindCheckpoint, SHA256: protocol.RecordSHA256(m.Record), Job: j.ID,
		Signer: r.peer.ID.String(), SignedAt: now.UTC(),
	}, r.peer.Key)
	if err != nil {
		return
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "countersign", Record: cs}); err != nil {
		return
	}
	r.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		if cp.Seconds >= x.CheckpointSeconds {
			x.Checkpoint, x.CheckpointCountersig, x.CheckpointSeconds, x.MeteredAt = m.Record, cs, cp.Seconds, now
		}
		x.LastSeenRunning = now
		return nil
	})
	readMsg(in)
}

// JobStatus returns a job, asking its provider for news when this node rented it.
func (r *Renter) JobStatus(ctx context.Context, id string) (api.JobView, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return api.JobView{}, err
	}
	if j.Side == "renter" && j.State == ledger.JobRunning {
		v, err := r.JobLogs(ctx, id, false, io.Discard)
		if err == nil {
			return v, nil
		}
	}
	return viewJob(j, r.clock.Now()), nil
}

// CancelJob asks the provider to stop a job.
func (r *Renter) CancelJob(ctx context.Context, id string) (api.JobView, error) {
	j, err := r.renterJob(id)
	if err != nil {
		return api.JobView{}, err
	}
	if j.Side != "renter" {
		return api.JobView{}, api.Invalid(errors.New("only the renter cancels a job"))
	}
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "cancel"})
	if err != nil {
		return viewJob(j, r.clock.Now()), err
	}
	defer s.Close()
	m, err := readMsg(in)
	if err != nil {
		return viewJob(j, r.clock.Now()), err
	}
	if m.Type == "error" {
		return viewJob(j, r.clock.Now()), errors.New(m.Reason)
	}
	if m.Status != nil {
		v := api.JobView{JobStatus: *m.Status}
		v.State, v.Side, v.Peer = "stopping", "renter", j.Peer
		return v, nil
	}
	return viewJob(j, r.clock.Now()), nil
}

// FetchOutput streams the tar of what the job wrote to /output.
func (r *Renter) FetchOutput(ctx context.Context, id string, w io.Writer) error {
	j, err := r.renterJob(id)
	if err != nil {
		return err
	}
	if j.Side != "renter" {
		return api.Invalid(fmt.Errorf("this node runs job %s: its output is in the job's folder", id))
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return err
	}
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "fetch"})
	if err != nil {
		return err
	}
	defer s.Close()
	// A job's /output holds at most its scratch size (the provider kills it past that, with
	// a little overshoot); whatever a provider sends beyond twice that is refused.
	max := OutputFetchLimit(l.Limits.ScratchBytes)
	n, err := io.Copy(w, io.LimitReader(in, max+1))
	if err == nil && n > max {
		return fmt.Errorf("%w: the provider sent more than %d MB of output for a job whose /output holds at most %d MB: stopped",
			protocol.ErrTooLarge, max>>20, l.Limits.ScratchBytes>>20)
	}
	return err
}

// OutputFetchLimit is the most a renter takes when fetching the output of a job whose
// /output is bounded by scratch bytes: twice that and 64 MiB, for the overshoot a job
// makes before it is stopped and the archive's headers.
func OutputFetchLimit(scratch int64) int64 { return 2*scratch + 64<<20 }

// Jobs lists the jobs this node runs or rented, newest first.
func (r *Renter) Jobs() ([]api.JobView, error) {
	js, err := r.ledger.Jobs()
	if err != nil {
		return nil, err
	}
	out := []api.JobView{}
	for _, j := range js {
		if j.State != ledger.JobReleased { // a job ID whose hold was released: it never ran
			out = append(out, viewJob(j, r.clock.Now()))
		}
	}
	return out, nil
}
