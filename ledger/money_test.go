package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

func receiptHash(i int) string {
	h := sha256.Sum256([]byte(fmt.Sprint("receipt", i)))
	return hex.EncodeToString(h[:])
}

func jobID(i int) string { return fmt.Sprintf("%016x", i) }

// A renter's money through one job: deposit credited once, a hold, the charge from the
// receipt, the rest back, and the provider's earning less the commission.
func TestMoneyFlowThroughOneJob(t *testing.T) {
	l := openTemp(t, t.TempDir())
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	dep := Deposit{Signature: "sig1", Renter: "renter", Amount: 100_000_000, CreditedAt: now}
	if added, a, err := l.Escrow.CreditDeposit(dep); err != nil || !added || a.Available != 100_000_000 {
		t.Fatalf("first credit: %v %v %+v", added, err, a)
	}
	if added, a, err := l.Escrow.CreditDeposit(dep); err != nil || added || a.Available != 100_000_000 {
		t.Fatalf("the same deposit credited twice: %v %v %+v", added, err, a)
	}
	if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(1), Renter: "renter", Provider: "prov", Amount: 150_000_000, ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("a hold above the balance: %v", err)
	}
	h := Hold{Job: jobID(1), Renter: "renter", Provider: "prov", Amount: 4_201_166, CommissionBPS: 1000, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}
	if _, err := l.Escrow.PlaceHold(h); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Escrow.PlaceHold(h); err != nil {
		t.Fatalf("a retried hold request: %v", err)
	}
	a, _ := l.Escrow.GetAccount("renter")
	if a.Available != 100_000_000-4_201_166 || a.Held != 4_201_166 {
		t.Fatalf("after the hold (placed once although asked twice): %+v", a)
	}
	rc := ReportCharge{Report: JobReport{Job: jobID(1), Provider: "prov", ReceivedAt: now}, Countersigned: true, Receipt: receiptHash(1), Renter: "renter",
		Amount: 1_050_000, Model: "L4-24GB", GPUs: 2, Seconds: 900, EndedAt: now}
	out, err := l.Escrow.ChargeReports([]ReportCharge{rc})
	if err != nil || !out[0].Added || out[0].Earning == nil {
		t.Fatalf("charge: %v %+v", err, out)
	}
	if e := out[0].Earning; e.Charge != 1_050_000 || e.Commission != 105_000 || e.Net != 945_000 {
		t.Fatalf("earning %+v", e)
	}
	a, _ = l.Escrow.GetAccount("renter")
	if a.Available != 100_000_000-1_050_000 || a.Held != 0 || a.Charged != 1_050_000 {
		t.Fatalf("after the charge the unused part of the hold returns: %+v", a)
	}
	if out, _ := l.Escrow.ChargeReports([]ReportCharge{rc}); out[0].Added || out[0].Earning != nil {
		t.Fatalf("the same report charged twice: %+v", out)
	}
	if earnings, _ := l.Payouts.Earnings("prov"); len(earnings) != 1 || earnings[0].Batch != "" {
		t.Fatalf("earnings %+v", earnings)
	}
}

func TestChargeCappedAtHoldAndExpiredHoldsReturn(t *testing.T) {
	l := openTemp(t, t.TempDir())
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	l.Escrow.CreditDeposit(Deposit{Signature: "s", Renter: "r", Amount: 10_000_000, CreditedAt: now})
	l.Escrow.PlaceHold(Hold{Job: jobID(1), Renter: "r", Provider: "p", Amount: 2_000_000, ExpiresAt: now.Add(time.Hour)})
	l.Escrow.PlaceHold(Hold{Job: jobID(2), Renter: "r", Provider: "p", Amount: 3_000_000, ExpiresAt: now.Add(time.Hour)})
	out, err := l.Escrow.ChargeReports([]ReportCharge{{Report: JobReport{Job: jobID(1), Provider: "p"}, Countersigned: true, Receipt: receiptHash(1), Renter: "r", Amount: 9_000_000}})
	if err != nil || out[0].Earning.Charge != 2_000_000 {
		t.Fatalf("a receipt above its hold is charged the hold: %v %+v", err, out)
	}
	// A report by another provider than the hold's, or for another renter, is refused and
	// charges nothing.
	for _, it := range []ReportCharge{
		{Report: JobReport{Job: jobID(2), Provider: "intruder"}, Receipt: receiptHash(2), Renter: "r", Amount: 1},
		{Report: JobReport{Job: jobID(2), Provider: "p"}, Receipt: receiptHash(3), Renter: "sockpuppet", Amount: 1},
	} {
		out, _ = l.Escrow.ChargeReports([]ReportCharge{it})
		if out[0].Earning != nil || out[0].Refused == "" || out[0].Added {
			t.Fatalf("a report that contradicts the hold: %+v", out[0])
		}
	}
	if n, err := l.Escrow.ReleaseExpiredHolds(now.Add(30 * time.Minute)); n != 0 || err != nil {
		t.Fatalf("released early: %d %v", n, err)
	}
	if n, err := l.Escrow.ReleaseExpiredHolds(now.Add(time.Hour)); n != 1 || err != nil {
		t.Fatalf("release: %d %v", n, err)
	}
	a, _ := l.Escrow.GetAccount("r")
	if a.Available != 8_000_000 || a.Held != 0 {
		t.Fatalf("account %+v", a)
	}
}

func TestBatchTakesEachReceiptOnce(t *testing.T) {
	l := openTemp(t, t.TempDir())
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	l.Escrow.CreditDeposit(Deposit{Signature: "s", Renter: "r", Amount: 100_000_000, CreditedAt: now})
	var items []ReportCharge
	for i := range 3 {
		l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: "r", Provider: "p", Amount: 1_000_000, CommissionBPS: 1000, ExpiresAt: now.Add(time.Hour)})
		items = append(items, ReportCharge{Report: JobReport{Job: jobID(i), Provider: "p"}, Countersigned: true, Receipt: receiptHash(i), Renter: "r", Amount: 1_000_000})
	}
	if _, err := l.Escrow.ChargeReports(items); err != nil {
		t.Fatal(err)
	}
	earnings, _ := l.Payouts.Earnings("")
	pending := PendingByProvider(earnings)["p"]
	if pending.Amount != 2_700_000 || len(pending.Receipts) != 3 {
		t.Fatalf("pending %+v", pending)
	}
	id, _ := l.Payouts.NextBatchID(now)
	id2, _ := l.Payouts.NextBatchID(now)
	if id != "20261207-001" || id2 != "20261207-002" {
		t.Fatalf("batch ids %s %s", id, id2)
	}
	b := Batch{PayoutBatch: protocol.PayoutBatch{Batch: id, Payouts: []protocol.Payout{{Provider: "p", Amount: pending.Amount, Receipts: pending.Receipts}}}}
	if err := l.Payouts.CreateBatch(b); err != nil {
		t.Fatal(err)
	}
	b.Batch = id2
	if err := l.Payouts.CreateBatch(b); err == nil {
		t.Fatal("a second batch paid the same receipts")
	}
	earnings, _ = l.Payouts.Earnings("p")
	for _, e := range earnings {
		if e.Batch != id {
			t.Fatalf("receipt %s in batch %q", e.Receipt, e.Batch)
		}
	}
	if len(PendingByProvider(earnings)) != 0 {
		t.Fatal("receipts in a batch still pending")
	}
}

// BenchmarkChargeReports measures how many usage receipts per second the ledger records
// (report stored, hold charged, earning written), in batches of 1,000 on disk.
func BenchmarkChargeReports(b *testing.B) {
	l, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const batch = 1000
	n := b.N * batch
	// A renter holds at most MaxOpenHolds at once: the holds are spread over renters.
	const perRenter = MaxOpenHolds / 2
	renter := func(i int) string { return fmt.Sprintf("r%d", i/perRenter) }
	for r := 0; r*perRenter < n; r++ {
		l.Escrow.CreditDeposit(Deposit{Signature: fmt.Sprintf("s%d", r), Renter: renter(r * perRenter), Amount: perRenter * 2_000_000})
	}
	items := make([]ReportCharge, n)
	for i := range n {
		if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: renter(i), Provider: "p", Amount: 2_000_000, CommissionBPS: 1000, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
		items[i] = ReportCharge{Report: JobReport{Job: jobID(i), Provider: "p"}, Countersigned: true, Receipt: receiptHash(i), Renter: renter(i), Amount: 1_000_000}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < n; i += batch {
		if _, err := l.Escrow.ChargeReports(items[i : i+batch]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "receipts/s")
}

// TestBatchOfManyReceipts: a batch paying more receipts than one ledger transaction holds is
// stored and takes all of them; a batch whose marking a crash interrupted is completed by
// FinishMarking before anything else.
func TestBatchOfManyReceipts(t *testing.T) {
	l := openTemp(t, t.TempDir())
	const n = 4000
	l.Escrow.CreditDeposit(Deposit{Signature: "s", Renter: "r", Amount: n * 1_000_000})
	var items []ReportCharge
	for i := range n {
		prov := "p0" // 3,000 receipts
		if i%4 == 3 {
			prov = "p1"
		}
		l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: "r", Provider: prov, Amount: 1_000_000, ExpiresAt: time.Now().Add(time.Hour)})
		items = append(items, ReportCharge{Report: JobReport{Job: jobID(i), Provider: prov}, Countersigned: true, Receipt: receiptHash(i), Renter: "r", Amount: 1_000_000})
	}
	if _, err := l.Escrow.ChargeReports(items); err != nil {
		t.Fatal(err)
	}
	earnings, _ := l.Payouts.Earnings("")
	pending := PendingByProvider(earnings)
	b := Batch{PayoutBatch: protocol.PayoutBatch{Batch: "20261207-001", Payouts: []protocol.Payout{
		{Provider: "p0", Amount: pending["p0"].Amount, Receipts: pending["p0"].Receipts}}}}
	if err := l.Payouts.CreateBatch(b); err != nil {
		t.Fatalf("a batch of %d receipts: %v", len(pending["p0"].Receipts), err)
	}
	// As if the process died right after storing the second batch.
	b2 := Batch{PayoutBatch: protocol.PayoutBatch{Batch: "20261207-002", Payouts: []protocol.Payout{
		{Provider: "p1", Amount: pending["p1"].Amount, Receipts: pending["p1"].Receipts}}}, Marking: true}
	if err := l.Payouts.PutBatch(b2); err != nil {
		t.Fatal(err)
	}
	if err := l.Payouts.FinishMarking(); err != nil {
		t.Fatal(err)
	}
	earnings, _ = l.Payouts.Earnings("")
	if left := PendingByProvider(earnings); len(left) != 0 {
		t.Fatalf("receipts left pending: %d providers", len(left))
	}
	if got, _ := l.Payouts.GetBatch("20261207-002"); got.Marking {
		t.Fatal("marking not finished")
	}
}
