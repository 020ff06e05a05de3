package money

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Escrow holds: placed, released when the job never ran, expired, and abandoned jobs
// counted at expiry (docs/settlement.md, "Escrow rules"; docs/protocols/settlement.md,
// "Abandoned jobs").

// TestHoldPlaced: the coordinator sets a renter's funds aside for a certified provider's
// job and signs the hold, with its commission; the same request again (a retry) answers
// the same hold; anything out of range is refused and sets nothing aside.
func TestHoldPlaced(t *testing.T) {
	d := newJobDesk(t)
	j := newJob(t, d.provider, d.renter, d.clock.Now(), 60, -1)
	req := protocol.WalletRequest{Op: "hold", Job: j.id, Provider: d.provider.id.String(), Amount: 5_000_000, ExpiresAt: d.clock.Now().Add(2 * time.Hour)}
	ask := func(edit func(*protocol.WalletRequest)) (protocol.WalletResponse, error) {
		r := req
		edit(&r)
		return d.Serve(context.Background(), d.renter.id, r)
	}
	same := func(*protocol.WalletRequest) {}

	if _, err := ask(same); err == nil || !strings.Contains(err.Error(), "no certified offer at this coordinator") {
		t.Fatalf("a hold for a provider not certified here: %v", err)
	}
	d.offers.certify(d.provider.id, "eu-west")
	for name, edit := range map[string]func(*protocol.WalletRequest){
		"provider not a peer ID": func(r *protocol.WalletRequest) { r.Provider = "bob" },
		"job not 16 hex digits":  func(r *protocol.WalletRequest) { r.Job = "JOB" },
		"amount 0":               func(r *protocol.WalletRequest) { r.Amount = 0 },
		"amount above 2^53":      func(r *protocol.WalletRequest) { r.Amount = 1<<53 + 1 },
		"expired":                func(r *protocol.WalletRequest) { r.ExpiresAt = d.clock.Now() },
		"expiry too far":         func(r *protocol.WalletRequest) { r.ExpiresAt = d.clock.Now().Add(maxHoldPeriod + time.Minute) },
		"more than available":    func(r *protocol.WalletRequest) { r.Amount = 100_000_001 },
	} {
		if _, err := ask(edit); err == nil {
			t.Errorf("%s: placed", name)
		}
	}
	if a := d.account(t, d.renter); a.Held != 0 || a.Available != 100_000_000 {
		t.Fatalf("refused holds set funds aside: %+v", a)
	}

	resp, err := ask(same)
	if err != nil {
		t.Fatal(err)
	}
	h, err := protocol.CheckHold(resp.Hold, d.clock.Now(), protocol.NewTrust(d.id))
	if err != nil || h.Job != j.id || h.Renter != d.renter.id.String() || h.Provider != d.provider.id.String() || h.Amount != 5_000_000 || h.CommissionBPS != 1000 {
		t.Fatalf("hold: %+v %v", h, err)
	}
	if a := d.account(t, d.renter); a.Held != 5_000_000 || a.Available != 95_000_000 {
		t.Fatalf("account after the hold: %+v", a)
	}
	if again, err := ask(same); err != nil || string(again.Hold) != string(resp.Hold) {
		t.Fatalf("the same request again: %v", err)
	}
	if _, err := ask(func(r *protocol.WalletRequest) { r.Amount = 6_000_000 }); err == nil || !strings.Contains(err.Error(), "already has a held hold") {
		t.Fatalf("another amount for the same job: %v", err)
	}
	if a := d.account(t, d.renter); a.Held != 5_000_000 {
		t.Fatalf("held %d after the retries", a.Held)
	}
}

// TestHoldReleased: the renter gets a hold back when the job's provider confirms the job
// never ran; a provider that says it ran, or cannot be asked, keeps it held.
func TestHoldReleased(t *testing.T) {
	d := newJobDesk(t)
	j := d.job(t, 60, -1)
	release := func(from party) (protocol.WalletResponse, error) {
		return d.Serve(context.Background(), from.id, protocol.WalletRequest{Op: "release", Job: j.id})
	}
	if _, err := release(newParty()); err == nil || !strings.Contains(err.Error(), "not yours") {
		t.Fatalf("a stranger's release: %v", err)
	}
	d.providers.err = errors.New("no route to the provider")
	if _, err := release(d.renter); err == nil || !strings.Contains(err.Error(), "the hold returns at "+d.holdOf(t, j).ExpiresAt.UTC().Format(time.RFC3339)) {
		t.Fatalf("provider unreachable: %v", err)
	}
	d.providers.err, d.providers.answer = nil, protocol.HoldRelease{Reason: "the job is running"}
	if _, err := release(d.renter); err == nil || !strings.Contains(err.Error(), "the job is running") {
		t.Fatalf("provider says it ran: %v", err)
	}
	if h := d.holdOf(t, j); h.State != ledger.HoldHeld {
		t.Fatalf("hold %s after refusals", h.State)
	}
	d.providers.answer = protocol.HoldRelease{Release: true}
	resp, err := release(d.renter)
	if err != nil || resp.Account.Available != 100_000_000 || resp.Account.Held != 0 {
		t.Fatalf("release: %+v %v", resp.Account, err)
	}
	for _, asked := range d.providers.asked {
		if asked != d.provider.id {
			t.Fatalf("asked %s, not the hold's provider", asked)
		}
	}
	if _, err := release(d.renter); err == nil || !strings.Contains(err.Error(), "already released") {
		t.Fatalf("released twice: %v", err)
	}
}

// TestHoldExpiry: a hold unused at its expiry returns to its renter; one whose receipt is
// pending (or disputed) stays held.
func TestHoldExpiry(t *testing.T) {
	d := newJobDesk(t)
	unused := d.job(t, 60, -1)
	pending := d.job(t, 600, 300)
	d.net.report(t, d.provHost, pending.report())
	if n, err := d.ReleaseExpired(); err != nil || n != 0 {
		t.Fatalf("released %d before the expiry: %v", n, err)
	}
	d.clock.Advance(2*time.Hour + time.Second)
	if n, err := d.ReleaseExpired(); err != nil || n != 1 {
		t.Fatalf("released %d at the expiry: %v", n, err)
	}
	if h := d.holdOf(t, unused); h.State != ledger.HoldReleased {
		t.Fatalf("the unused hold is %s", h.State)
	}
	if h := d.holdOf(t, pending); h.State != ledger.HoldPending {
		t.Fatalf("the pending hold is %s", h.State)
	}
	if a := d.account(t, d.renter); a.Held != holdAmount {
		t.Fatalf("held %d, want the pending hold's %d", a.Held, holdAmount)
	}
}

// TestAbandonedJob: a job whose lease ended with no receipt, which the renter shows ran
// (its lease and a countersigned checkpoint), counts against its provider when its hold
// expires with still no report; the hold returns to the renter. Accounts that prove
// nothing are refused.
func TestAbandonedJob(t *testing.T) {
	d := newJobDesk(t)
	j := d.job(t, 600, 300)
	account := func(from party, edit func(*protocol.WalletRequest)) error {
		r := protocol.WalletRequest{Op: "abandoned", Job: j.id, Lease: j.lease, LeaseCountersig: j.leaseCS,
			Checkpoint: j.checkpoint, CheckpointCountersig: j.checkpointCS}
		edit(&r)
		_, err := d.Serve(context.Background(), from.id, r)
		return err
	}
	keep := func(*protocol.WalletRequest) {}
	for name, tc := range map[string]struct {
		from party
		edit func(*protocol.WalletRequest)
		want error
	}{
		"not the renter":  {newParty(), keep, api.ErrInvalid},
		"no such job":     {d.renter, func(r *protocol.WalletRequest) { r.Job = "00000000000000ff" }, api.ErrNotFound},
		"no checkpoint":   {d.renter, func(r *protocol.WalletRequest) { r.Checkpoint = nil }, api.ErrInvalid},
		"no countersig":   {d.renter, func(r *protocol.WalletRequest) { r.LeaseCountersig = nil }, api.ErrInvalid},
		"another's lease": {d.renter, func(r *protocol.WalletRequest) { r.Lease = newJob(t, newParty(), d.renter, j.l.IssuedAt, 60, -1).lease }, api.ErrInvalid},
		"zero seconds run": {d.renter, func(r *protocol.WalletRequest) {
			zero := newJob(t, d.provider, d.renter, j.l.IssuedAt, 60, 0)
			r.Checkpoint, r.CheckpointCountersig = zero.checkpoint, zero.checkpointCS
		}, api.ErrInvalid},
	} {
		if err := account(tc.from, tc.edit); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	running := d.job(t, 60, 30)
	running.l.EndsAt = d.clock.Now().Add(time.Hour)
	lease := seal(t, protocol.KindLease, running.l, d.provider)
	if _, err := d.Serve(context.Background(), d.renter.id, protocol.WalletRequest{Op: "abandoned", Job: running.id, Lease: lease,
		LeaseCountersig: countersign(t, protocol.KindLease, lease, running.id, d.renter, running.l.IssuedAt)}); err == nil ||
		!strings.Contains(err.Error(), "the lease runs until") {
		t.Fatalf("an account of a job whose lease still runs: %v", err)
	}

	if err := account(d.renter, keep); err != nil {
		t.Fatal(err)
	}
	if err := account(d.renter, keep); err != nil {
		t.Fatalf("the same account again: %v", err)
	}
	d.clock.Advance(2*time.Hour + time.Second)
	if n, err := d.ReleaseExpired(); err != nil || n != 2 {
		t.Fatalf("released %d: %v", n, err)
	}
	rs, _ := d.ledger.Reliability.UpdateReliability(d.provider.id.String(), func(*ledger.ReliabilityState) error { return nil })
	if rs.Reliability.Completion.Total != 1 || rs.Reliability.Completion.Good != 0 || len(rs.Events) != 1 || rs.Events[0] != protocol.WhyAbandoned(j.id, 300) {
		t.Fatalf("completion %+v, events %v", rs.Reliability.Completion, rs.Events)
	}
	if a := d.account(t, d.renter); a.Available != 100_000_000 || a.Held != 0 {
		t.Fatalf("the renter's account after the expiry: %+v", a)
	}
	// The provider's report arriving later does not count the job a second time.
	j.countersignReceipt(t)
	d.net.report(t, d.provHost, j.report())
	rs, _ = d.ledger.Reliability.UpdateReliability(d.provider.id.String(), func(*ledger.ReliabilityState) error { return nil })
	if rs.Reliability.Completion.Total != 1 {
		t.Fatalf("the job counted %v times", rs.Reliability.Completion.Total)
	}
	if err := account(d.renter, keep); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("an account after the hold expired: %v", err)
	}
}
