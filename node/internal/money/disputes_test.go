package money

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Disputes and the coordinator's decisions (docs/settlement.md, "What a job is charged").

// disputed is a reported job (30 minutes run, checkpoint at 20) the renter disputes,
// saying it ran 25 minutes.
func disputed(t *testing.T, d *jobDesk) *job {
	t.Helper()
	j := d.job(t, 1800, 1200)
	d.net.report(t, d.provHost, j.report())
	if _, err := d.Serve(context.Background(), d.renter.id, protocol.WalletRequest{Op: "dispute", Job: j.id,
		Dispute: j.dispute(t, 1500, d.clock.Now()), Receipt: j.receipt}); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestDisputeHoldsTheCharge: a disputed receipt is not charged when the dispute window
// ends; the coordinator's list shows what the receipt claims, what the renter says and
// the floor its countersigned checkpoints prove.
func TestDisputeHoldsTheCharge(t *testing.T) {
	d := newJobDesk(t)
	j := disputed(t, d)
	d.clock.Advance(48 * time.Hour)
	d.chargeDue()
	if h := d.holdOf(t, j); h.State != ledger.HoldDisputed {
		t.Fatalf("hold %s after the window", h.State)
	}
	ds, err := d.Disputes(false)
	if err != nil || len(ds) != 1 {
		t.Fatalf("open disputes: %+v %v", ds, err)
	}
	v := ds[0]
	if v.Job != j.id || v.State != ledger.DisputeOpen || v.ClaimedUSDC != "3.60" || v.RenterSaysUSDC != "3.00" || v.FloorUSDC != "2.40" || v.Reason != "it stopped answering" {
		t.Fatalf("dispute: %+v", v)
	}
	if one, err := d.Dispute(j.id); err != nil || one.FloorUSDC != "2.40" {
		t.Fatalf("show: %+v %v", one, err)
	}
	if _, err := d.Dispute("00000000000000ff"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("show a job not disputed: %v", err)
	}
}

// TestDisputeDecisions: the coordinator decides for the provider (the receipt), for the
// renter (what it said, at least the floor) or an amount between the floor and the
// receipt; it signs the decision, the hold is charged that amount, the rest returns to
// the renter, and the decision is final.
func TestDisputeDecisions(t *testing.T) {
	for _, tc := range []struct {
		req     api.ResolveRequest
		seconds int64
	}{
		{api.ResolveRequest{For: "provider"}, 1800},
		{api.ResolveRequest{For: "renter"}, 1500},
		{api.ResolveRequest{USDC: "2.70", Note: "half of the disputed time"}, 1350},
	} {
		t.Run(tc.req.For+tc.req.USDC, func(t *testing.T) {
			d := newJobDesk(t)
			j := disputed(t, d)
			v, err := d.ResolveDispute(j.id, tc.req)
			want := protocol.Cost(testPrice, testGPUs, tc.seconds)
			if err != nil || v.State != ledger.DisputeDecided || v.ChargedUSDC != want.String() {
				t.Fatalf("decision: %+v %v", v, err)
			}
			dec, err := protocol.CheckDecision(v.Decision, j.receipt, &j.rec, d.id)
			if err != nil || dec.Amount != want || dec.Note != tc.req.Note {
				t.Fatalf("signed decision: %+v %v", dec, err)
			}
			h := d.holdOf(t, j)
			if h.State != ledger.HoldCharged || h.Charge != want || h.Rule != protocol.RuleDecision {
				t.Fatalf("hold: %+v", h)
			}
			if a := d.account(t, d.renter); a.Available != 100_000_000-want {
				t.Fatalf("renter's available %d, want %d", a.Available, 100_000_000-want)
			}
			if es := d.earnings(t, d.provider); len(es) != 1 || es[0].Net != want-want/10 {
				t.Fatalf("earnings %+v", es)
			}
			if _, err := d.ResolveDispute(j.id, api.ResolveRequest{For: "provider"}); !errors.Is(err, api.ErrConflict) {
				t.Fatalf("decided twice: %v", err)
			}
			if open, _ := d.Disputes(false); len(open) != 0 {
				t.Fatalf("%d disputes still open", len(open))
			}
		})
	}
}

// TestDisputeDecisionBounds: an amount below the floor or above the receipt, or no
// decision at all, is refused and changes nothing.
func TestDisputeDecisionBounds(t *testing.T) {
	d := newJobDesk(t)
	j := disputed(t, d)
	for _, req := range []api.ResolveRequest{{USDC: "2.39"}, {USDC: "3.61"}, {USDC: "abc"}, {}} {
		if _, err := d.ResolveDispute(j.id, req); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%+v: %v", req, err)
		}
	}
	if _, err := d.ResolveDispute(j.id, api.ResolveRequest{USDC: "1.00"}); err == nil || !strings.Contains(err.Error(), "decide between 2.40 USDC") {
		t.Fatalf("the refusal does not give the bounds: %v", err)
	}
	if h := d.holdOf(t, j); h.State != ledger.HoldDisputed {
		t.Fatalf("a refused decision moved the hold to %s", h.State)
	}
}

// TestDisputeBeforeTheReport: a renter may dispute before the provider reports; no
// decision is taken then (it would charge nothing, whatever the report proves later): the
// operator waits for the report, and without one the hold returns to the renter at its
// expiry, closing the dispute.
func TestDisputeBeforeTheReport(t *testing.T) {
	d := newJobDesk(t)
	early := func() *job {
		j := d.job(t, 1800, 1200)
		if _, err := d.Serve(context.Background(), d.renter.id, protocol.WalletRequest{Op: "dispute", Job: j.id,
			Dispute: j.dispute(t, 1500, d.clock.Now()), Receipt: j.receipt}); err != nil {
			t.Fatal(err)
		}
		return j
	}
	j := early()
	for _, req := range []api.ResolveRequest{{For: "provider"}, {For: "renter"}, {USDC: "0"}} {
		if _, err := d.ResolveDispute(j.id, req); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "wait for its report") {
			t.Fatalf("decided %+v before the provider's report: %v", req, err)
		}
	}
	if v, _ := d.Dispute(j.id); v.State != ledger.DisputeOpen || v.HoldExpiresAt.IsZero() {
		t.Fatalf("the dispute before the report: %+v", v)
	}
	// The report comes: the decision charges at least what its checkpoints prove.
	d.net.report(t, d.provHost, j.report())
	if v, err := d.ResolveDispute(j.id, api.ResolveRequest{For: "renter"}); err != nil || v.ChargedUSDC != "3.00" {
		t.Fatalf("for the renter once reported: %+v %v", v, err)
	}
	// No report by the hold's expiry: the hold returns to the renter.
	lost := early()
	d.clock.Advance(2*time.Hour + time.Second)
	if _, err := d.ReleaseExpired(); err != nil {
		t.Fatal(err)
	}
	if h := d.holdOf(t, lost); h.State != ledger.HoldReleased {
		t.Fatalf("a disputed hold never reported, after its expiry: %s", h.State)
	}
	if v, _ := d.Dispute(lost.id); v.State != ledger.DisputeExpired {
		t.Fatalf("the dispute after the hold's expiry: %s", v.State)
	}
	if a := d.account(t, d.renter); a.Held != 0 || a.Available != 100_000_000-protocol.Cost(testPrice, testGPUs, 1500) {
		t.Fatalf("the renter's account: %+v", a)
	}
}

// TestCountersignedReceiptClosesTheDispute: a renter that disputes a receipt, then
// countersigns it, owes it: the provider's report with the countersignature charges it by
// the countersigned-receipt rule and closes the dispute, whichever came first; and once
// the coordinator holds the countersignature, the renter cannot dispute.
func TestCountersignedReceiptClosesTheDispute(t *testing.T) {
	for _, reportFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("uncountersigned report first ", reportFirst), func(t *testing.T) {
			d := newJobDesk(t)
			j := d.job(t, 1800, 600)
			if reportFirst {
				d.net.report(t, d.provHost, j.report())
			}
			if _, err := d.Serve(context.Background(), d.renter.id, protocol.WalletRequest{Op: "dispute", Job: j.id,
				Dispute: j.dispute(t, 0, d.clock.Now()), Receipt: j.receipt}); err != nil {
				t.Fatal(err)
			}
			j.countersignReceipt(t)
			d.net.report(t, d.provHost, j.report())
			h := d.holdOf(t, j)
			if h.State != ledger.HoldCharged || h.Rule != protocol.RuleCountersignedReceipt || h.Charge != j.rec.Amount {
				t.Fatalf("a receipt countersigned after its dispute: hold %s, %s, charged %s", h.State, h.Rule, h.Charge)
			}
			if v, _ := d.Dispute(j.id); v.State != ledger.DisputeCountersigned || v.ChargedUSDC != "3.60" {
				t.Fatalf("the dispute: %s, charged %s", v.State, v.ChargedUSDC)
			}
			if _, err := d.ResolveDispute(j.id, api.ResolveRequest{For: "renter"}); !errors.Is(err, api.ErrConflict) {
				t.Fatalf("decided after the countersignature: %v", err)
			}
		})
	}
	d := newJobDesk(t)
	j := d.job(t, 1800, 600)
	j.countersignReceipt(t)
	d.net.report(t, d.provHost, j.report())
	_, err := d.Serve(context.Background(), d.renter.id, protocol.WalletRequest{Op: "dispute", Job: j.id, Dispute: j.dispute(t, 0, d.clock.Now()), Receipt: j.receipt})
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "countersigned the receipt") {
		t.Fatalf("a dispute of a receipt the renter countersigned: %v", err)
	}
}

// TestDisputeRefused: only the job's renter disputes, the receipt of the job's provider,
// before the job is charged.
func TestDisputeRefused(t *testing.T) {
	d := newJobDesk(t)
	j := d.job(t, 1800, 1200)
	dispute := j.dispute(t, 1500, d.clock.Now())
	ask := func(from party, job string, dispute, receipt []byte) error {
		_, err := d.Serve(context.Background(), from.id, protocol.WalletRequest{Op: "dispute", Job: job, Dispute: dispute, Receipt: receipt})
		return err
	}
	if err := ask(newParty(), j.id, dispute, j.receipt); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "not yours") {
		t.Fatalf("a stranger's dispute: %v", err)
	}
	if err := ask(d.renter, "00000000000000ff", dispute, j.receipt); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a job not held here: %v", err)
	}
	other := newJob(t, newParty(), d.renter, j.l.IssuedAt, 1800, -1)
	if err := ask(d.renter, j.id, dispute, other.receipt); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("another provider's receipt: %v", err)
	}
	if err := ask(d.renter, j.id, j.dispute(t, 1800, d.clock.Now()), j.receipt); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a dispute stating the receipt's own seconds: %v", err)
	}
	j.countersignReceipt(t)
	d.net.report(t, d.provHost, j.report())
	if err := ask(d.renter, j.id, dispute, j.receipt); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "too late to dispute") {
		t.Fatalf("a dispute after the charge: %v", err)
	}
}

// TestTwoReceiptsForOneJob: a provider that signs two receipts for one job (a small one
// for the renter, a large one in its report) is caught whichever comes first, the
// renter's dispute or the report: the dispute shows both amounts, a decision for the
// provider charges the smaller, the operator is told and the provider's completion
// counts it as a failed job.
func TestTwoReceiptsForOneJob(t *testing.T) {
	for _, reportFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("report first ", reportFirst), func(t *testing.T) {
			d := newJobDesk(t)
			reported := d.job(t, 1800, 600)         // 3.60 USDC, checkpoint 1.20
			handed := reported.withReceipt(t, 1000) // 2.00 USDC
			dispute := func() {
				t.Helper()
				if _, err := d.Serve(context.Background(), d.renter.id, protocol.WalletRequest{Op: "dispute", Job: handed.id,
					Dispute: handed.dispute(t, 900, d.clock.Now()), Receipt: handed.receipt}); err != nil {
					t.Fatal(err)
				}
			}
			if reportFirst {
				d.net.report(t, d.provHost, reported.report())
				dispute()
			} else {
				dispute()
				d.net.report(t, d.provHost, reported.report())
			}
			v, err := d.Dispute(reported.id)
			if err != nil || !v.Equivocation || v.ClaimedUSDC != "2.00" || v.ReportedUSDC != "3.60" || v.FloorUSDC != "1.20" {
				t.Fatalf("the dispute does not show the two receipts: equivocation %v, claimed %s, reported %s, floor %s, %v", v.Equivocation, v.ClaimedUSDC, v.ReportedUSDC, v.FloorUSDC, err)
			}
			if alerts := d.told(); len(alerts) != 1 || !strings.Contains(alerts[0], "two receipts") || !strings.Contains(alerts[0], reported.id) {
				t.Fatalf("the operator was told %q", alerts)
			}
			rs, _ := d.ledger.Reliability.UpdateReliability(d.provider.id.String(), func(*ledger.ReliabilityState) error { return nil })
			if rs.Reliability.Completion.Good == rs.Reliability.Completion.Total || len(rs.Events) != 1 || !strings.Contains(rs.Events[0], "two receipts") {
				t.Fatalf("the provider's completion %+v, events %v", rs.Reliability.Completion, rs.Events)
			}
			if _, err := d.ResolveDispute(reported.id, api.ResolveRequest{USDC: "3.00"}); !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("a decision above the smaller receipt: %v", err)
			}
			v, err = d.ResolveDispute(reported.id, api.ResolveRequest{For: "provider"})
			if err != nil || v.ChargedUSDC != v.ClaimedUSDC {
				t.Fatalf("for the provider charged %s, the dispute showed %s claimed: %v", v.ChargedUSDC, v.ClaimedUSDC, err)
			}
		})
	}
}
