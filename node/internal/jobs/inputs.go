package jobs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Data in, the provider's end (docs/protocols/jobs.md, "Data in"): a proposal's input is
// checked against jobs.max_input_mb (checkInput, from decide); once the lease holds, the
// renter opens the job-input stream (HandleInput) and sends the manifest the proposal
// named; the provider answers with the chunks its per-renter cache (inputcache.go) lacks,
// takes those, each checked by its digest, and writes the input's files into the job's
// folder (input/), which the sandbox mounts read-only at /input. The job stream waits for
// it (awaitInput) until protocol.InputDeadline, never past the lease: an input that does
// not arrive in time fails the job, and its GPUs are free again. A cut stream loses only
// the chunk it was carrying: the renter's next stream, for the same job or a new one with
// the same data, is asked only for what is missing.

// errInputNotAwaited: the job named on an input stream is not waiting for its input (it
// started, ended, failed or takes none).
var errInputNotAwaited = errors.New("the job is not waiting for an input")

// providerInputs is the provider's side of data in: the chunk cache and, per leased job
// with an input, where its input stands.
type providerInputs struct {
	cache *inputCache
	mu    sync.Mutex
	jobs  map[string]*inputWait
}

// inputWait is a leased job's input in flight.
type inputWait struct {
	done   chan struct{}  // closed once the input is in the job's folder
	stream network.Stream // the input stream open for the job, if any
	failed bool           // the job stopped waiting: streams for it are refused
}

func newProviderInputs(dir string, quota int64, r *Runner) *providerInputs {
	return &providerInputs{cache: newInputCache(dir, quota, r.clock, r.log), jobs: map[string]*inputWait{}}
}

// wait returns job's inputWait, made on first use.
func (pi *providerInputs) wait(job string) *inputWait {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	w := pi.jobs[job]
	if w == nil {
		w = &inputWait{done: make(chan struct{})}
		pi.jobs[job] = w
	}
	return w
}

// inputDir is where a job's input is once complete, the folder mounted at /input.
func (r *Runner) inputDir(id string) string { return filepath.Join(r.jobDir(id), "input") }

// jobInputDir is the input folder to mount for a job: "" when its proposal has no input.
func (r *Runner) jobInputDir(p *protocol.Proposal) string {
	if p.Input == nil {
		return ""
	}
	return r.inputDir(p.Job)
}

// checkInput applies jobs.max_input_mb to a proposal's input.
func (r *Runner) checkInput(p *protocol.Proposal) error {
	if p.Input == nil {
		return nil
	}
	max := r.cfg.MaxInputMB << 20
	if max <= 0 {
		return jobErr("this provider takes no input data (jobs.max_input_mb = 0): propose without --input")
	}
	if p.Input.Bytes > max {
		return jobErr("an input of %s, this provider takes at most %s", api.BytesText(p.Input.Bytes), api.BytesText(max))
	}
	return nil
}

// welcomeInput tells the renter of a job with an input, on the job stream once the job is
// recorded as leased, that it may open the job-input stream.
func (r *Runner) welcomeInput(s network.Stream, p *protocol.Proposal) error {
	if p.Input == nil {
		return nil
	}
	return sendMsg(s, protocol.JobMsg{Type: "input"})
}

// HandleInput takes a leased job's input from its renter.
func (r *Runner) HandleInput(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	in := bufio.NewReader(s)
	fail := func(err error) {
		s.SetWriteDeadline(time.Now().Add(5 * time.Second))
		protocol.WriteJSONFrame(s, protocol.InputMsg{Type: "error", Reason: err.Error()})
	}
	var open protocol.InputMsg
	if err := protocol.ReadJSONFrame(in, protocol.MaxInputMsgFrame, &open); err != nil || open.Type != "open" {
		r.refuseSession("input", err)
		fail(fmt.Errorf("%w: expected the open frame", protocol.ErrMalformed))
		return
	}
	j, p, l, err := r.inputJob(remote, open.Job)
	if err != nil {
		if errors.Is(err, ErrNotYourJob) {
			r.peer.Misbehaved(remote) // a stranger naming a job: junk only it could send
		}
		r.refuseSession("input", err)
		fail(err)
		return
	}
	release, err := r.sessions.acquire(j.ID, "input", 1)
	if err != nil {
		r.refuseSession("input", err)
		fail(err)
		return
	}
	defer release()
	w := r.input.wait(j.ID)
	if err := r.input.attach(w, s); err != nil {
		r.refuseSession("input", err)
		fail(err)
		return
	}
	defer r.input.detach(w, s)
	deadline := r.wallTime(protocol.InputDeadline(l, p))
	s.SetDeadline(minTime(time.Now().Add(jobStepTimeout), deadline))
	if err := protocol.WriteJSONFrame(s, protocol.InputMsg{Type: "ready"}); err != nil {
		return
	}
	raw, err := protocol.ReadFrame(in, int(p.Input.ManifestSize))
	var m *protocol.InputManifest
	if err == nil {
		m, err = protocol.ParseInputManifest(raw, *p.Input)
	}
	if err != nil {
		r.refuseSession("input", err)
		fail(err)
		return
	}
	r.metrics.JobSessions.WithLabelValues("input", "opened").Inc()
	s.SetDeadline(deadline)
	if err := r.receiveInput(s, in, w, p, m); err != nil {
		r.log.Info("a job's input stream ended before its input was complete", "job", j.ID, "renter", remote, "err", err)
		if isTimeout(err) {
			s.Reset() // its time is over: a renter still writing learns it at once
			return
		}
		fail(err)
		return
	}
	protocol.WriteJSONFrame(s, protocol.InputMsg{Type: "done"})
}

// inputJob returns the job an input stream names, with its proposal and lease, when remote
// rents it and it waits for its input.
func (r *Runner) inputJob(remote peer.ID, id string) (ledger.Job, *protocol.Proposal, *protocol.Lease, error) {
	j, err := r.ledger.GetJob(id)
	if err != nil || j.Side != "provider" || j.Peer != remote.String() {
		return j, nil, nil, ErrNotYourJob
	}
	p, err := openProposal(j.Proposal)
	if err != nil {
		return j, nil, nil, err
	}
	if p.Input == nil {
		return j, nil, nil, fmt.Errorf("%w: job %s was proposed without one", errInputNotAwaited, id)
	}
	if j.State != ledger.JobLeased {
		return j, nil, nil, fmt.Errorf("%w: job %s is %s", errInputNotAwaited, id, j.State)
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return j, nil, nil, err
	}
	return j, p, l, nil
}

// attach records s as the input stream of w's job: awaitInput resets it when it stops
// waiting. detach forgets it.
func (pi *providerInputs) attach(w *inputWait, s network.Stream) error {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	if w.failed {
		return fmt.Errorf("%w: its time for the input is over", errInputNotAwaited)
	}
	w.stream = s
	return nil
}

func (pi *providerInputs) detach(w *inputWait, s network.Stream) {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	if w.stream == s {
		w.stream = nil
	}
}

// receiveInput asks for the chunks of m the renter's cache lacks, takes them, and once all
// are held writes the input into the job's folder.
func (r *Runner) receiveInput(s network.Stream, in *bufio.Reader, w *inputWait, p *protocol.Proposal, m *protocol.InputManifest) error {
	select {
	case <-w.done: // complete already: a renter that missed the answer asks again
		return nil
	default:
	}
	if _, err := os.Lstat(r.inputDir(p.Job)); err == nil {
		return nil
	}
	chunks := m.Chunks()
	missing, held, unpin := r.input.cache.pin(p.Renter, chunks)
	defer unpin()
	var need int64
	for i, c := range chunks {
		if protocol.Wants(missing, i) {
			need += c.Size
		}
	}
	r.input.cache.makeRoom(need)
	r.metrics.JobInputBytes.WithLabelValues("held").Add(float64(held))
	if err := protocol.WriteJSONFrame(s, protocol.InputMsg{Type: "missing", Missing: missing, Held: held}); err != nil {
		return err
	}
	got := make([]bool, len(chunks))
	for {
		i, size, end, err := protocol.ReadInputChunkHeader(in)
		if err != nil {
			return err
		}
		if end {
			break
		}
		if i >= len(chunks) || !protocol.Wants(missing, i) || got[i] || size != chunks[i].Size {
			return fmt.Errorf("%w: chunk %d (%d bytes) was not asked for", protocol.ErrInvalid, i, size)
		}
		n, err := r.input.cache.store(p.Renter, chunks[i], in)
		if errors.Is(err, errChunkDigest) {
			r.metrics.JobInputBytes.WithLabelValues("refused").Add(float64(n))
			return fmt.Errorf("%w: %v", protocol.ErrInvalid, err)
		}
		if err != nil {
			return err
		}
		r.metrics.JobInputBytes.WithLabelValues("received").Add(float64(n))
		got[i] = true
	}
	left := 0
	for i := range chunks {
		if protocol.Wants(missing, i) && !got[i] {
			left++
		}
	}
	if left > 0 {
		return fmt.Errorf("%d chunks were asked for and not sent", left)
	}
	return r.completeInput(w, p, m)
}

// completeInput writes the input into the job's folder and tells the waiting job stream.
func (r *Runner) completeInput(w *inputWait, p *protocol.Proposal, m *protocol.InputManifest) error {
	part := r.inputDir(p.Job) + ".part"
	if err := r.assembleInput(part, p.Renter, m); err != nil {
		os.RemoveAll(part)
		return fmt.Errorf("writing the input: %w", err)
	}
	r.input.mu.Lock()
	defer r.input.mu.Unlock()
	if w.failed {
		os.RemoveAll(part)
		return fmt.Errorf("%w: its time for the input is over", errInputNotAwaited)
	}
	if err := os.Rename(part, r.inputDir(p.Job)); err != nil {
		os.RemoveAll(part)
		return err
	}
	close(w.done)
	r.log.Info("a job's input arrived", "job", p.Job, "renter", p.Renter, "bytes", m.Bytes(), "entries", len(m.Entries))
	return nil
}

// assembleInput writes m's files, folders and links under dir from the renter's chunks.
// The folder is opened as an os.Root and every parent is a folder the manifest made before:
// nothing the manifest names can lead outside dir. Files are made readable by anyone (the
// job's user owns nothing there) and executable where the renter's were.
func (r *Runner) assembleInput(dir, renter string, m *protocol.InputManifest) error {
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, e := range m.Entries {
		switch e.Type {
		case protocol.InputDir:
			err = root.Mkdir(e.Path, 0o755)
			if err == nil {
				err = root.Chmod(e.Path, 0o755)
			}
		case protocol.InputLink:
			err = root.Symlink(e.Target, e.Path)
		case protocol.InputFile:
			err = r.assembleFile(root, renter, e)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	return nil
}

// assembleFile writes one file of the input from its chunks.
func (r *Runner) assembleFile(root *os.Root, renter string, e protocol.InputEntry) error {
	mode := os.FileMode(0o444)
	if e.Mode&0o111 != 0 {
		mode = 0o555
	}
	f, err := root.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	var written int64
	for _, sha := range e.Chunks {
		c, err := r.input.cache.open(renter, sha)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, c) // copy_file_range where the file system has it
		c.Close()
		if err != nil {
			return err
		}
		written += n
	}
	if written != e.Size {
		return fmt.Errorf("%d bytes written of %d", written, e.Size)
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	return f.Close()
}

// awaitInput waits, on the job stream, for the job's input to be complete: until the
// input's deadline (protocol.InputDeadline, within the lease) or the renter closing the job
// stream. On failure the job's input stream, if one is open, is cut and its partial files
// deleted; its chunks stay in the renter's cache for the next try.
func (r *Runner) awaitInput(s network.Stream, in *bufio.Reader, p *protocol.Proposal, leaseRaw []byte) error {
	if p.Input == nil {
		return nil
	}
	l, _, err := protocol.OpenLease(leaseRaw)
	if err != nil {
		return err
	}
	w := r.input.wait(p.Job)
	deadline := protocol.InputDeadline(l, p)
	s.SetDeadline(r.wallTime(deadline).Add(jobStepTimeout))
	gone := make(chan struct{})
	go func() {
		// The renter sends nothing more on the job stream: a read that returns says it
		// closed or reset it.
		if _, err := in.ReadByte(); !isTimeout(err) {
			close(gone)
		}
	}()
	var why error
	select {
	case <-w.done: // its record stays until the job ends (dropInput)
		return nil
	case <-r.clock.After(deadline.Sub(r.clock.Now())):
		why = fmt.Errorf("the input did not arrive by %s (at %d KiB/s at least, within the lease)", deadline.UTC().Format(time.RFC3339), protocol.InputMinRate>>10)
	case <-gone:
		why = errors.New("the renter closed the job stream before its input arrived")
	}
	r.input.mu.Lock()
	w.failed = true
	if w.stream != nil {
		w.stream.Reset()
	}
	r.input.mu.Unlock()
	os.RemoveAll(r.inputDir(p.Job) + ".part")
	return why
}

// dropInput deletes an ended job's input folder (its chunks stay in the renter's cache).
func (r *Runner) dropInput(id string) {
	os.RemoveAll(r.inputDir(id))
	os.RemoveAll(r.inputDir(id) + ".part")
	r.input.mu.Lock()
	delete(r.input.jobs, id)
	r.input.mu.Unlock()
}

// cleanInputs runs with the hourly cleanup: the cache loses the chunks unused for
// jobs.retention and keeps within its quota; the input folders of jobs no longer leased or
// running (a crash between their end and their cleanup) go.
func (r *Runner) cleanInputs() {
	r.input.cache.expire(r.clock.Now().Add(-r.cfg.Retention.Duration))
	jobs, err := r.ledger.Jobs()
	if err != nil {
		return
	}
	for _, j := range jobs {
		if j.Side == "provider" && j.State != ledger.JobLeased && j.State != ledger.JobRunning {
			if _, err := os.Lstat(r.inputDir(j.ID)); err == nil || r.input.waiting(j.ID) {
				r.dropInput(j.ID)
			}
		}
	}
}

// waiting says whether a job has an input in flight recorded.
func (pi *providerInputs) waiting(id string) bool {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	return pi.jobs[id] != nil
}

// wallTime is when, by this machine's own clock, the runner's clock reads t (stream
// deadlines are wall-clock times; the runner's clock is fake in tests).
func (r *Runner) wallTime(t time.Time) time.Time { return time.Now().Add(t.Sub(r.clock.Now())) }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}
