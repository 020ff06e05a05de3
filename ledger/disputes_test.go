package ledger

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// receipt is the test's receipt of job i (its bytes stand for a signed receipt).
func receipt(i int) []byte { return []byte(fmt.Sprint("receipt of ", i)) }

// TestChargeRules: the three ways a job's hold is charged (docs/settlement.md), and that
// no way charges it twice or lets an expiry hand it back while a charge is due.
func TestChargeRules(t *testing.T) {
	l := openTemp(t, t.TempDir())
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	window := 24 * time.Hour
	l.Escrow.CreditDeposit(Deposit{Signature: "s", Renter: "r", Amount: 100_000_000, CreditedAt: now})
	for i := 1; i <= 4; i++ {
		if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: "r", Provider: "p", Amount: 10_000_000, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	report := func(i int, countersigned bool, cpSeconds int64) ReportCharge {
		var cs []byte
		if countersigned {
			cs = []byte("countersignature")
		}
		return ReportCharge{Report: JobReport{Job: jobID(i), Provider: "p", ReceivedAt: now, Receipt: receipt(i), ReceiptCountersig: cs, CheckpointSeconds: cpSeconds},
			Receipt: protocol.RecordSHA256(receipt(i)), Renter: "r", Amount: 6_000_000, Seconds: 3600, EndedAt: now, Countersigned: countersigned,
			CheckpointAmount: protocol.MicroUSDC(1_000 * (cpSeconds + 60)), PendingUntil: now.Add(window)}
	}
	balanced := func() {
		t.Helper()
		a, _ := l.Escrow.GetAccount("r")
		if a.Available+a.Held+a.Charged != a.Deposited {
			t.Fatalf("the account does not add up: %+v", a)
		}
	}

	// 1. Not countersigned: pending, then charged the last checkpoint plus one interval
	// when the window ends; a later checkpoint raises what is due.
	out, err := l.Escrow.ChargeReports([]ReportCharge{report(1, false, 600)})
	if err != nil || !out[0].Added || !out[0].Pending || out[0].Earning != nil {
		t.Fatalf("an uncountersigned receipt is charged at once: %v %+v", err, out)
	}
	if out, _ := l.Escrow.ChargeReports([]ReportCharge{report(1, false, 1200)}); out[0].Earning != nil {
		t.Fatalf("a later checkpoint charged at once: %+v", out)
	}
	if n, _ := l.Escrow.ReleaseExpiredHolds(now.Add(2 * time.Hour)); n != 3 {
		t.Fatalf("expiry: %d holds released; the pending one must stay", n)
	}
	if es, err := l.Escrow.ChargeDue(now.Add(window - time.Second)); err != nil || len(es) != 0 {
		t.Fatalf("charged inside the dispute window: %v %+v", err, es)
	}
	es, err := l.Escrow.ChargeDue(now.Add(window))
	if err != nil || len(es) != 1 || es[0].Charge != 1_260_000 || es[0].Rule != protocol.RuleCheckpoint {
		t.Fatalf("after the window: %v %+v", err, es)
	}
	if es, _ := l.Escrow.ChargeDue(now.Add(2 * window)); len(es) != 0 {
		t.Fatalf("charged twice: %+v", es)
	}
	balanced()

	// 2. The renter's countersignature arriving within the window charges the receipt.
	for i := 5; i <= 7; i++ {
		if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: "r", Provider: "p", Amount: 10_000_000, IssuedAt: now, ExpiresAt: now.Add(3 * window)}); err != nil {
			t.Fatal(err)
		}
	}
	l.Escrow.ChargeReports([]ReportCharge{report(5, false, 0)})
	out, _ = l.Escrow.ChargeReports([]ReportCharge{report(5, true, 0)})
	if out[0].Earning == nil || out[0].Earning.Charge != 6_000_000 || out[0].Earning.Rule != protocol.RuleCountersignedReceipt {
		t.Fatalf("countersigned later: %+v", out)
	}
	if es, _ := l.Escrow.ChargeDue(now.Add(window)); len(es) != 0 {
		t.Fatalf("charged again at the window's end: %+v", es)
	}

	// 3. Disputed: held until a decision, which charges once.
	l.Escrow.ChargeReports([]ReportCharge{report(6, false, 0)})
	d := Dispute{Job: jobID(6), Renter: "r", Provider: "p", ReceivedAt: now, Receipt: receipt(6), Amount: 100_000, Claimed: 6_000_000}
	if _, err := l.Escrow.OpenDispute(d); err != nil {
		t.Fatal(err)
	}
	if es, _ := l.Escrow.ChargeDue(now.Add(window)); len(es) != 0 {
		t.Fatalf("a disputed receipt charged at the window's end: %+v", es)
	}
	if n, _ := l.Escrow.ReleaseExpiredHolds(now.Add(4 * window)); n != 1 {
		t.Fatalf("expiry released %d holds: only job 7's (held, never reported) may go", n)
	}
	if h, _ := l.Escrow.GetHold(jobID(6)); h.State != HoldDisputed {
		t.Fatalf("a disputed hold returned by its expiry: %+v", h)
	}
	got, e, err := l.Escrow.DecideDispute(jobID(6), []byte("decision"), 2_000_000, now)
	if err != nil || e == nil || e.Charge != 2_000_000 || e.Rule != protocol.RuleDecision || got.State != DisputeDecided {
		t.Fatalf("decision: %v %+v %+v", err, e, got)
	}
	if _, _, err := l.Escrow.DecideDispute(jobID(6), []byte("again"), 6_000_000, now); !errors.Is(err, ErrDisputeClosed) {
		t.Fatalf("decided twice: %v", err)
	}
	if _, err := l.Escrow.OpenDispute(Dispute{Job: jobID(5), Renter: "r", Provider: "p"}); !errors.Is(err, ErrDisputeClosed) {
		t.Fatalf("a dispute of a receipt the renter countersigned: %v", err)
	}
	// A countersignature after a dispute charges the receipt and closes the dispute.
	for _, i := range []int{9, 10} {
		if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: "r", Provider: "p", Amount: 10_000_000, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	l.Escrow.ChargeReports([]ReportCharge{report(9, false, 0)})
	for _, i := range []int{9, 10} {
		if _, err := l.Escrow.OpenDispute(Dispute{Job: jobID(i), Renter: "r", Provider: "p", ReceivedAt: now, Receipt: receipt(i), Claimed: 6_000_000}); err != nil {
			t.Fatal(err)
		}
		out, _ := l.Escrow.ChargeReports([]ReportCharge{report(i, true, 0)})
		if out[0].Earning == nil || out[0].Earning.Rule != protocol.RuleCountersignedReceipt || out[0].Earning.Charge != 6_000_000 {
			t.Fatalf("job %d countersigned after its dispute: %+v", i, out)
		}
		if d, _ := l.Escrow.GetDispute(jobID(i)); d.State != DisputeCountersigned || d.Charged != 6_000_000 {
			t.Fatalf("job %d's dispute after the countersignature: %+v", i, d)
		}
	}
	// A dispute before the provider's report: no decision until the report; at the hold's
	// expiry the hold returns to the renter.
	if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(8), Renter: "r", Provider: "p", Amount: 10_000_000, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Escrow.OpenDispute(Dispute{Job: jobID(8), Renter: "r", Provider: "p", Receipt: receipt(8)}); err != nil {
		t.Fatal(err)
	}
	for _, amount := range []protocol.MicroUSDC{0, 1} {
		if _, _, err := l.Escrow.DecideDispute(jobID(8), nil, amount, now); !errors.Is(err, ErrNotReported) {
			t.Fatalf("decided %d before the report: %v", amount, err)
		}
	}
	if n, _ := l.Escrow.ReleaseExpiredHolds(now.Add(time.Hour)); n != 1 {
		t.Fatalf("expiry released %d holds, not the disputed one never reported", n)
	}
	if h, _ := l.Escrow.GetHold(jobID(8)); h.State != HoldReleased {
		t.Fatalf("hold %+v", h)
	}
	if d, _ := l.Escrow.GetDispute(jobID(8)); d.State != DisputeExpired {
		t.Fatalf("the dispute after the hold's expiry: %+v", d)
	}
	balanced()

	// No hold, no charge and no record.
	if out, _ := l.Escrow.ChargeReports([]ReportCharge{report(99, true, 0)}); out[0].Refused == "" || out[0].Added {
		t.Fatalf("a report of a job without a hold: %+v", out)
	}
	if _, err := l.Escrow.GetJobReport(jobID(99), "p"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stored: %v", err)
	}
}
