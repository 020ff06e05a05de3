package ledger

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
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

// A renter's deposits credited while its jobs are held, extended and charged, all at once
// (a coordinator's deposit watcher beside its job streams): every operation succeeds, none
// fails for having touched the account another changed meanwhile, and the account adds up.
func TestMoneyMovesAtOnce(t *testing.T) {
	l := openTemp(t, t.TempDir())
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	const workers, rounds = 6, 20
	seal := func(h Hold) ([]byte, error) { return []byte("signed"), nil }
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for r := range rounds {
				i := w*rounds + r + 1
				sig := fmt.Sprint("deposit", i)
				if _, _, err := l.Escrow.CreditDeposit(Deposit{Signature: sig, Renter: "renter", Amount: 1_000_000, CreditedAt: now}); err != nil {
					errs <- fmt.Errorf("deposit %s: %w", sig, err)
					return
				}
				if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: "renter", Provider: "prov", Amount: 400_000, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
					errs <- fmt.Errorf("hold %d: %w", i, err)
					return
				}
				if _, err := l.Escrow.ExtendHold(jobID(i), "renter", 600_000, now.Add(2*time.Hour), seal); err != nil {
					errs <- fmt.Errorf("extend %d: %w", i, err)
					return
				}
				rc := ReportCharge{Report: JobReport{Job: jobID(i), Provider: "prov", ReceivedAt: now}, Countersigned: true, Receipt: receiptHash(i),
					Renter: "renter", Amount: 250_000, Model: "L4-24GB", GPUs: 1, Seconds: 60, EndedAt: now}
				if out, err := l.Escrow.ChargeReports([]ReportCharge{rc}); err != nil || out[0].Earning == nil {
					errs <- fmt.Errorf("charge %d: %v %+v", i, err, out)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	n := protocol.MicroUSDC(workers * rounds)
	a, err := l.Escrow.GetAccount("renter")
	if err != nil || a.Deposited != n*1_000_000 || a.Charged != n*250_000 || a.Held != 0 || a.OpenHolds != 0 || a.Available != a.Deposited-a.Charged {
		t.Fatalf("the account after %d jobs: %+v %v", n, a, err)
	}
}
