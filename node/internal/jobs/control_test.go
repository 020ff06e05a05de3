package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// TestJobControl: a renter asks its provider about its running job: the status counts the
// seconds run so far; cancelling stops the container with the renter's reason and the
// receipt says so; another peer learns nothing of the job and cannot stop it.
func TestJobControl(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	m.pv.clk.Advance(90 * time.Second)

	st, err := m.rn.JobStatus(context.Background(), v.ID)
	if err != nil || st.State != ledger.JobRunning || st.Seconds != 90 || st.Cost != protocol.Cost(1_000_000, 1, 90) {
		t.Fatalf("status of a job running 90 s: %s, %d s, %s USDC (%v)", st.State, st.Seconds, st.Cost, err)
	}

	// A stranger naming the job: as if there were none.
	stranger := m.renter(t)
	rj, _ := m.rn.ledger.GetJob(v.ID)
	stranger.ledger.CreateJob(rj)
	if _, err := stranger.CancelJob(context.Background(), v.ID); err == nil || !strings.Contains(err.Error(), "no job "+v.ID+" of yours here") {
		t.Fatalf("a stranger cancelling the job: %v", err)
	}
	if why := m.pv.rt.killedWith(v.ID); why != "" {
		t.Fatalf("a stranger stopped the job: %q", why)
	}

	cv, err := m.rn.CancelJob(context.Background(), v.ID)
	if err != nil || cv.State != "stopping" || cv.Side != "renter" {
		t.Fatalf("cancel: %s %v", cv.State, err)
	}
	_, rec := m.pv.ended(t, v.ID)
	if rec.Reason != "cancelled by the renter" || rec.Seconds != 90 || rec.Amount != protocol.Cost(1_000_000, 1, 90) {
		t.Fatalf("receipt of a cancelled job: %q, %d s, %s USDC", rec.Reason, rec.Seconds, rec.Amount)
	}
	if !m.pv.rt.wasRemoved(v.ID) || m.pv.RunningJobs() != 0 {
		t.Fatal("the container of an ended job is left, or its GPU held")
	}
}

// TestControlRefusesTheWrongSide: a provider's node does not cancel, follow or fetch as a
// renter a job it runs itself; an unknown job is not found.
func TestControlRefusesTheWrongSide(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	pr := newRenter(t, m.pv.peer, m.pv.clk)
	pr.ledger = m.pv.ledger // the provider's node: one ledger for both sides
	if _, err := pr.CancelJob(context.Background(), v.ID); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("the provider cancelling as a renter: %v", err)
	}
	if _, err := pr.JobLogs(context.Background(), v.ID, false, nil); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("the provider following as a renter: %v", err)
	}
	if err := pr.FetchOutput(context.Background(), v.ID, nil); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("the provider fetching as a renter: %v", err)
	}
	if _, err := m.rn.JobStatus(context.Background(), "00000000000000ee"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an unknown job: %v", err)
	}
	jobs, err := pr.Jobs()
	if err != nil || len(jobs) != 1 || jobs[0].Side != "provider" || jobs[0].State != ledger.JobRunning {
		t.Fatalf("the provider's list: %+v %v", jobs, err)
	}
}
