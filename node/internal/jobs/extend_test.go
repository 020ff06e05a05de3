package jobs

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// Leases that grow (extend.go).

// TestLeaseExtended: before its lease ends, a renter extends a running job by half an
// hour: the hold is raised to cover the longer lease, both sides keep the provider's new
// lease (extending the first, countersigned by the renter), the sandbox lets the job run
// half an hour longer, metering goes on against the new lease, and the receipt of a job
// that ran past the first lease's end counts the whole run.
func TestLeaseExtended(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	first := m.rn.job(t, v.ID).Lease
	spec, _ := m.pv.rt.spec(v.ID)
	m.pv.clk.Advance(50 * time.Minute)
	m.rn.meterOnce(context.Background(), m.rn.job(t, v.ID))

	got, err := m.rn.ExtendJob(context.Background(), v.ID, 1800)
	if err != nil {
		t.Fatal(err)
	}
	if !got.EndsAt.Equal(t0.Add(90 * time.Minute)) {
		t.Fatalf("the job's lease ends at %s after the extension", got.EndsAt)
	}
	pj, rj := m.pv.job(t, v.ID), m.rn.job(t, v.ID)
	if !bytes.Equal(pj.Lease, rj.Lease) || len(pj.PriorLeases) != 1 || !bytes.Equal(pj.PriorLeases[0], first) || !bytes.Equal(rj.PriorLeases[0], first) {
		t.Fatal("the two sides do not keep the same new lease and the first before it")
	}
	l, _, _ := protocol.OpenLease(pj.Lease)
	if l.Extends != protocol.RecordSHA256(first) || !l.EndsAt.Equal(t0.Add(90*time.Minute)) || !l.IssuedAt.Equal(t0) {
		t.Fatalf("new lease %+v", l)
	}
	if _, err := protocol.CheckCountersignature(pj.LeaseCountersig, pj.Lease, protocol.KindLease, m.rn.peer.ID, m.pv.clk.Now()); err != nil {
		t.Fatalf("the provider keeps a countersignature of the new lease that does not hold: %v", err)
	}
	if now, _ := m.pv.rt.spec(v.ID); now.WallClock != spec.WallClock+30*time.Minute {
		t.Fatalf("the sandbox's wall clock is %s, was %s", now.WallClock, spec.WallClock)
	}
	if len(m.rn.escrow.extended) != 1 {
		t.Fatalf("holds raised: %d", len(m.rn.escrow.extended))
	}
	if h := m.rn.escrow.extended[0]; h.Amount != protocol.HoldAmount(1_000_000, 1, 5400) || h.ExpiresAt.Before(l.EndsAt.Add(protocol.HoldGrace)) {
		t.Fatalf("the hold raised to %s USDC until %s", h.Amount, h.ExpiresAt)
	}
	// Metering at once against the new lease: a report carries a checkpoint of it.
	for _, j := range []ledger.Job{pj, rj} {
		if _, err := protocol.CheckCheckpoint(j.Checkpoint, j.Lease, l, m.pv.clk.Now()); err != nil || j.CheckpointSeconds != 3000 {
			t.Fatalf("%s's checkpoint after the extension (%d s): %v", j.Side, j.CheckpointSeconds, err)
		}
	}

	m.pv.clk.Advance(30 * time.Minute) // 80 minutes: past the first lease's end
	m.pv.rt.end(v.ID, sandbox.Exit{Code: 0, Reason: sandbox.ReasonExited, EndedAt: m.pv.clk.Now()})
	eventually(t, "the job's receipt", func() bool { return len(m.pv.job(t, v.ID).Receipt) > 0 })
	pj = m.pv.job(t, v.ID)
	rec, err := protocol.CheckReceipt(pj.Receipt, pj.Lease, l, m.pv.clk.Now())
	if err != nil || rec.Seconds != 4800 || rec.Amount != protocol.Cost(1_000_000, 1, 4800) {
		t.Fatalf("receipt of the extended job: %+v %v", rec, err)
	}
}

// TestExtensionKeepsCountersignedUsage: a renter that extends its job and then never
// countersigns again leaves its provider the usage countersigned with the longer lease:
// the provider's record holds a checkpoint of the new lease, countersigned by the renter,
// counting every second run up to the extension (more than the last one countersigned
// before it), so a report with the new lease is charged for them.
func TestExtensionKeepsCountersignedUsage(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	m.pv.clk.Advance(50 * time.Minute)
	m.rn.meterOnce(context.Background(), m.rn.job(t, v.ID))
	if got := m.pv.job(t, v.ID).CheckpointSeconds; got != 3000 {
		t.Fatalf("countersigned before the extension: %d s", got)
	}
	m.pv.clk.Advance(5 * time.Minute)

	// A stingy renter: it countersigns what the extension needs, and nothing after.
	reply := extendByHand(t, m, v.ID, 1800, func(a protocol.JobMsg) protocol.JobMsg {
		return protocol.JobMsg{Type: "countersign", Record: m.rn.countersignOf(t, v.ID, protocol.KindLease, a.Record),
			Checkpoint: m.rn.countersignOf(t, v.ID, protocol.KindCheckpoint, a.Checkpoint)}
	})
	if reply.Type != "ok" {
		t.Fatalf("the extension was refused: %s", reply.Reason)
	}
	pj := m.pv.job(t, v.ID)
	l, _, _ := protocol.OpenLease(pj.Lease)
	if !l.EndsAt.Equal(t0.Add(90 * time.Minute)) {
		t.Fatalf("the provider's lease ends at %s", l.EndsAt)
	}
	now := m.pv.clk.Now()
	cp, err := protocol.CheckCheckpoint(pj.Checkpoint, pj.Lease, l, now)
	if err != nil {
		t.Fatalf("the provider keeps no checkpoint of the new lease: %v", err)
	}
	if _, err := protocol.CheckCountersignature(pj.CheckpointCountersig, pj.Checkpoint, protocol.KindCheckpoint, m.rn.peer.ID, now); err != nil {
		t.Fatalf("the provider's checkpoint of the new lease is not countersigned: %v", err)
	}
	if cp.Seconds != 3300 || pj.CheckpointSeconds != 3300 {
		t.Fatalf("the checkpoint of the new lease counts %d s (record: %d s), not the 3300 s run", cp.Seconds, pj.CheckpointSeconds)
	}
	// The renter countersigns nothing more; the job runs on to 80 minutes and ends.
	m.pv.clk.Advance(25 * time.Minute)
	rec := protocol.Receipt{Price: l.Price, GPUs: l.GPUs, Seconds: 4800}
	if got := protocol.CheckpointCharge(&rec, pj.CheckpointSeconds); got < protocol.Cost(l.Price, l.GPUs, 3300) {
		t.Fatalf("an uncountersigned receipt of the extended job is charged %s", got)
	}
}

// TestExtensionNeedsCheckpointCountersigned: a renter that countersigns the longer lease
// but not the checkpoint of it that came along (no countersignature, one of another
// record, one by another key) gets no extension: the lease, its countersigned checkpoint
// and the sandbox's wall clock stay as they were.
func TestExtensionNeedsCheckpointCountersigned(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	m.pv.clk.Advance(50 * time.Minute)
	m.rn.meterOnce(context.Background(), m.rn.job(t, v.ID))
	before := m.pv.job(t, v.ID)
	spec, _ := m.pv.rt.spec(v.ID)
	stranger := m.renter(t)

	for name, checkpointCountersig := range map[string]func(a protocol.JobMsg) []byte{
		"no checkpoint countersignature": func(protocol.JobMsg) []byte { return nil },
		"the lease's countersignature twice": func(a protocol.JobMsg) []byte {
			return m.rn.countersignOf(t, v.ID, protocol.KindLease, a.Record)
		},
		"the checkpoint countersigned by another peer": func(a protocol.JobMsg) []byte {
			return stranger.countersignOf(t, v.ID, protocol.KindCheckpoint, a.Checkpoint)
		},
	} {
		reply := extendByHand(t, m, v.ID, 1800, func(a protocol.JobMsg) protocol.JobMsg {
			return protocol.JobMsg{Type: "countersign", Record: m.rn.countersignOf(t, v.ID, protocol.KindLease, a.Record), Checkpoint: checkpointCountersig(a)}
		})
		if reply.Type == "ok" {
			t.Fatalf("%s: the provider extended the lease", name)
		}
		pj := m.pv.job(t, v.ID)
		if !bytes.Equal(pj.Lease, before.Lease) || len(pj.PriorLeases) != 0 {
			t.Fatalf("%s: the provider's lease changed", name)
		}
		if !bytes.Equal(pj.Checkpoint, before.Checkpoint) || !bytes.Equal(pj.CheckpointCountersig, before.CheckpointCountersig) || pj.CheckpointSeconds != 3000 {
			t.Fatalf("%s: the countersigned checkpoint of the lease in force was not kept (%d s)", name, pj.CheckpointSeconds)
		}
		if now, _ := m.pv.rt.spec(v.ID); now.WallClock != spec.WallClock {
			t.Fatalf("%s: the sandbox's wall clock changed", name)
		}
	}
}

// TestCheckpointAcrossExtension: a checkpoint of the first lease countersigned while the
// lease was being extended is not kept over the checkpoint of the new lease: the job's
// latest checkpoint still names the lease in force, so that a report can carry it.
func TestCheckpointAcrossExtension(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	m.pv.clk.Advance(50 * time.Minute)
	ctx := context.Background()
	s, in, err := m.rn.control(ctx, m.rn.job(t, v.ID), protocol.JobMsg{Op: "checkpoint"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old, err := readMsg(in)
	if err != nil || old.Type != "checkpoint" {
		t.Fatalf("checkpoint: %+v %v", old, err)
	}
	if _, err := m.rn.ExtendJob(ctx, v.ID, 1800); err != nil {
		t.Fatal(err)
	}
	if err := sendMsg(s, protocol.JobMsg{Type: "countersign", Record: m.rn.countersignOf(t, v.ID, protocol.KindCheckpoint, old.Record)}); err != nil {
		t.Fatal(err)
	}
	if reply, err := readMsg(in); err != nil || reply.Type == "ok" {
		t.Fatalf("the provider took a checkpoint of the lease extended: %+v %v", reply, err)
	}
	pj := m.pv.job(t, v.ID)
	l, _, _ := protocol.OpenLease(pj.Lease)
	if _, err := protocol.CheckCheckpoint(pj.Checkpoint, pj.Lease, l, m.pv.clk.Now()); err != nil || pj.CheckpointSeconds != 3000 {
		t.Fatalf("the provider's latest checkpoint (%d s) does not name the lease in force: %v", pj.CheckpointSeconds, err)
	}
}

// extendByHand raises the job's hold and asks its provider for seconds more over the
// job-control stream, answering the provider's accept with answer; it returns the
// provider's last word.
func extendByHand(t *testing.T, m *market, id string, seconds int64, answer func(accept protocol.JobMsg) protocol.JobMsg) protocol.JobMsg {
	t.Helper()
	ctx := context.Background()
	j := m.rn.job(t, id)
	l, _, _ := protocol.OpenLease(j.Lease)
	ends := l.EndsAt.Add(time.Duration(seconds) * time.Second)
	hold, err := m.rn.escrow.ExtendHold(ctx, j, protocol.HoldAmount(l.Price, l.GPUs, int64(ends.Sub(l.IssuedAt)/time.Second)), ends.Add(protocol.HoldGrace+time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s, in, err := m.rn.control(ctx, j, protocol.JobMsg{Op: "extend", Seconds: seconds, Record: hold})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := readMsg(in)
	if err != nil || a.Type != "accept" {
		t.Fatalf("the provider's answer to extend: %+v %v", a, err)
	}
	if err := sendMsg(s, answer(a)); err != nil {
		t.Fatal(err)
	}
	last, err := readMsg(in)
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// countersignOf is the renter's countersignature of a record of job id.
func (rn *renter) countersignOf(t *testing.T, id string, kind protocol.Kind, raw []byte) []byte {
	t.Helper()
	cs, err := rn.countersign(id, kind, raw, rn.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestLeaseExtensionRefused: an extension is refused, leaving the lease and the sandbox as
// they were, when it adds more than the proposal's max_seconds, when the coordinator does
// not raise the hold (the renter's balance), outside the provider's availability window,
// without a hold that covers it, after the lease's end, and to a stranger.
func TestLeaseExtensionRefused(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	ctx := context.Background()
	first := m.rn.job(t, v.ID).Lease
	spec, _ := m.pv.rt.spec(v.ID)
	unchanged := func(what string) {
		t.Helper()
		if !bytes.Equal(m.pv.job(t, v.ID).Lease, first) || !bytes.Equal(m.rn.job(t, v.ID).Lease, first) {
			t.Fatalf("%s: the lease changed", what)
		}
		if now, _ := m.pv.rt.spec(v.ID); now.WallClock != spec.WallClock {
			t.Fatalf("%s: the sandbox's wall clock changed", what)
		}
	}

	if _, err := m.rn.ExtendJob(ctx, v.ID, 3601); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("more than the proposal's max_seconds: %v", err)
	}
	unchanged("more than max_seconds")

	m.rn.escrow.extendErr = errors.New("insufficient funds: the longer lease may cost up to 1.00 USDC more and 0.10 USDC is available")
	if _, err := m.rn.ExtendJob(ctx, v.ID, 1800); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "insufficient funds") {
		t.Fatalf("beyond the balance: %v", err)
	}
	unchanged("beyond the balance")
	m.rn.escrow.extendErr = nil

	m.pv.pub.mu.Lock()
	m.pv.pub.open = false
	m.pv.pub.mu.Unlock()
	if _, err := m.rn.ExtendJob(ctx, v.ID, 1800); !errors.Is(err, ErrExtensionRefused) || !strings.Contains(err.Error(), "availability window") {
		t.Fatalf("outside the availability window: %v", err)
	}
	unchanged("outside the availability window")
	m.pv.pub.mu.Lock()
	m.pv.pub.open = true
	m.pv.pub.mu.Unlock()

	// Asked straight over the stream: no hold, or one that does not cover the longer lease.
	j := m.rn.job(t, v.ID)
	l, _, _ := protocol.OpenLease(j.Lease)
	short, _ := m.rn.escrow.ExtendHold(ctx, j, protocol.HoldAmount(l.Price, 1, 3600), l.EndsAt.Add(protocol.HoldGrace+time.Hour))
	for name, hold := range map[string][]byte{"no hold": nil, "a hold that does not cover it": short} {
		if _, err := m.rn.askExtension(ctx, j, l, &protocol.Proposal{MaxSeconds: 3600}, 1800, hold); !errors.Is(err, ErrExtensionRefused) || !strings.Contains(err.Error(), "hold") {
			t.Fatalf("%s: %v", name, err)
		}
		unchanged(name)
	}

	stranger := m.renter(t)
	if _, err := stranger.askExtension(ctx, ledger.Job{ID: v.ID, Peer: m.pv.peer.ID.String(), Lease: j.Lease}, l, &protocol.Proposal{MaxSeconds: 3600}, 1800, nil); err == nil || !strings.Contains(err.Error(), "no job "+v.ID+" of yours") {
		t.Fatalf("a stranger's extension: %v", err)
	}
	unchanged("a stranger")

	m.pv.clk.Advance(time.Hour)
	if _, err := m.rn.ExtendJob(ctx, v.ID, 1800); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "too late") {
		t.Fatalf("after the lease's end: %v", err)
	}
	unchanged("after the lease's end")
}

// TestExtensionWithinAvailability: with a weekly schedule (the offers subsystem's
// publisher), an extension is taken only when the window stays open, without a break,
// from the lease's end to the new end.
func TestExtensionWithinAvailability(t *testing.T) {
	sched, err := protocol.ParseSchedule("UTC", []string{"tue 00:00-14:00", "tue 15:00-16:00"}) // t0 is a Tuesday, 12:00
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{publisher: schedPublisher{sched}}
	leaseEnd := t0.Add(time.Hour)
	for _, c := range []struct {
		to   time.Duration // after the lease's end
		open bool
	}{{30 * time.Minute, true}, {time.Hour, true}, {time.Hour + time.Second, false}, {150 * time.Minute, false}} {
		if got := r.openThrough(leaseEnd, leaseEnd.Add(c.to)); got != c.open {
			t.Errorf("extended to %s: open %v, want %v", leaseEnd.Add(c.to).Format(time.Kitchen), got, c.open)
		}
	}
	if r.openThrough(t0.Add(150*time.Minute), t0.Add(160*time.Minute)) {
		t.Error("an extension starting in the closed hour was taken")
	}
}

// schedPublisher is a publisher with a weekly schedule.
type schedPublisher struct{ s protocol.Schedule }

func (p schedPublisher) Current() *protocol.SignedOffer { return nil }
func (p schedPublisher) Open(now time.Time) bool        { return p.s.Open(now) }
func (p schedPublisher) Schedule() protocol.Schedule    { return p.s }

// ExtendHold signs the raised hold with the coordinator's key, unless extendErr refuses.
func (f *fakeEscrow) ExtendHold(_ context.Context, j ledger.Job, amount protocol.MicroUSDC, expiresAt time.Time) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.extendErr != nil {
		return nil, f.extendErr
	}
	l, _, err := protocol.OpenLease(j.Lease)
	if err != nil {
		return nil, err
	}
	id, _ := peer.IDFromPrivateKey(f.coordinator)
	h := protocol.EscrowHold{Version: protocol.SettlementVersion, Coordinator: id.String(), Renter: l.Renter, Provider: l.Provider,
		Job: j.ID, Amount: amount, IssuedAt: l.IssuedAt, ExpiresAt: expiresAt}
	f.extended = append(f.extended, h)
	return protocol.Seal(protocol.KindEscrowHold, h, f.coordinator)
}

// ExtendWallClock lets a running job run by longer: its spec's wall clock grows.
func (f *fakeRuntime) ExtendWallClock(_ context.Context, id string, by time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	if j == nil {
		return sandbox.ErrNotFound
	}
	select {
	case <-j.done:
		return errors.New("the job ended")
	default:
	}
	j.spec.WallClock += by
	return nil
}
