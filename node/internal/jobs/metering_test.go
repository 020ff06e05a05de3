package jobs

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// TestCheckpointCountsToLeaseEnd: a provider's checkpoint counts the seconds since the
// job's start at the lease's price, and never past the lease's end.
func TestCheckpointCountsToLeaseEnd(t *testing.T) {
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}, {Model: "L4-24GB"}})
	_, renter := newKey(t)
	pv.startJob(t, "00000000000000c1", renter, "L4-24GB", 2, 3600)
	for _, c := range []struct {
		after time.Duration
		secs  int64
	}{{10 * time.Minute, 600}, {59*time.Minute + 59*time.Second, 3599}, {2 * time.Hour, 3600}} {
		pv.clk.Advance(c.after - pv.clk.Now().Sub(t0))
		raw, cp, err := pv.checkpoint(pv.job(t, "00000000000000c1"))
		if err != nil {
			t.Fatal(err)
		}
		if cp.Seconds != c.secs || cp.Amount != protocol.Cost(1_000_000, 2, c.secs) || cp.Renter != renter.String() {
			t.Fatalf("after %s: %d s, %s USDC; want %d s", c.after, cp.Seconds, cp.Amount, c.secs)
		}
		j := pv.job(t, "00000000000000c1")
		l, _, _ := protocol.OpenLease(j.Lease)
		if _, err := protocol.CheckCheckpoint(raw, j.Lease, l, pv.clk.Now()); err != nil && pv.clk.Now().Before(l.EndsAt) {
			t.Fatalf("the renter cannot check the checkpoint: %v", err)
		}
	}
}

// TestMeteringOverTheStream: every interval the renter asks for a checkpoint and
// countersigns it; both sides keep the same countersigned seconds, and a later job
// status shows them.
func TestMeteringOverTheStream(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	m.pv.clk.Advance(time.Minute)
	m.rn.meterOnce(context.Background(), m.rn.job(t, v.ID))
	pj, rj := m.pv.job(t, v.ID), m.rn.job(t, v.ID)
	if pj.CheckpointSeconds != 60 || rj.CheckpointSeconds != 60 || len(pj.CheckpointCountersig) == 0 || !pj.MeteredAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after a minute: provider %d s (countersigned %v), renter %d s", pj.CheckpointSeconds, len(pj.CheckpointCountersig) > 0, rj.CheckpointSeconds)
	}
	if !rj.LastSeenRunning.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the renter last saw the job running at %s", rj.LastSeenRunning)
	}
	if _, err := protocol.CheckCountersignature(pj.CheckpointCountersig, pj.Checkpoint, protocol.KindCheckpoint, m.rn.peer.ID, m.pv.clk.Now()); err != nil {
		t.Fatalf("the provider keeps a countersignature that does not hold: %v", err)
	}
	if st, _ := m.rn.JobStatus(context.Background(), v.ID); st.MeteredSeconds != 60 {
		t.Fatalf("metered seconds shown: %d", st.MeteredSeconds)
	}
}

// job reads a job from the renter's ledger.
func (rn *renter) job(t *testing.T, id string) ledger.Job {
	t.Helper()
	j, err := rn.ledger.GetJob(id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestUnmeteredJobStopped: a provider stops a job whose renter countersigned no usage for
// jobs.unmetered_stop since its latest countersigned checkpoint; the receipt says why.
func TestUnmeteredJobStopped(t *testing.T) {
	m := newMarket(t, 1, func(d *Deps) { d.Jobs.UnmeteredStop.Duration = 8 * time.Minute })
	v := m.run(t, m.request(imageArchive(t, "x")))
	minute := func() {
		waitTimer(t, m.pv.clk, 1)
		m.pv.clk.Advance(time.Minute)
	}
	minute()
	m.rn.meterOnce(context.Background(), m.rn.job(t, v.ID)) // countersigned at 1 min
	for range 7 {
		minute()
	}
	if why := m.pv.rt.killedWith(v.ID); why != "" {
		t.Fatalf("stopped 7 minutes after a countersigned checkpoint: %q", why)
	}
	minute()
	_, rec := m.pv.ended(t, v.ID)
	if rec.Reason != ReasonUnmetered || rec.Seconds != 9*60 {
		t.Fatalf("receipt %q, %d s: want %q after 9 minutes", rec.Reason, rec.Seconds, ReasonUnmetered)
	}
}

// TestUnmeteredRenterPaysAtMostAMinute (security review, finding 5): a renter whose meter
// is off gets at most one interval and the tolerance of GPU time past what it pays (one
// minute without a checkpoint) under the default [jobs], and its next proposals are
// refused for jobs.unmetered_renter_ban; another renter's are not.
func TestUnmeteredRenterPaysAtMostAMinute(t *testing.T) {
	defaults := config.Defaults(config.RoleProvider).Jobs
	m := newMarket(t, 2, func(d *Deps) {
		d.Jobs.UnmeteredStop, d.Jobs.UnmeteredRenterBan = defaults.UnmeteredStop, defaults.UnmeteredRenterBan
	})
	v := m.run(t, m.request(imageArchive(t, "x"))) // m.rn's meter never runs
	for stopped := false; !stopped && m.pv.clk.Now().Sub(t0) < 10*time.Minute; {
		eventually(t, "the provider waits or stops", func() bool {
			stopped = m.pv.job(t, v.ID).State != ledger.JobRunning
			return stopped || m.pv.clk.Waiters() >= 1
		})
		m.pv.clk.Advance(5 * time.Second)
	}
	j, rec := m.pv.ended(t, v.ID)
	most := protocol.CheckpointAllowance + protocol.CheckpointInterval + protocol.MeterTolerance
	if rec.Reason != ReasonUnmetered || time.Duration(rec.Seconds)*time.Second > most {
		t.Fatalf("an unmetered job ran %d s and ended %q: want %q within %s", rec.Seconds, rec.Reason, ReasonUnmetered, most)
	}
	if paid := protocol.CheckpointCharge(rec, j.CheckpointSeconds); paid > protocol.Cost(rec.Price, 1, 60) || rec.Seconds > 60+int64(protocol.MeterTolerance/time.Second) {
		t.Fatalf("%d s run for %s paid", rec.Seconds, paid)
	}

	m.pv.clk.Advance(23 * time.Hour)
	_, err := m.rn.ProposeJob(context.Background(), m.request(imageArchive(t, "y")))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "stopped countersigning") || !strings.Contains(err.Error(), v.ID) {
		t.Fatalf("the same renter's next proposal, 23 hours later: %v", err)
	}
	if n := testutil.ToFloat64(m.pv.metrics.JobProposals.WithLabelValues("unmetered_renter")); n != 1 {
		t.Fatalf("refusals counted: %v", n)
	}
	other := m.renter(t)
	other.escrow.coordinator = m.coordKey
	if _, err := other.ProposeJob(context.Background(), m.request(imageArchive(t, "z"))); err != nil {
		t.Fatalf("another renter refused: %v", err)
	}
}

// TestUnmeteredAfterRestart: a running job found again after the provider was down longer
// than jobs.unmetered_stop is not stopped at once (its renter could not reach the
// provider): its renter has unmetered_stop from the restart to countersign again.
func TestUnmeteredAfterRestart(t *testing.T) {
	stop := config.Defaults(config.RoleProvider).Jobs.UnmeteredStop
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}}, func(d *Deps) { d.Jobs.UnmeteredStop = stop })
	_, renter := newKey(t)
	const id = "00000000000000c7"
	pv.leaseJob(t, id, renter, "L4-24GB", 1, 3600)
	pv.gpus.release(id)
	pv.ledger.UpdateJob(id, func(j *ledger.Job) error {
		j.State, j.StartedAt, j.CheckpointSeconds, j.MeteredAt = ledger.JobRunning, t0, 60, t0.Add(time.Minute)
		return nil
	})
	pv.rt.run(id)
	pv.clk.Advance(30 * time.Minute) // the provider was down
	if err := pv.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitTimer(t, pv.clk, 1)
	pv.clk.Advance(stop.Duration)
	_, rec := pv.ended(t, id)
	if want := int64((30*time.Minute + stop.Duration) / time.Second); rec.Reason != ReasonUnmetered || rec.Seconds != want {
		t.Fatalf("a job found again after 30 minutes down: %q after %d s, want %q after %d s", rec.Reason, rec.Seconds, ReasonUnmetered, want)
	}
}

// TestMeterLoop: the renter's meter asks each running job's provider for a checkpoint
// every interval, and sends again a dispute that did not reach the coordinator.
func TestMeterLoop(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	now := m.pv.clk.Now()
	m.rn.ledger.CreateJob(ledger.Job{ID: "00000000000000d9", Side: "renter", State: ledger.JobEnded, CreatedAt: now, Dispute: []byte("dispute")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.rn.Meter(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitTimer(t, m.pv.clk, 1)
	m.pv.clk.Advance(time.Minute)
	eventually(t, "the first checkpoint", func() bool { return m.rn.job(t, v.ID).CheckpointSeconds == 60 })
	eventually(t, "the dispute sent again", func() bool { return !m.rn.job(t, "00000000000000d9").ReportedAt.IsZero() })
	if len(m.rn.escrow.disputes) != 1 {
		t.Fatalf("dispute sent %d times", len(m.rn.escrow.disputes))
	}
}

// TestRenterCountersignsOnlyWhatItSaw: a checkpoint is countersigned when its seconds fit
// what the renter saw (since the start, within the tolerance) and do not go back; one that
// counts more time than has passed, or goes back, or is signed by someone else, is refused.
func TestRenterCountersignsOnlyWhatItSaw(t *testing.T) {
	_, renter := newKey(t)
	pkey, provider := newKey(t)
	skey, _ := newKey(t)
	lease := protocol.Lease{Version: 1, Job: "00000000000000e2", Proposal: "00", Renter: renter.String(), Provider: provider.String(),
		Model: "L4-24GB", GPUs: 1, Price: 3_600_000, IssuedAt: t0, EndsAt: t0.Add(2 * time.Hour), Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	lraw, _ := protocol.Seal(protocol.KindLease, lease, pkey)
	j := ledger.Job{ID: lease.Job, Side: "renter", Lease: lraw, ObservedStart: t0.Add(time.Second), CheckpointSeconds: 60}
	cp := func(secs int64, key crypto.PrivKey) []byte {
		raw, _ := protocol.Seal(protocol.KindCheckpoint, protocol.Checkpoint{Version: 1, Job: lease.Job, Lease: protocol.RecordSHA256(lraw), Provider: provider.String(),
			Renter: renter.String(), Seconds: secs, Amount: protocol.Cost(lease.Price, 1, secs), At: t0.Add(time.Duration(secs) * time.Second)}, key)
		return raw
	}
	now := t0.Add(2 * time.Minute)
	if got, err := checkObserved(j, cp(125, pkey), now); err != nil || got.Seconds != 125 {
		t.Fatalf("a checkpoint within what the renter saw: %v", err)
	}
	for name, raw := range map[string][]byte{
		"more time than has passed": cp(300, pkey),
		"going back":                cp(30, pkey),
		"signed by someone else":    cp(120, skey),
	} {
		if _, err := checkObserved(j, raw, now); err == nil {
			t.Errorf("%s: countersigned", name)
		}
	}
	unseen := j
	unseen.ObservedStart = time.Time{}
	if _, err := checkObserved(unseen, cp(60, pkey), now); err == nil {
		t.Error("a checkpoint of a job whose start the renter never saw: countersigned")
	}
}

// abandonedJob is a renter's running job whose lease ended at t0+1h, with a hold from
// coordKey when hold is set and a countersigned checkpoint of secs when secs > 0.
func abandonedJob(t *testing.T, rn *renter, coordKey crypto.PrivKey, hold bool, secs int64) ledger.Job {
	t.Helper()
	pkey, provider := newKey(t)
	p := protocol.Proposal{Version: protocol.JobVersion, Job: "00000000000000ab", Renter: rn.peer.ID.String(), Provider: provider.String(),
		IssuedAt: t0, Model: "L4-24GB", GPUs: 1, MaxSeconds: 3600, MaxPrice: 1_000_000, Image: protocol.Image{Ref: "a:1"}}
	if hold {
		p.Hold = signHold(t, coordKey, &p, protocol.HoldAmount(1_000_000, 1, 3600))
	}
	praw, _ := protocol.Seal(protocol.KindProposal, p, rn.peer.Key)
	l := protocol.Lease{Version: 1, Job: p.Job, Proposal: protocol.RecordSHA256(praw), Renter: p.Renter, Provider: p.Provider, Model: p.Model,
		GPUs: 1, Price: 1_000_000, IssuedAt: t0, EndsAt: t0.Add(time.Hour), Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	lraw, _ := protocol.Seal(protocol.KindLease, l, pkey)
	j := ledger.Job{ID: p.Job, Side: "renter", Peer: provider.String(), State: ledger.JobRunning, CreatedAt: t0, StartedAt: t0,
		Proposal: praw, Lease: lraw, ObservedStart: t0, LastSeenRunning: t0.Add(50 * time.Minute)}
	if secs > 0 {
		j.Checkpoint, j.CheckpointCountersig, j.CheckpointSeconds = []byte("checkpoint"), []byte("countersignature"), secs
	}
	if err := rn.ledger.CreateJob(j); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestAbandonedJob: a running job whose provider sent no receipt by AbandonAfter past its
// lease's end is failed as abandoned, and the coordinator of its hold is told with the
// usage countersigned; a delivery that fails is tried again until the hold's grace has
// passed; a hold settled already ends it without a report; with no usage countersigned
// there is nothing to report.
func TestAbandonedJob(t *testing.T) {
	coordKey, _ := newKey(t)
	check := func(name string, hold bool, secs int64, deliver error, after time.Duration, wantState, wantError string, told int) {
		t.Run(name, func(t *testing.T) {
			clk := newProvider(t, nil, nil).clk
			rn := newRenter(t, nil, clk)
			rn.escrow.abandonErr = deliver
			j := abandonedJob(t, rn, coordKey, hold, secs)
			clk.Advance(time.Hour + AbandonAfter - time.Second)
			if rn.leaseOver(j) {
				t.Fatal("abandoned before AbandonAfter passed")
			}
			clk.Advance(after - AbandonAfter + time.Second)
			if !rn.leaseOver(j) {
				t.Fatal("not abandoned after AbandonAfter")
			}
			rn.reportAbandoned(context.Background(), j)
			got := rn.job(t, j.ID)
			if got.State != wantState || !strings.Contains(got.Error, wantError) || len(rn.escrow.abandoned) != told {
				t.Fatalf("%s %q, told the coordinator %d times", got.State, got.Error, len(rn.escrow.abandoned))
			}
			if (wantState == ledger.JobFailed && deliver == nil && told == 1) != !got.AbandonReported.IsZero() {
				t.Fatalf("reported at %s", got.AbandonReported)
			}
		})
	}
	check("told", true, 1800, nil, AbandonAfter, ledger.JobFailed, "abandoned by its provider: no receipt by the lease's end (1800 s of usage countersigned); the coordinator was told", 1)
	check("nothing countersigned", true, 0, nil, AbandonAfter, ledger.JobFailed, "no usage was countersigned: nothing to report", 0)
	check("no hold", false, 1800, nil, AbandonAfter, ledger.JobFailed, "the job has no escrow hold, so no coordinator to tell", 0)
	check("delivery failed, within the grace", true, 1800, errors.New("coordinator unreachable"), AbandonAfter, ledger.JobRunning, "", 1)
	check("delivery failed, past the grace", true, 1800, errors.New("coordinator unreachable"), protocol.HoldGrace, ledger.JobFailed, "the coordinator could not be told: coordinator unreachable", 1)
	check("settled already", true, 1800, errors.New("hold of job 00000000000000ab settled already"), AbandonAfter, ledger.JobFailed, "the job's hold is settled already at the coordinator", 1)
}

// TestRenterClockMovedBack replays the soak's clock skew on a renter (seed 2026): a renter
// whose clock ran 3 minutes ahead while its job started is restarted with its clock right.
// What it observed of the job is dated by the clock before; without CheckClock it would
// see the job start 3 minutes in its future, refuse every later checkpoint (the provider
// then stops the job as unmetered) and dispute the honest receipt. With it, the renter
// countersigns the checkpoint and the receipt.
func TestRenterClockMovedBack(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	m.pv.clk.Advance(time.Minute)
	m.rn.meterOnce(context.Background(), m.rn.job(t, v.ID))
	m.rn.CheckClock()
	// The renter's clock was 3 minutes ahead: every time it wrote was 3 minutes later.
	ahead := 3 * time.Minute
	m.rn.ledger.UpdateJob(v.ID, func(j *ledger.Job) error {
		j.ObservedStart, j.LastSeenRunning = j.ObservedStart.Add(ahead), j.LastSeenRunning.Add(ahead)
		return nil
	})
	m.rn.ledger.MarkClock(m.pv.clk.Now().Add(ahead))
	// It restarts 2 s later, its clock right.
	m.pv.clk.Advance(2 * time.Second)
	m.rn.CheckClock()
	rj := m.rn.job(t, v.ID)
	if got := m.pv.clk.Now().Sub(rj.ObservedStart); got < time.Minute || got > time.Minute+protocol.MeterTolerance {
		t.Fatalf("after the restart the renter sees the job started %s ago; it ran 62 s", got)
	}
	m.pv.clk.Advance(time.Minute)
	m.rn.meterOnce(context.Background(), m.rn.job(t, v.ID))
	if rj := m.rn.job(t, v.ID); rj.CheckpointSeconds != 122 {
		t.Fatalf("the checkpoint after the clock moved back: the renter countersigned %d s, want 122", rj.CheckpointSeconds)
	}
	m.pv.clk.Advance(30 * time.Second)
	m.pv.rt.end(v.ID, sandbox.Exit{Code: 0, Reason: sandbox.ReasonExited})
	m.pv.ended(t, v.ID)
	ev, err := m.rn.JobLogs(context.Background(), v.ID, true, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !ev.Countersign || ev.Seconds != 152 || len(m.rn.job(t, v.ID).Dispute) > 0 {
		t.Fatalf("the honest receipt of 152 s: countersigned %v, %d s, disputed %v", ev.Countersign, ev.Seconds, len(m.rn.job(t, v.ID).Dispute) > 0)
	}
	// A clock that did not move back moves nothing.
	before := m.rn.job(t, v.ID)
	m.rn.CheckClock()
	if after := m.rn.job(t, v.ID); !after.ObservedStart.Equal(before.ObservedStart) {
		t.Fatalf("a clock that did not move back moved the observed start from %s to %s", before.ObservedStart, after.ObservedStart)
	}
}
