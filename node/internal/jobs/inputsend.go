package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Data in, the renter's end (docs/protocols/jobs.md, "Data in"): a request's inputs are
// hashed once (openInputs, inputwalk.go) however many offers it is proposed to; each
// proposal carries the manifest's reference (inputRef); an offer that takes no input, or a
// smaller one, is passed over before anything is sent (checkOfferInput); once the lease
// holds, the input goes on the job-input stream (sendInput): only the chunks the provider
// asks for, and again on a new stream, for what is still missing, when a stream is cut.
// Where each input stands is kept for the API (Uploads, a job's view).

// inputAttempts is how many job-input streams a job's input is given, each resuming where
// the last stopped, within the input's deadline.
const inputAttempts = 4

// renterInputs are the inputs of the requests being proposed, and where recent uploads
// stand.
type renterInputs struct {
	mu     sync.Mutex
	sets   map[string]*heldInput // by request (inputKey)
	byJob  map[string]*heldInput // by the job IDs of their proposals
	recent []*inputProgress      // in flight, or ended less than a minute ago
}

// heldInput is a request's hashed input while the request runs.
type heldInput struct {
	set  *inputSet
	prog *inputProgress
	refs int
	jobs []string
}

func newRenterInputs() *renterInputs {
	return &renterInputs{sets: map[string]*heldInput{}, byJob: map[string]*heldInput{}}
}

// inputKey names a request's input: its paths and progress name.
func inputKey(req api.JobRequest) string {
	return req.Progress + "\x00" + strings.Join(req.Inputs, "\x00")
}

// openInputs hashes a request's inputs and holds them until release is called; nothing
// to do for a request without inputs.
func (r *Renter) openInputs(req api.JobRequest) (release func(), err error) {
	if len(req.Inputs) == 0 {
		return func() {}, nil
	}
	ri := r.inputs
	key := inputKey(req)
	ri.mu.Lock()
	h := ri.sets[key]
	if h == nil {
		h = &heldInput{prog: ri.track(req.Progress, r.clock.Now())}
		ri.sets[key] = h
	}
	h.refs++
	ri.mu.Unlock()
	release = func() {
		ri.mu.Lock()
		defer ri.mu.Unlock()
		if h.refs--; h.refs == 0 {
			delete(ri.sets, key)
			for _, j := range h.jobs {
				delete(ri.byJob, j)
			}
			h.prog.end(nil, r.clock.Now())
		}
	}
	if h.set == nil { // the first holder hashes (concurrent identical requests share it)
		set, err := buildInput(req.Inputs, h.prog)
		if err != nil {
			h.prog.end(err, r.clock.Now())
			release()
			return nil, err
		}
		ri.mu.Lock()
		h.set = set
		ri.mu.Unlock()
	}
	return release, nil
}

// inputRef is the input reference of a proposal of req under job ID job: nil without
// inputs. The job is recorded for sendInput.
func (r *Renter) inputRef(req api.JobRequest, job string) *protocol.InputRef {
	if len(req.Inputs) == 0 {
		return nil
	}
	ri := r.inputs
	ri.mu.Lock()
	defer ri.mu.Unlock()
	h := ri.sets[inputKey(req)]
	if h == nil || h.set == nil {
		return nil
	}
	h.jobs = append(h.jobs, job)
	ri.byJob[job] = h
	ref := h.set.ref
	return &ref
}

// checkOfferInput passes over an offer whose provider takes no input, or a smaller one
// than the proposal's, before anything is sent.
func checkOfferInput(so *protocol.SignedOffer, in *protocol.InputRef) error {
	if in == nil {
		return nil
	}
	switch max := so.Offer.MaxInputBytes; {
	case max == 0:
		return api.Conflict(jobErr("provider %s takes no input data (its offer states no largest input: it takes none, or runs a gpunex from before inputs): nothing was sent", so.Signer))
	case in.Bytes > max:
		return api.Conflict(jobErr("an input of %s, provider %s takes at most %s: nothing was sent", api.BytesText(in.Bytes), so.Signer, api.BytesText(max)))
	}
	return nil
}

// inputWelcomed reads, for a job with an input, the provider's word on the job stream that
// it recorded the lease and takes the input now.
func inputWelcomed(in *bufio.Reader, p *protocol.Proposal) error {
	if p.Input == nil {
		return nil
	}
	m, err := readMsg(in)
	if err != nil {
		return fmt.Errorf("waiting for the provider to take the input: %w", err)
	}
	if m.Type != "input" {
		return fmt.Errorf("the provider does not take the input: %s", m.Reason)
	}
	return nil
}

// inputRefusal is the provider's refusal of an input stream: trying again will not help.
type inputRefusal struct{ reason string }

func (e *inputRefusal) Error() string { return "the provider refused the input: " + e.reason }

// sendInput sends a leased job's input on job-input streams, resuming on a new stream
// where one is cut, until the provider has all of it or the input's deadline.
func (r *Renter) sendInput(p *protocol.Proposal) error {
	if p.Input == nil {
		return nil
	}
	r.inputs.mu.Lock()
	h := r.inputs.byJob[p.Job]
	r.inputs.mu.Unlock()
	if h == nil || h.set == nil {
		return fmt.Errorf("the input of job %s is no longer held here", p.Job)
	}
	j, err := r.ledger.GetJob(p.Job)
	if err != nil {
		return err
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return err
	}
	provider, err := peer.Decode(p.Provider)
	if err != nil {
		return err
	}
	h.prog.uploading(p.Job, p.Provider, r.clock.Now())
	err = h.set.unchanged()
	if err == nil {
		deadline := time.Now().Add(protocol.InputDeadline(l, p).Sub(r.clock.Now()))
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		for attempt := 1; ; attempt++ {
			if err = r.uploadInput(ctx, provider, p, h.set, h.prog); err == nil {
				break
			}
			var refused *inputRefusal
			if errors.As(err, &refused) || ctx.Err() != nil || attempt == inputAttempts {
				break
			}
			r.log.Info("a job's input stream was cut: resuming on a new one", "job", p.Job, "attempt", attempt, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
	}
	h.prog.end(err, r.clock.Now())
	if err != nil {
		return fmt.Errorf("sending the input: %w", err)
	}
	return nil
}

// uploadInput sends the input on one job-input stream: the job, the manifest, then the
// chunks the provider asks for, one chunk's memory at a time.
func (r *Renter) uploadInput(ctx context.Context, provider peer.ID, p *protocol.Proposal, set *inputSet, prog *inputProgress) error {
	s, err := r.peer.OpenStream(ctx, provider, protocol.JobInputProtocol)
	if err != nil {
		return err
	}
	defer s.Close()
	go func() { <-ctx.Done(); s.Reset() }()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	in := bufio.NewReader(s)
	// The provider's answer after a failed write says why (a refused chunk, its deadline).
	why := func(err error) error {
		s.SetReadDeadline(time.Now().Add(2 * time.Second))
		var m protocol.InputMsg
		if protocol.ReadJSONFrame(in, protocol.MaxInputMsgFrame, &m) == nil && m.Type == "error" {
			return &inputRefusal{m.Reason}
		}
		return err
	}
	if err := protocol.WriteJSONFrame(s, protocol.InputMsg{Type: "open", Job: p.Job}); err != nil {
		return err
	}
	var m protocol.InputMsg
	if err := protocol.ReadJSONFrame(in, protocol.MaxInputMsgFrame, &m); err != nil {
		return err
	}
	if m.Type != "ready" {
		return &inputRefusal{m.Reason}
	}
	if err := protocol.WriteFrame(s, set.manifest); err != nil {
		return why(err)
	}
	if err := protocol.ReadJSONFrame(in, protocol.MaxInputMsgFrame, &m); err != nil {
		return err
	}
	switch m.Type {
	case "done":
		return nil
	case "error":
		return &inputRefusal{m.Reason}
	case "missing":
	default:
		return fmt.Errorf("%w: the provider answered %q", protocol.ErrMalformed, m.Type)
	}
	var need int64
	for i, c := range set.chunks {
		if protocol.Wants(m.Missing, i) {
			need += c.size
		}
	}
	prog.asked(m.Held, need)
	buf := make([]byte, protocol.InputChunkSize)
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for i, c := range set.chunks {
		if !protocol.Wants(m.Missing, i) {
			continue
		}
		if f == nil || f.Name() != c.path {
			if f != nil {
				f.Close()
			}
			if f, err = os.Open(c.path); err != nil {
				return &inputRefusal{err.Error()} // the renter's own file: no use trying again
			}
		}
		if _, err := f.ReadAt(buf[:c.size], c.off); err != nil {
			return &inputRefusal{fmt.Sprintf("reading %s: %v", c.path, err)}
		}
		if err := protocol.WriteInputChunk(s, i, buf[:c.size]); err != nil {
			return why(err)
		}
		prog.sent(c.size, r.clock.Now())
	}
	if err := protocol.WriteInputEnd(s); err != nil {
		return why(err)
	}
	if err := protocol.ReadJSONFrame(in, protocol.MaxInputMsgFrame, &m); err != nil {
		return err
	}
	if m.Type != "done" {
		return &inputRefusal{m.Reason}
	}
	return nil
}

// Progress.

// inputProgress is where one request's input stands, for the API.
type inputProgress struct {
	mu      sync.Mutex
	v       api.InputProgress
	sending time.Time // when the current stream's chunks began (this machine's clock)
	base    int64     // what was sent before it
	need    int64     // what it was asked for
	ended   time.Time
}

// track starts following a request's input.
func (ri *renterInputs) track(name string, now time.Time) *inputProgress {
	p := &inputProgress{v: api.InputProgress{Progress: name, Phase: "hashing", StartedAt: now, UpdatedAt: now}}
	ri.recent = append(ri.recent, p)
	return p
}

func (p *inputProgress) hashing(total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.v.Bytes = total
}

func (p *inputProgress) hashed(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.v.Hashed += n
}

// uploading starts the upload of the input to a job's provider (a request placed by model
// may try several).
func (p *inputProgress) uploading(job, provider string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.v.Job, p.v.Provider, p.v.Phase, p.v.Error = job, provider, "uploading", ""
	p.v.Held, p.v.Sent, p.v.Rate, p.v.ETASeconds, p.base = 0, 0, 0, 0, 0
	p.v.StartedAt, p.v.UpdatedAt, p.ended = now, now, time.Time{}
}

// asked records a stream's start: what the provider held and how much it asks for.
func (p *inputProgress) asked(held, need int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.v.Held, p.need, p.base = held, need, p.v.Sent
	p.sending = time.Now()
	p.v.ETASeconds = 0
}

// sent counts n bytes sent and updates the rate and the time left.
func (p *inputProgress) sent(n int64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.v.Sent += n
	p.v.UpdatedAt = now
	if el := time.Since(p.sending); el > 0 {
		p.v.Rate = int64(float64(p.v.Sent-p.base) / el.Seconds())
	}
	if left := p.need - (p.v.Sent - p.base); p.v.Rate > 0 && left > 0 {
		p.v.ETASeconds = left / p.v.Rate
	} else {
		p.v.ETASeconds = 0
	}
}

// end records how the input's hashing or upload ended (err nil: done, or hashed when the
// request ended before any upload). An end already recorded stays.
func (p *inputProgress) end(err error, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended.IsZero() && err == nil {
		return
	}
	switch {
	case err != nil:
		p.v.Phase, p.v.Error = "failed", err.Error()
	case p.v.Phase == "uploading":
		p.v.Phase, p.v.ETASeconds = "done", 0
	case p.v.Phase == "hashing": // the request ended before any upload (refused everywhere)
		p.v.Phase = "hashed"
	}
	p.v.UpdatedAt, p.ended = now, now
}

func (p *inputProgress) view() api.InputProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.v
}

// Uploads lists the inputs this node is hashing or sending, and those that ended in the
// last minute, oldest first.
func (r *Renter) Uploads() []api.InputProgress {
	ri := r.inputs
	ri.mu.Lock()
	defer ri.mu.Unlock()
	now := r.clock.Now()
	ri.recent = slices.DeleteFunc(ri.recent, func(p *inputProgress) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.ended.IsZero() && now.Sub(p.ended) > time.Minute
	})
	out := make([]api.InputProgress, 0, len(ri.recent))
	for _, p := range ri.recent {
		out = append(out, p.view())
	}
	return out
}

// withInput adds to a job's view the upload of its input, while it is known.
func (r *Renter) withInput(v api.JobView) api.JobView {
	for _, u := range r.Uploads() {
		if u.Job == v.ID {
			v.Input = &u
		}
	}
	return v
}
