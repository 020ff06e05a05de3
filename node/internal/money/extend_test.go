package money

import (
	"context"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// TestHoldExtended: a renter whose job's lease grows raises its hold with the extend op;
// a stranger cannot, nor can a raise beyond the renter's balance; the provider's report
// with the longer lease (extending the first) is then charged the whole run, which the
// first hold would have capped.
func TestHoldExtended(t *testing.T) {
	d := newJobDesk(t)
	begin := d.clock.Now().Add(-100 * time.Minute)
	j := newJob(t, d.provider, d.renter, begin, 60, -1)
	d.hold(t, j)
	extend := func(from party, amount protocol.MicroUSDC) (protocol.WalletResponse, error) {
		return d.Serve(context.Background(), from.id, protocol.WalletRequest{Op: "extend", Job: j.id, Amount: amount, ExpiresAt: d.clock.Now().Add(3 * time.Hour)})
	}
	longer := protocol.HoldAmount(testPrice, testGPUs, 7200)
	if _, err := extend(d.provider, longer); err == nil {
		t.Fatal("a stranger raised the renter's hold")
	}
	if _, err := extend(d.renter, 200_000_000); err == nil {
		t.Fatal("a raise beyond the balance")
	}
	if a := d.account(t, d.renter); a.Held != holdAmount {
		t.Fatalf("refused raises moved funds: %+v", a)
	}
	resp, err := extend(d.renter, longer)
	if err != nil {
		t.Fatal(err)
	}
	h, err := protocol.CheckHold(resp.Hold, d.clock.Now(), protocol.NewTrust(d.id))
	if err != nil || h.Job != j.id || h.Amount != longer || !h.ExpiresAt.Equal(d.clock.Now().Add(3*time.Hour)) {
		t.Fatalf("extended hold %+v: %v", h, err)
	}
	if a := d.account(t, d.renter); a.Held != longer || a.Available != 100_000_000-longer {
		t.Fatalf("account after the raise: %+v", a)
	}

	// The provider extended the lease by an hour; the job ran 90 minutes.
	l := j.l
	l.EndsAt, l.Extends = begin.Add(2*time.Hour).UTC(), protocol.RecordSHA256(j.lease)
	j.lease = seal(t, protocol.KindLease, l, d.provider)
	j.leaseCS = countersign(t, protocol.KindLease, j.lease, j.id, d.renter, begin.Add(50*time.Minute))
	j.rec.Lease, j.rec.EndedAt, j.rec.Seconds = protocol.RecordSHA256(j.lease), begin.Add(90*time.Minute).UTC(), 5400
	j.rec.Amount = protocol.Cost(testPrice, testGPUs, 5400)
	j.receipt = seal(t, protocol.KindReceipt, j.rec, d.provider)
	j.countersignReceipt(t)
	if a := d.net.report(t, d.provHost, j.report()); a["ok"] != "true" {
		t.Fatalf("report of the extended lease: %v", a)
	}
	if h := d.holdOf(t, j); h.State != ledger.HoldCharged || h.Charge != j.rec.Amount || j.rec.Amount <= holdAmount {
		t.Fatalf("the run beyond the first lease was not charged in full: %+v (receipt %s, first hold %s)", h, j.rec.Amount, holdAmount)
	}
	if _, err := extend(d.renter, longer+1); err == nil {
		t.Fatal("the hold of an ended job was raised")
	}
}
