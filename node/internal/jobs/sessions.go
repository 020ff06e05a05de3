package jobs

import (
	"errors"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
)

// A renter's sessions with its running job: port tunnels (/gpunex/job-tunnel), shells
// (/gpunex/job-exec) and, before the start, its input data. Each is a stream protocol of its
// own whose first frame names the job. The provider serves one only to the job's renter,
// only while the job runs, and within the limits its operator sets in [jobs]; every refusal
// is counted (gpunex_job_sessions_total{kind, outcome}) like the proposals' refusals.

// Errors a session is refused with; the renter sees their text.
var (
	// ErrNotYourJob: the job is unknown here, or another peer rents it (the two are not
	// told apart, so that a stranger learns nothing of other renters' jobs).
	ErrNotYourJob = errors.New("no job of yours by that ID here")
	// ErrJobNotRunning: the job has not started yet, or has ended.
	ErrJobNotRunning = errors.New("the job is not running")
	// ErrSessionLimit: the job has as many sessions of this kind open as the provider allows,
	// or has spent its transfer budget.
	ErrSessionLimit = errors.New("session limit reached")
)

// sessionJob returns the job a session names when remote is its renter and it runs.
func (r *Runner) sessionJob(remote peer.ID, id string) (ledger.Job, error) {
	j, err := r.ledger.GetJob(id)
	if err != nil || j.Side != "provider" || j.Peer != remote.String() {
		return ledger.Job{}, ErrNotYourJob
	}
	if j.State != ledger.JobRunning {
		return ledger.Job{}, fmt.Errorf("%w (it is %s)", ErrJobNotRunning, j.State)
	}
	return j, nil
}

// refuseSession counts a refused session of a kind ("tunnel", "exec", "input") by reason,
// and returns the reason.
func (r *Runner) refuseSession(kind string, err error) string {
	reason := "other"
	switch {
	case errors.Is(err, ErrNotYourJob):
		reason = "not_renter"
	case errors.Is(err, ErrJobNotRunning):
		reason = "not_running"
	case errors.Is(err, ErrSessionLimit):
		reason = "limit"
	}
	r.metrics.JobSessions.WithLabelValues(kind, reason).Inc()
	return reason
}

// jobSessions counts each job's open sessions by kind and the bytes its sessions carried,
// against the provider's limits.
type jobSessions struct {
	mu    sync.Mutex
	open  map[string]int   // job + "/" + kind -> sessions open
	bytes map[string]int64 // job -> bytes carried by its sessions
	// ends are the closers of each job's open sessions, called when it ends (onEnd).
	ends    map[string]map[uint64]func()
	nextEnd uint64
}

func newJobSessions() *jobSessions {
	return &jobSessions{open: map[string]int{}, bytes: map[string]int64{}, ends: map[string]map[uint64]func(){}}
}

// onEnd has end called when the job ends (forget), unless drop is called first. A session
// registers its closer, then checks that its job still runs: one that ended in between
// was forgotten before the closer was there.
func (s *jobSessions) onEnd(job string, end func()) (drop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextEnd++
	n := s.nextEnd
	if s.ends[job] == nil {
		s.ends[job] = map[uint64]func(){}
	}
	s.ends[job][n] = end
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if delete(s.ends[job], n); len(s.ends[job]) == 0 {
			delete(s.ends, job)
		}
	}
}

// acquire takes one of a job's max sessions of a kind (max <= 0: none allowed); release
// gives it back.
func (s *jobSessions) acquire(job, kind string, max int) (release func(), err error) {
	key := job + "/" + kind
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key] >= max {
		return nil, fmt.Errorf("%w: %d %s sessions open, the most this provider allows a job", ErrSessionLimit, s.open[key], kind)
	}
	s.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[key]--; s.open[key] <= 0 {
				delete(s.open, key)
			}
		})
	}, nil
}

// spend counts n bytes a job's sessions carried; false once the job has carried more than
// budget (budget <= 0: no limit).
func (s *jobSessions) spend(job string, n, budget int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes[job] += n
	return budget <= 0 || s.bytes[job] <= budget
}

// forget drops an ended job's counts and closes its sessions still open.
func (s *jobSessions) forget(job string) {
	s.mu.Lock()
	delete(s.bytes, job)
	for k := range s.open {
		if len(k) > len(job) && k[:len(job)+1] == job+"/" {
			delete(s.open, k)
		}
	}
	ends := s.ends[job]
	delete(s.ends, job)
	s.mu.Unlock()
	for _, end := range ends {
		end()
	}
}
