package node

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
	"github.com/gpunex/gpunex/protocol"
)

// JobRequest is what a renter asks for (POST /v1/jobs).
type JobRequest struct {
	// Provider (a peer ID) or Offer (an offer ID, "<peer>/<MODEL>") names where to run.
	Provider string `json:"provider,omitempty"`
	Offer    string `json:"offer,omitempty"`
	GPUs     int    `json:"gpus"`
	// MaxSeconds is the longest the job may run.
	MaxSeconds int64 `json:"max_seconds"`
	// MaxPrice in USDC per GPU-hour; empty takes the offer's price.
	MaxPrice string `json:"max_price_usdc,omitempty"`
	// Image (a registry reference) or ImageArchive (a path to an OCI archive on this
	// machine, streamed to the provider).
	Image        string   `json:"image,omitempty"`
	ImageArchive string   `json:"image_archive,omitempty"`
	Args         []string `json:"args,omitempty"`
	Env          []string `json:"env,omitempty"`
	Egress       bool     `json:"egress,omitempty"`
}

// ProposeJob negotiates a job with a provider and, once both sides signed the lease and the
// image is delivered, returns the started job.
func (n *Node) ProposeJob(ctx context.Context, req JobRequest) (_ JobView, err error) {
	var provider peer.ID
	var model string
	switch {
	case req.Offer != "":
		if provider, model, err = protocol.ParseOfferID(req.Offer); err != nil {
			return JobView{}, badRequest(err)
		}
	case req.Provider != "":
		if provider, err = peer.Decode(req.Provider); err != nil {
			return JobView{}, badRequest(fmt.Errorf("provider %q: not a peer ID", req.Provider))
		}
	default:
		return JobView{}, badRequest(errors.New("name a provider or an offer"))
	}
	so, _ := n.book.get(provider)
	if so == nil || !isLive(so, n.clock.Now()) {
		// Not held yet: a search brings it (and checks it).
		if _, err := n.Search(ctx, SearchFilter{Model: model}); err != nil {
			return JobView{}, err
		}
		if so, _ = n.book.get(provider); so == nil || !isLive(so, n.clock.Now()) {
			return JobView{}, fmt.Errorf("%w: no live, certified offer from %s", ErrNotFound, provider)
		}
	}
	var item *protocol.OfferGPUs
	for i, g := range so.Offer.GPUs {
		if g.Model == model || (model == "" && len(so.Offer.GPUs) == 1) {
			item = &so.Offer.GPUs[i]
		}
	}
	if item == nil {
		return JobView{}, badRequest(fmt.Errorf("provider %s offers several models or not %q: name the offer (--offer %s/MODEL)", provider, model, provider))
	}
	maxPrice := item.PricePerGPUHour
	if req.MaxPrice != "" {
		if maxPrice, err = protocol.ParseUSDC(req.MaxPrice); err != nil {
			return JobView{}, badRequest(fmt.Errorf("max price: %w", err))
		}
	}
	var id [8]byte
	rand.Read(id[:])
	p := protocol.Proposal{
		Version: protocol.JobVersion, Job: hex.EncodeToString(id[:]), Renter: n.id.String(), Provider: provider.String(),
		IssuedAt: n.clock.Now().UTC(), Model: item.Model, GPUs: req.GPUs, MaxSeconds: req.MaxSeconds, MaxPrice: maxPrice,
		Image: protocol.Image{Ref: req.Image}, Args: req.Args, Env: req.Env, Egress: req.Egress,
	}
	var archive *os.File
	if req.ImageArchive != "" {
		if archive, err = os.Open(req.ImageArchive); err != nil {
			return JobView{}, badRequest(fmt.Errorf("image archive: %w", err))
		}
		defer archive.Close()
		if p.Image.ArchiveSHA256, p.Image.ArchiveSize, err = fileSHA256(archive); err != nil {
			return JobView{}, err
		}
	}
	// The escrow hold: the coordinator sets the job's maximum cost aside. A renter without
	// a coordinator or funds proposes without one; a provider requiring escrow says so.
	var holdErr error
	p.Hold, holdErr = n.requestHold(ctx, p)
	if holdErr != nil {
		n.log.Info("job proposed without an escrow hold", "job", p.Job, "why", holdErr)
	} else {
		// A job that does not run gives its hold back: the provider confirms it never ran.
		defer func() {
			if err != nil {
				go n.releaseAfterFailure(p.Job)
			}
		}()
	}
	praw, err := protocol.Seal(protocol.KindProposal, p, n.key)
	if err != nil {
		return JobView{}, badRequest(err)
	}
	if _, err := protocol.CheckProposal(praw, n.clock.Now()); err != nil {
		return JobView{}, badRequest(err)
	}

	if len(so.Offer.Addrs) > 0 {
		if ai, err := peer.AddrInfosFromP2pAddrs(multiaddrs(so.Offer.Addrs)...); err == nil {
			for _, a := range ai {
				n.host.Peerstore().AddAddrs(a.ID, a.Addrs, 10*time.Minute)
			}
		}
	}
	if err := n.reach(ctx, provider); err != nil {
		return JobView{}, err
	}
	s, err := n.openStream(ctx, provider, protocol.JobProtocol)
	if err != nil {
		return JobView{}, fmt.Errorf("reach provider %s: %w", provider, err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	in := bufio.NewReader(s)
	if err := sendMsg(s, jobMsg{Type: "propose", Record: praw}); err != nil {
		return JobView{}, err
	}
	m, err := readMsg(in)
	if err != nil {
		return JobView{}, fmt.Errorf("provider's answer: %w", err)
	}
	switch m.Type {
	case "accept":
	case "counter":
		return JobView{}, fmt.Errorf("%w: the provider counters at %s USDC per GPU-hour (%s); propose again with that maximum price", ErrJobRefused, m.Price, m.Reason)
	case "reject":
		reason := strings.TrimPrefix(m.Reason, ErrJobRefused.Error()+": ")
		if holdErr != nil && strings.Contains(reason, "escrow") {
			reason += " (no hold was given: " + holdErr.Error() + ")"
		}
		return JobView{}, fmt.Errorf("%w: %s", ErrJobRefused, reason)
	default:
		return JobView{}, fmt.Errorf("provider answered %q: %s", m.Type, m.Reason)
	}
	accepted := m
	l, err := protocol.CheckLease(m.Record, praw, &p)
	if err != nil {
		return JobView{}, fmt.Errorf("the provider's lease does not hold: %w", err)
	}
	leaseRaw := m.Record
	cs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindLease, SHA256: protocol.RecordSHA256(leaseRaw), Job: p.Job,
		Signer: n.id.String(), SignedAt: n.clock.Now().UTC(),
	}, n.key)
	if err != nil {
		return JobView{}, err
	}
	now := n.clock.Now()
	if err := n.ledger.CreateJob(ledger.Job{
		ID: p.Job, Side: "renter", Peer: provider.String(), State: ledger.JobLeased, CreatedAt: now, UpdatedAt: now,
		Proposal: praw, Lease: leaseRaw, LeaseCountersig: cs,
	}); err != nil {
		return JobView{}, err
	}
	fail := func(err error) (JobView, error) {
		n.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
			j.State, j.Error, j.UpdatedAt = ledger.JobFailed, err.Error(), n.clock.Now()
			return nil
		})
		return JobView{}, err
	}
	if err := sendMsg(s, jobMsg{Type: "countersign", Record: cs}); err != nil {
		return fail(err)
	}
	if archive != nil && !accepted.ImageCached {
		s.SetDeadline(time.Now().Add(jobStepTimeout + time.Duration(p.Image.ArchiveSize>>20)*time.Second))
		if _, err := archive.Seek(0, io.SeekStart); err != nil {
			return fail(err)
		}
		if _, err := io.Copy(s, archive); err != nil {
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
	j, err := n.ledger.UpdateJob(p.Job, func(j *ledger.Job) error {
		j.State, j.StartedAt, j.GPUs, j.UpdatedAt = ledger.JobRunning, m.Status.StartedAt, m.Status.GPUUUIDs, n.clock.Now()
		return nil
	})
	if err != nil {
		return JobView{}, err
	}
	n.log.Info("job started", "job", p.Job, "provider", provider, "price_usdc", l.Price, "ends_at", l.EndsAt)
	return viewJob(j), nil
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
func (n *Node) control(ctx context.Context, j ledger.Job, m jobMsg) (network.Stream, *bufio.Reader, error) {
	p, err := peer.Decode(j.Peer)
	if err != nil {
		return nil, nil, err
	}
	if err := n.reach(ctx, p); err != nil {
		return nil, nil, err
	}
	s, err := n.openStream(ctx, p, protocol.JobControlProtocol)
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
func (n *Node) renterJob(id string) (ledger.Job, error) {
	j, err := n.ledger.GetJob(id)
	if errors.Is(err, ledger.ErrNotFound) {
		return j, fmt.Errorf("%w: no job %s", ErrNotFound, id)
	}
	return j, err
}

// JobLogs writes a job's output to w, following it until the job ends when follow is set.
// When the job has ended, the provider's receipt is checked, countersigned and kept.
func (n *Node) JobLogs(ctx context.Context, id string, follow bool, w io.Writer) (JobView, error) {
	j, err := n.renterJob(id)
	if err != nil {
		return JobView{}, err
	}
	if j.Side == "provider" {
		return JobView{}, badRequest(errors.New("this node runs the job: read its log in the job's folder"))
	}
	s, in, err := n.control(ctx, j, jobMsg{Op: "logs", Follow: follow})
	if err != nil {
		return viewJob(j), err
	}
	defer s.Close()
	go func() { <-ctx.Done(); s.Reset() }()
	for {
		m, err := readMsg(in)
		if err != nil {
			return viewJob(j), fmt.Errorf("log stream: %w", err)
		}
		switch m.Type {
		case "log":
			if _, err := w.Write(m.Data); err != nil {
				return viewJob(j), err
			}
			if f, ok := w.(interface{ Flush() }); ok {
				f.Flush()
			}
		case "end":
			if len(m.Record) > 0 {
				if j, err = n.takeReceipt(ctx, j, m.Record); err != nil {
					return viewJob(j), err
				}
			}
			v := viewJob(j)
			if m.Status != nil && len(m.Record) == 0 {
				v.State, v.Error = m.Status.State, m.Status.Error
			}
			return v, nil
		case "error":
			return viewJob(j), errors.New(m.Reason)
		}
	}
}

// takeReceipt checks a provider's final receipt against the lease, countersigns it, sends
// the countersignature back and keeps both.
func (n *Node) takeReceipt(ctx context.Context, j ledger.Job, raw []byte) (ledger.Job, error) {
	if len(j.ReceiptCountersig) > 0 {
		return j, nil
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return j, err
	}
	r, err := protocol.CheckReceipt(raw, j.Lease, l)
	if err != nil {
		n.metrics.RecordsRejected.WithLabelValues(string(protocol.KindReceipt), "stream", protocol.Reason(err)).Inc()
		return j, fmt.Errorf("the provider's receipt does not hold: %w", err)
	}
	cs, err := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindReceipt, SHA256: protocol.RecordSHA256(raw), Job: j.ID,
		Signer: n.id.String(), SignedAt: n.clock.Now().UTC(),
	}, n.key)
	if err != nil {
		return j, err
	}
	j, err = n.ledger.UpdateJob(j.ID, func(x *ledger.Job) error {
		x.State, x.Receipt, x.ReceiptCountersig, x.ExitCode, x.ExitReason, x.UpdatedAt = ledger.JobEnded, raw, cs, r.ExitCode, r.Reason, n.clock.Now()
		return nil
	})
	if err != nil {
		return j, err
	}
	s, in, err := n.control(ctx, j, jobMsg{Op: "receipt-countersign", Record: cs})
	if err != nil {
		return j, nil // kept here; the provider asks again... or learns it at the next request
	}
	defer s.Close()
	readMsg(in)
	return j, nil
}

// JobStatus returns a job, asking its provider for news when this node rented it.
func (n *Node) JobStatus(ctx context.Context, id string) (JobView, error) {
	j, err := n.renterJob(id)
	if err != nil {
		return JobView{}, err
	}
	if j.Side == "renter" && j.State == ledger.JobRunning {
		v, err := n.JobLogs(ctx, id, false, io.Discard)
		if err == nil {
			return v, nil
		}
	}
	return viewJob(j), nil
}

// CancelJob asks the provider to stop a job.
func (n *Node) CancelJob(ctx context.Context, id string) (JobView, error) {
	j, err := n.renterJob(id)
	if err != nil {
		return JobView{}, err
	}
	if j.Side != "renter" {
		return JobView{}, badRequest(errors.New("only the renter cancels a job"))
	}
	s, in, err := n.control(ctx, j, jobMsg{Op: "cancel"})
	if err != nil {
		return viewJob(j), err
	}
	defer s.Close()
	m, err := readMsg(in)
	if err != nil {
		return viewJob(j), err
	}
	if m.Type == "error" {
		return viewJob(j), errors.New(m.Reason)
	}
	if m.Status != nil {
		v := *m.Status
		v.State, v.Side, v.Peer = "stopping", "renter", j.Peer
		return v, nil
	}
	return viewJob(j), nil
}

// FetchOutput streams the tar of what the job wrote to /output.
func (n *Node) FetchOutput(ctx context.Context, id string, w io.Writer) error {
	j, err := n.renterJob(id)
	if err != nil {
		return err
	}
	if j.Side != "renter" {
		return badRequest(fmt.Errorf("this node runs job %s: its output is in the job's folder", id))
	}
	s, in, err := n.control(ctx, j, jobMsg{Op: "fetch"})
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = io.Copy(w, in)
	return err
}

// Jobs lists the jobs this node runs or rented, newest first.
func (n *Node) Jobs() ([]JobView, error) {
	js, err := n.ledger.Jobs()
	if err != nil {
		return nil, err
	}
	out := []JobView{}
	for _, j := range js {
		if j.State != ledger.JobReleased { // a job ID whose hold was released: it never ran
			out = append(out, viewJob(j))
		}
	}
	return out, nil
}
