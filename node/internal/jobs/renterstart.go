package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// The renter's start deadline: a provider that takes a lease and never says the job
// started would otherwise hold the renter's request (and its escrow hold) for as long as
// the provider's own pull-and-start bound, 11 minutes. Past the deadline the renter
// cancels the job, asks for its hold back and, for a request placed by model, asks the
// next offer (placement.go).

const (
	// startGrace is how long a provider that holds the image (cached, or the archive just
	// received) and the input has to import and start the job: a container starts in
	// seconds; an archive's import is allowed importRate more.
	startGrace = 2 * time.Minute
	// importRate is the slowest archive import allowed: 100 MiB a second (a 10 GiB
	// archive, jobs.max_image_mb's default, adds 102 s).
	importRate = 100 << 20
	// pullAllowance is what a registry image's pull adds: the renter cannot watch a pull,
	// so it is a fixed bound, 5 minutes (about 1.9 GB at the listing minimum's 50 Mbit/s
	// down, 37 GB at the Enterprise tier's 1 Gbit/s). A larger image on a slow provider
	// goes as an archive, whose transfer the renter times itself.
	pullAllowance = 5 * time.Minute
)

// errNotStarted says a provider leased a job and did not start it by the renter's
// deadline.
var errNotStarted = errors.New("the provider did not start the job in time")

// startWait is how long, after the renter sent all it sends (the archive, the input), it
// waits for the provider's word that job p started.
func startWait(p *protocol.Proposal) time.Duration {
	if p.Image.ArchiveSHA256 == "" {
		return startGrace + pullAllowance
	}
	return startGrace + time.Duration(p.Image.ArchiveSize/importRate)*time.Second
}

// readStarted waits up to wait for the provider's next frame on the job stream; past it
// the stream is cut and the answer is errNotStarted. The wait is in real time, as the
// stream's own deadlines (r.startTimer).
func (r *Renter) readStarted(s network.Stream, in *bufio.Reader, wait time.Duration) (protocol.JobMsg, error) {
	s.SetDeadline(time.Now().Add(wait + time.Minute)) // a backstop
	type answer struct {
		m   protocol.JobMsg
		err error
	}
	got := make(chan answer, 1)
	go func() {
		m, err := readMsg(in)
		got <- answer{m, err}
	}()
	select {
	case a := <-got:
		return a.m, a.err
	case <-r.startTimer(wait):
		s.Reset() // ends the read
		return protocol.JobMsg{}, fmt.Errorf("%w: no word of its start %s after the image and input were sent", errNotStarted, wait)
	}
}

// cancelUnstarted asks the provider of a job it leased and did not start to cancel it,
// and says whether the provider confirmed the job will not run (an honest provider marks
// it failed: no start, no charge, its hold may come back).
func (r *Renter) cancelUnstarted(job string) bool {
	j, err := r.ledger.GetJob(job)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobStepTimeout)
	defer cancel()
	s, in, err := r.control(ctx, j, protocol.JobMsg{Op: "cancel"})
	if err != nil {
		r.log.Info("a job not started in time: its provider does not answer the cancel", "job", job, "err", err)
		return false
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(jobStepTimeout))
	m, err := readMsg(in)
	stopped := err == nil && m.Type == "status" && m.Status != nil && m.Status.State == ledger.JobFailed
	r.log.Info("a job not started in time: cancelled", "job", job, "provider", j.Peer, "confirmed", stopped)
	return stopped
}
