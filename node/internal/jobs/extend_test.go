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
		if _, _, err := m.rn.askExtension(ctx, j, l, &protocol.Proposal{MaxSeconds: 3600}, 1800, hold); !errors.Is(err, ErrExtensionRefused) || !strings.Contains(err.Error(), "hold") {
			t.Fatalf("%s: %v", name, err)
		}
		unchanged(name)
	}

	stranger := m.renter(t)
	if _, _, err := stranger.askExtension(ctx, ledger.Job{ID: v.ID, Peer: m.pv.peer.ID.String(), Lease: j.Lease}, l, &protocol.Proposal{MaxSeconds: 3600}, 1800, nil); err == nil || !strings.Contains(err.Error(), "no job "+v.ID+" of yours") {
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
