package ledger

import (
	"testing"
	"time"
)

// TestAbandonmentCountedOnceAcrossACrash: the release of an abandoned job's expired hold
// marks the job due in the release's own transaction, so that a coordinator that dies
// right after the release still counts it at its next run; counting it updates the
// provider's reliability and marks it counted together, so that it counts once.
func TestAbandonmentCountedOnceAcrossACrash(t *testing.T) {
	l := openTemp(t, t.TempDir())
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	l.Escrow.CreditDeposit(Deposit{Signature: "s", Renter: "r", Amount: 100_000_000, CreditedAt: now})
	for i := 1; i <= 2; i++ {
		if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: "r", Provider: "p", Amount: 10_000_000, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Escrow.PutAbandonment(Abandonment{Job: jobID(1), Renter: "r", Provider: "p", ReceivedAt: now, Seconds: 600}); err != nil {
		t.Fatal(err)
	}
	if released, err := l.Escrow.ReleaseExpired(now.Add(time.Hour)); err != nil || len(released) != 2 {
		t.Fatalf("released %d holds: %v", len(released), err)
	}
	// The coordinator dies here, before counting. At its next run:
	due, err := l.Escrow.DueAbandonments()
	if err != nil || len(due) != 1 || due[0].Job != jobID(1) {
		t.Fatalf("due after the release: %+v %v", due, err)
	}
	count := func(a Abandonment, st *ReliabilityState) error {
		st.AddEvent("abandoned " + a.Job)
		return nil
	}
	for run := 1; run <= 2; run++ {
		first, err := l.Escrow.CountAbandonment(jobID(1), now.Add(time.Hour), count)
		if err != nil || first != (run == 1) {
			t.Fatalf("count %d: first %v, %v", run, first, err)
		}
	}
	st, _ := l.Reliability.UpdateReliability("p", func(*ReliabilityState) error { return nil })
	if st.EventsTotal != 1 || len(st.Events) != 1 {
		t.Fatalf("the provider's reliability after two counts: %d events (%v)", st.EventsTotal, st.Events)
	}
	if due, _ := l.Escrow.DueAbandonments(); len(due) != 0 {
		t.Fatalf("still due once counted: %+v", due)
	}
}
