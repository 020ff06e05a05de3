//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/protocol"
)

// Shells under attack (docs/protocols/jobs.md, "Shells"): an exec storm of rotating
// identities on /gpunex/job-exec, each stream a start for a job that is not theirs, a
// session without its start frame, or a stream opened and left silent. None may get a
// process started; each is answered at its first frame (or dropped), within the budgets.

var (
	execStormStarted atomic.Int64 // streams that got the started frame
	execStormRefused atomic.Int64 // streams refused with a reason
	execStormOpened0 float64
)

func execScenarios() []scenario {
	return []scenario{{
		name: "exec-storm", victim: "provider-1", honest: honestSearch,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			execStormOpened0 = execSessions(t, e, "provider-1", "opened")
			var i atomic.Int64
			return sybil(ctx, t, e, "provider-1", protocol.JobExecProtocol, 10, func(a *attacker, s network.Stream) {
				s.SetDeadline(time.Now().Add(2 * time.Second))
				switch i.Add(1) % 3 {
				case 0: // a shell in someone's job
					protocol.WriteExecJSON(s, protocol.ExecStart, protocol.ExecStartMsg{Job: randomHex(8), Args: []string{"sh"}, TTY: true})
				case 1: // input before any start
					protocol.WriteExecFrame(s, protocol.ExecStdin, []byte("cat /etc/shadow\n"))
				case 2: // silent: the stream is closed after its deadline
					s.CloseWrite()
				}
				f, err := protocol.ReadExecFrame(bufio.NewReader(s))
				switch {
				case err == nil && f.Type == protocol.ExecStarted:
					execStormStarted.Add(1)
				case err == nil && f.Type == protocol.ExecError:
					execStormRefused.Add(1)
				}
				io.Copy(io.Discard, s)
			})
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			if n := execStormStarted.Load(); n != 0 {
				t.Errorf("%d strangers' exec streams got a process started", n)
			}
			if got := execSessions(t, e, "provider-1", "opened") - execStormOpened0; got != 0 {
				t.Errorf("the provider opened %.0f exec sessions for strangers", got)
			}
			return fmt.Sprintf("0 of %d exec streams started a process; %d refused with a reason", ops, execStormRefused.Load())
		},
	}}
}

// execSessions reads gpunex_job_sessions_total{kind="exec",outcome} from a node's metrics.
func execSessions(t *testing.T, e *advEnv, name, outcome string) float64 {
	t.Helper()
	return nodeMetric(t, e, name, `gpunex_job_sessions_total{kind="exec",outcome="`+outcome+`"}`)
}
