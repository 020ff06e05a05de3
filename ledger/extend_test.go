package ledger

import (
	"errors"
	"testing"
	"time"
)

// A renter extends its job's hold: the difference moves from available to held, a raise
// beyond the balance changes nothing, a stranger cannot raise it, and the charge of the
// job is then capped by the raised hold.
func TestExtendHold(t *testing.T) {
	l := openTemp(t, t.TempDir())
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if _, _, err := l.Escrow.CreditDeposit(Deposit{Signature: "sig1", Renter: "renter", Amount: 10_000_000, CreditedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(1), Renter: "renter", Provider: "prov", Amount: 2_000_000, IssuedAt: now, ExpiresAt: now.Add(25 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sealed := 0
	seal := func(h Hold) ([]byte, error) { sealed++; return []byte("signed " + h.Amount.String()), nil }

	if _, err := l.Escrow.ExtendHold(jobID(1), "stranger", 4_000_000, now.Add(26*time.Hour), seal); err == nil {
		t.Fatal("a stranger extended the renter's hold")
	}
	if _, err := l.Escrow.ExtendHold(jobID(1), "renter", 20_000_000, now.Add(26*time.Hour), seal); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("a raise beyond the balance: %v", err)
	}
	h, err := l.Escrow.ExtendHold(jobID(1), "renter", 5_000_000, now.Add(26*time.Hour), seal)
	if err != nil {
		t.Fatal(err)
	}
	if h.Amount != 5_000_000 || !h.ExpiresAt.Equal(now.Add(26*time.Hour)) || string(h.Raw) != "signed 5.00" || h.State != HoldHeld {
		t.Fatalf("extended hold %+v", h)
	}
	if got, _ := l.Escrow.GetHold(jobID(1)); got.Amount != 5_000_000 || string(got.Raw) != "signed 5.00" {
		t.Fatalf("stored hold %+v", got)
	}
	if a, _ := l.Escrow.GetAccount("renter"); a.Available != 5_000_000 || a.Held != 5_000_000 || a.OpenHolds != 1 {
		t.Fatalf("account after the extension: %+v", a)
	}
	// A retried request (or a smaller one) leaves the hold as it is, signing nothing.
	if h, err := l.Escrow.ExtendHold(jobID(1), "renter", 3_000_000, now.Add(26*time.Hour), seal); err != nil || h.Amount != 5_000_000 || sealed != 1 {
		t.Fatalf("retried extension: %v %+v, sealed %d times", err, h, sealed)
	}
	// The job's charge is capped by the raised hold, the rest returns.
	rc := ReportCharge{Report: JobReport{Job: jobID(1), Provider: "prov", ReceivedAt: now}, Countersigned: true, Receipt: receiptHash(1), Renter: "renter",
		Amount: 4_500_000, Model: "L4-24GB", GPUs: 1, Seconds: 3600, EndedAt: now}
	if out, err := l.Escrow.ChargeReports([]ReportCharge{rc}); err != nil || out[0].Earning == nil || out[0].Earning.Charge != 4_500_000 {
		t.Fatalf("charge: %v %+v", err, out)
	}
	if a, _ := l.Escrow.GetAccount("renter"); a.Available != 5_500_000 || a.Held != 0 || a.Charged != 4_500_000 {
		t.Fatalf("account after the charge: %+v", a)
	}
	if _, err := l.Escrow.ExtendHold(jobID(1), "renter", 6_000_000, now.Add(27*time.Hour), seal); err == nil {
		t.Fatal("a charged hold was extended")
	}
}
