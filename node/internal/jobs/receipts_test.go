package jobs

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// TestReceiptCountersigned: when a job ends, the renter following its log takes the
// provider's receipt, checks it against what it observed and countersigns it; the
// provider keeps the countersignature and reports the job again with it to its
// coordinator.
func TestReceiptCountersigned(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	m.pv.clk.Advance(time.Minute)
	m.rn.meterOnce(context.Background(), m.rn.job(t, v.ID))
	m.pv.clk.Advance(30 * time.Second)
	m.pv.rt.end(v.ID, sandbox.Exit{Code: 0, Reason: sandbox.ReasonExited})
	m.pv.ended(t, v.ID)

	var log bytes.Buffer
	ev, err := m.rn.JobLogs(context.Background(), v.ID, true, &log)
	if err != nil {
		t.Fatal(err)
	}
	if ev.State != ledger.JobEnded || !ev.Countersign || ev.Seconds != 90 || ev.Cost != protocol.Cost(1_000_000, 1, 90) || ev.ExitReason != sandbox.ReasonExited {
		t.Fatalf("the renter's view of the ended job: %+v", ev.JobStatus)
	}
	rj := m.rn.job(t, v.ID)
	if _, err := protocol.CheckCountersignature(rj.ReceiptCountersig, rj.Receipt, protocol.KindReceipt, m.rn.peer.ID, m.pv.clk.Now()); err != nil {
		t.Fatalf("the renter's countersignature: %v", err)
	}
	eventually(t, "the provider keeps the countersignature", func() bool {
		return bytes.Equal(m.pv.job(t, v.ID).ReceiptCountersig, rj.ReceiptCountersig)
	})
	eventually(t, "the job reported with its countersignature", func() bool {
		for _, j := range m.pv.reports.reported() {
			if j.ID == v.ID && len(j.ReceiptCountersig) > 0 {
				return true
			}
		}
		return false
	})
}

// TestRenterDisputesWhatItDidNotSee: a provider's receipt charging the whole lease for a
// job the renter last saw running a minute after its start is not countersigned: the
// renter signs a dispute stating what it observed (the start plus one checkpoint interval
// and the tolerance) and sends it to the coordinator. It is a dispute the coordinator
// accepts: signed by the renter, naming the receipt, fewer seconds than it charges.
func TestRenterDisputesWhatItDidNotSee(t *testing.T) {
	pkey, provider := newKey(t)
	clk := clock.NewFake(t0.Add(time.Hour))
	r := newRenter(t, nil, clk)
	renter := r.peer.ID

	lease := protocol.Lease{Version: 1, Job: "00000000000000e1", Proposal: "00", Renter: renter.String(), Provider: provider.String(),
		Model: "L4-24GB", GPUs: 1, Price: 3_600_000, IssuedAt: t0, EndsAt: t0.Add(2 * time.Hour), Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	lraw, _ := protocol.Seal(protocol.KindLease, lease, pkey)
	j := ledger.Job{ID: lease.Job, Side: "renter", Peer: provider.String(), State: ledger.JobRunning, CreatedAt: t0, Lease: lraw,
		ObservedStart: t0, LastSeenRunning: t0.Add(time.Minute)}
	if err := r.ledger.CreateJob(j); err != nil {
		t.Fatal(err)
	}
	rec := protocol.Receipt{Version: 1, Job: lease.Job, Lease: protocol.RecordSHA256(lraw), Provider: provider.String(), Renter: renter.String(),
		Model: lease.Model, GPUs: 1, StartedAt: t0, EndedAt: t0.Add(time.Hour), Seconds: 3600, Price: lease.Price,
		Amount: protocol.Cost(lease.Price, 1, 3600), Reason: "exited"}
	raw, _ := protocol.Seal(protocol.KindReceipt, rec, pkey)
	got, err := r.takeReceipt(context.Background(), j, raw)
	if err != nil {
		t.Fatal(err)
	}
	esc := r.escrow
	if len(got.ReceiptCountersig) != 0 || len(got.Dispute) == 0 || got.State != ledger.JobEnded || len(esc.disputes) != 1 {
		t.Fatalf("an inflated receipt: countersigned %v, disputed %v, sent %d", len(got.ReceiptCountersig) > 0, len(got.Dispute) > 0, len(esc.disputes))
	}
	d, err := protocol.CheckDispute(got.Dispute, raw, &rec, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Seen running at t0+60 s: it may have run until t0+60+60+10 s.
	if d.Seconds != 130 || d.Amount != 130_000 {
		t.Fatalf("the dispute states %d s, %s USDC", d.Seconds, d.Amount)
	}
	if got.ReportedAt.IsZero() {
		t.Fatal("a dispute the coordinator took is sent again")
	}
	// Taking it again changes nothing and sends nothing more.
	if again, _ := r.takeReceipt(context.Background(), got, raw); len(again.ReceiptCountersig) != 0 || len(esc.disputes) != 1 {
		t.Fatal("a disputed receipt taken twice")
	}
}
