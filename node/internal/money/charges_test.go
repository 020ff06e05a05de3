package money

import (
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// What a job is charged (docs/settlement.md, section 3), from the provider's job report
// over the job-report stream.

// jobDesk is a coordinator on a network with a provider and a renter who has deposited
// 100 USDC there.
type jobDesk struct {
	*coordinator
	net              *testNet
	provider, renter party
	provHost         host.Host
}

func newJobDesk(t *testing.T) *jobDesk {
	c := newCoordinator(t)
	d := &jobDesk{coordinator: c, net: c.serve(t), provider: newParty(), renter: newParty()}
	d.provHost = d.net.join(t, d.provider, "10.0.0.2")
	c.deposit(t, d.renter, 100_000_000)
	return d
}

// job is a held job that ended ten minutes ago after seconds, its last checkpoint at
// cpSeconds (none when negative).
func (d *jobDesk) job(t *testing.T, seconds, cpSeconds int64) *job {
	j := newJob(t, d.provider, d.renter, d.clock.Now().Add(-70*time.Minute), seconds, cpSeconds)
	d.hold(t, j)
	return j
}

// TestChargeCountersignedReceipt: a receipt the renter countersigned is charged at once,
// its amount; the rest of the hold returns to the renter, the provider earns the charge
// less the commission, and the job counts for the provider's completion. The same report
// again changes nothing.
func TestChargeCountersignedReceipt(t *testing.T) {
	d := newJobDesk(t)
	j := d.job(t, 1800, 1740)
	j.countersignReceipt(t)
	if a := d.net.report(t, d.provHost, j.report()); a["ok"] != "true" || a["pending"] != "" {
		t.Fatalf("answer %v", a)
	}
	charge := protocol.Cost(testPrice, testGPUs, 1800) // 3.60 USDC
	h := d.holdOf(t, j)
	if h.State != ledger.HoldCharged || h.Charge != charge || h.Rule != protocol.RuleCountersignedReceipt {
		t.Fatalf("hold: %+v", h)
	}
	if a := d.account(t, d.renter); a.Available != 100_000_000-charge || a.Held != 0 || a.Charged != charge {
		t.Fatalf("renter's account: %+v", a)
	}
	es := d.earnings(t, d.provider)
	if len(es) != 1 || es[0].Charge != charge || es[0].Commission != charge/10 || es[0].Net != charge-charge/10 {
		t.Fatalf("earnings: %+v", es)
	}
	rs, _ := d.ledger.Reliability.UpdateReliability(d.provider.id.String(), func(*ledger.ReliabilityState) error { return nil })
	if rs.Reliability.Completion.Total == 0 || rs.Reliability.Completion.Good != rs.Reliability.Completion.Total {
		t.Fatalf("completion after a job that ended well: %+v", rs.Reliability.Completion)
	}
	if a := d.net.report(t, d.provHost, j.report()); a["ok"] != "true" || len(d.earnings(t, d.provider)) != 1 {
		t.Fatalf("the report again: %v, %d earnings", a, len(d.earnings(t, d.provider)))
	}
	if n := testutil.ToFloat64(d.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindReceipt), "report")); n != 1 {
		t.Fatalf("%v reports counted accepted, want 1", n)
	}
}

// TestChargeUncountersignedReceipt: a receipt the renter did not countersign waits for the
// dispute window, then is charged at most the last countersigned checkpoint plus one
// minute; never more than the receipt.
func TestChargeUncountersignedReceipt(t *testing.T) {
	for _, tc := range []struct {
		name               string
		seconds, cpSeconds int64
		chargedSeconds     int64
	}{
		{"no checkpoint", 1800, -1, 60},
		{"checkpoint at 10 min", 1800, 600, 660},
		{"checkpoint just before the end", 1800, 1780, 1800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newJobDesk(t)
			j := d.job(t, tc.seconds, tc.cpSeconds)
			if a := d.net.report(t, d.provHost, j.report()); a["ok"] != "true" || a["pending"] != "true" {
				t.Fatalf("answer %v", a)
			}
			if h := d.holdOf(t, j); h.State != ledger.HoldPending {
				t.Fatalf("hold %s before the window ends", h.State)
			}
			d.clock.Advance(23 * time.Hour)
			d.chargeDue()
			if h := d.holdOf(t, j); h.State != ledger.HoldPending {
				t.Fatalf("hold %s charged an hour before the dispute window ends", h.State)
			}
			d.clock.Advance(time.Hour + time.Second)
			d.chargeDue()
			want := protocol.Cost(testPrice, testGPUs, tc.chargedSeconds)
			if h := d.holdOf(t, j); h.State != ledger.HoldCharged || h.Charge != want || h.Rule != protocol.RuleCheckpoint {
				t.Fatalf("hold after the window: %+v, want %d charged", h, want)
			}
			if a := d.account(t, d.renter); a.Available != 100_000_000-want {
				t.Fatalf("renter's available %d, want %d", a.Available, 100_000_000-want)
			}
		})
	}
}

// TestCountersignatureWithinWindow: the renter's countersignature arriving within the
// window charges the whole receipt at once.
func TestCountersignatureWithinWindow(t *testing.T) {
	d := newJobDesk(t)
	j := d.job(t, 1800, 600)
	d.net.report(t, d.provHost, j.report())
	j.countersignReceipt(t)
	d.clock.Advance(time.Hour)
	if a := d.net.report(t, d.provHost, j.report()); a["ok"] != "true" {
		t.Fatalf("answer %v", a)
	}
	if h := d.holdOf(t, j); h.State != ledger.HoldCharged || h.Charge != j.rec.Amount || h.Rule != protocol.RuleCountersignedReceipt {
		t.Fatalf("hold: %+v", h)
	}
}

// TestReportsWithoutStanding: a report is heard only from a certified provider, for a job
// held here for it and the lease's renter, with the lease signed by that provider and
// countersigned by that renter; anything else is refused and stores nothing.
func TestReportsWithoutStanding(t *testing.T) {
	d := newJobDesk(t)
	stranger := newParty()
	strangerHost := d.net.join(t, stranger, "10.0.0.3")

	unheld := newJob(t, d.provider, d.renter, d.clock.Now().Add(-70*time.Minute), 600, -1)
	d.offers.certify(d.provider.id, "eu-west")
	otherRenter := d.job(t, 600, -1)
	forged := newJob(t, d.provider, newParty(), d.clock.Now().Add(-70*time.Minute), 600, -1) // same job, another renter
	forged.id, forged.l.Job = otherRenter.id, otherRenter.id
	forged.lease = seal(t, protocol.KindLease, forged.l, d.provider)
	forged.leaseCS = countersign(t, protocol.KindLease, forged.lease, forged.id, forged.renter, forged.l.IssuedAt)
	forged.rec.Job, forged.rec.Lease = forged.id, protocol.RecordSHA256(forged.lease)
	forged.receipt = seal(t, protocol.KindReceipt, forged.rec, d.provider)
	badCountersig := d.job(t, 600, -1)
	badCountersig.leaseCS = countersign(t, protocol.KindLease, badCountersig.lease, badCountersig.id, stranger, badCountersig.l.IssuedAt)

	for _, tc := range []struct {
		name string
		from host.Host
		r    protocol.JobReport
		want string
	}{
		{"not certified here", strangerHost, newJob(t, stranger, d.renter, d.clock.Now().Add(-time.Hour), 60, -1).report(), "not recorded: "},
		{"no hold", d.provHost, unheld.report(), "has no escrow hold at this coordinator"},
		{"the hold is another renter's", d.provHost, forged.report(), "is held for renter"},
		{"lease countersigned by another", d.provHost, badCountersig.report(), "countersigned by"},
		{"another provider's lease", strangerHost, otherRenter.report(), "lease signed by"},
	} {
		if tc.name == "another provider's lease" {
			d.offers.certify(stranger.id, "eu-west")
		}
		a := d.net.report(t, tc.from, tc.r)
		if a["ok"] == "true" || !strings.Contains(a["error"], tc.want) {
			t.Errorf("%s: answer %v, want an error with %q", tc.name, a, tc.want)
		}
	}
	if es := d.earnings(t, d.provider); len(es) != 0 {
		t.Fatalf("refused reports made %d earnings", len(es))
	}
	if _, err := d.ledger.Escrow.GetJobReport(unheld.id, d.provider.id.String()); err == nil {
		t.Fatal("a report without a hold was stored")
	}
	if h := d.holdOf(t, otherRenter); h.State != ledger.HoldHeld {
		t.Fatalf("a forged report moved the hold to %s", h.State)
	}
}

// TestInterruptedJobCountsAgainstProvider: a receipt whose reason is the provider's fault
// charges what ran and counts against the provider's completion, with the reason.
func TestInterruptedJobCountsAgainstProvider(t *testing.T) {
	d := newJobDesk(t)
	j := d.job(t, 600, 590)
	j.rec.Reason = "lost GPU-0: it fell off the bus"
	j.receipt = seal(t, protocol.KindReceipt, j.rec, d.provider)
	j.countersignReceipt(t)
	if a := d.net.report(t, d.provHost, j.report()); a["ok"] != "true" {
		t.Fatalf("answer %v", a)
	}
	rs, _ := d.ledger.Reliability.UpdateReliability(d.provider.id.String(), func(*ledger.ReliabilityState) error { return nil })
	if rs.Reliability.Completion.Good != 0 || rs.Reliability.Completion.Total == 0 || len(rs.Events) != 1 || !strings.Contains(rs.Events[0], "fell off the bus") {
		t.Fatalf("completion %+v, events %v", rs.Reliability.Completion, rs.Events)
	}
	if h := d.holdOf(t, j); h.Charge != j.rec.Amount {
		t.Fatalf("charged %d, want %d", h.Charge, j.rec.Amount)
	}
}

// TestWashJobsDoNotCount: jobs shorter than MinCountedGPUSeconds that ended well, such as
// the thousands of one-second self-jobs a provider with a renter of its own could run, are
// charged but count neither for the provider's completion nor in the market's lease count
// and prices (security review item 18); one its provider interrupted counts against it
// whatever its length.
func TestWashJobsDoNotCount(t *testing.T) {
	d := marketDesk(t)
	completion := func() (float64, float64) {
		rs, _ := d.ledger.Reliability.UpdateReliability(d.provider.id.String(), func(*ledger.ReliabilityState) error { return nil })
		return rs.Reliability.Completion.Good, rs.Reliability.Completion.Total
	}
	before, err := d.market.compute(d.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	good, total := completion()
	for range 20 {
		j := d.job(t, MinCountedGPUSeconds/testGPUs-1, 0)
		j.countersignReceipt(t)
		d.net.report(t, d.provHost, j.report())
		if h := d.holdOf(t, j); h.State != ledger.HoldCharged {
			t.Fatalf("a short job is still charged: %s", h.State)
		}
	}
	if g, tot := completion(); g != good || tot != total {
		t.Fatalf("20 short jobs moved the completion from %v/%v to %v/%v", good, total, g, tot)
	}
	after, _ := d.market.compute(d.clock.Now())
	if after.Markets[0].Leases != before.Markets[0].Leases || after.Markets[0].MedianLeasePrice != before.Markets[0].MedianLeasePrice {
		t.Fatalf("short jobs counted in the market: %+v, before %+v", after.Markets[0], before.Markets[0])
	}
	j := d.job(t, 10, 5)
	j.rec.Reason = "lost GPU-0: it fell off the bus"
	j.receipt = seal(t, protocol.KindReceipt, j.rec, d.provider)
	j.countersignReceipt(t)
	d.net.report(t, d.provHost, j.report())
	if _, tot := completion(); tot == total {
		t.Fatal("a short job its provider interrupted did not count against it")
	}
}
