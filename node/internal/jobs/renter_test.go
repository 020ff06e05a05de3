package jobs

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// disputes is the renter's escrow side, recording the disputes it is asked to send.
type disputes struct{ sent []ledger.Job }

func (d *disputes) RequestHold(context.Context, protocol.Proposal, peer.ID) ([]byte, error) {
	return nil, nil
}
func (d *disputes) ReleaseAfterFailure(string, peer.ID) {}
func (d *disputes) ReleaseHold(context.Context, string, string) (api.BalanceView, error) {
	return api.BalanceView{}, nil
}
func (d *disputes) Dispute(_ context.Context, j ledger.Job) error {
	d.sent = append(d.sent, j)
	return nil
}
func (d *disputes) ReportAbandoned(context.Context, ledger.Job) error { return nil }

func newKey(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return k, id
}

// TestRenterDisputesWhatItDidNotSee: a provider's receipt charging the whole lease for a
// job the renter last saw running a minute after its start is not countersigned: the
// renter signs a dispute stating what it observed (the start plus one checkpoint interval
// and the tolerance) and sends it to the coordinator. It is a dispute the coordinator
// accepts: signed by the renter, naming the receipt, fewer seconds than it charges.
func TestRenterDisputesWhatItDidNotSee(t *testing.T) {
	rkey, renter := newKey(t)
	pkey, provider := newKey(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0.Add(time.Hour))
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	esc := &disputes{}
	r := NewRenter(RenterDeps{Peer: &p2p.Peer{ID: renter, Key: rkey}, Ledger: l.Jobs, Clock: clk, Log: quiet(),
		Metrics: metrics.New(func() float64 { return 0 }, func() float64 { return 0 }), Escrow: esc, CheckpointInterval: time.Minute})

	lease := protocol.Lease{Version: 1, Job: "00000000000000e1", Proposal: "00", Renter: renter.String(), Provider: provider.String(),
		Model: "L4-24GB", GPUs: 1, Price: 3_600_000, IssuedAt: t0, EndsAt: t0.Add(2 * time.Hour), Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	lraw, _ := protocol.Seal(protocol.KindLease, lease, pkey)
	j := ledger.Job{ID: lease.Job, Side: "renter", Peer: provider.String(), State: ledger.JobRunning, CreatedAt: t0, Lease: lraw,
		ObservedStart: t0, LastSeenRunning: t0.Add(time.Minute)}
	if err := l.Jobs.CreateJob(j); err != nil {
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
	if len(got.ReceiptCountersig) != 0 || len(got.Dispute) == 0 || got.State != ledger.JobEnded || len(esc.sent) != 1 {
		t.Fatalf("an inflated receipt: countersigned %v, disputed %v, sent %d", len(got.ReceiptCountersig) > 0, len(got.Dispute) > 0, len(esc.sent))
	}
	d, err := protocol.CheckDispute(got.Dispute, raw, &rec, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Seen running at t0+60 s: it may have run until t0+60+60+10 s.
	if d.Seconds != 130 || d.Amount != 130_000 {
		t.Fatalf("the dispute states %d s, %s USDC", d.Seconds, d.Amount)
	}
	// Taking it again changes nothing and sends nothing more.
	if again, _ := r.takeReceipt(context.Background(), got, raw); len(again.ReceiptCountersig) != 0 || len(esc.sent) != 1 {
		t.Fatal("a disputed receipt taken twice")
	}
}

// TestRenterCountersignsOnlyWhatItSaw: a checkpoint is countersigned when its seconds fit
// what the renter saw (since the start, within the tolerance) and do not go back; one that
// counts more time than has passed, or goes back, or is signed by someone else, is refused.
func TestRenterCountersignsOnlyWhatItSaw(t *testing.T) {
	_, renter := newKey(t)
	pkey, provider := newKey(t)
	skey, _ := newKey(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	lease := protocol.Lease{Version: 1, Job: "00000000000000e2", Proposal: "00", Renter: renter.String(), Provider: provider.String(),
		Model: "L4-24GB", GPUs: 1, Price: 3_600_000, IssuedAt: t0, EndsAt: t0.Add(2 * time.Hour), Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	lraw, _ := protocol.Seal(protocol.KindLease, lease, pkey)
	j := ledger.Job{ID: lease.Job, Side: "renter", Lease: lraw, ObservedStart: t0.Add(time.Second), CheckpointSeconds: 60}
	cp := func(secs int64, key crypto.PrivKey) []byte {
		raw, _ := protocol.Seal(protocol.KindCheckpoint, protocol.Checkpoint{Version: 1, Job: lease.Job, Lease: protocol.RecordSHA256(lraw), Provider: provider.String(),
			Renter: renter.String(), Seconds: secs, Amount: protocol.Cost(lease.Price, 1, secs), At: t0.Add(time.Duration(secs) * time.Second)}, key)
		return raw
	}
	now := t0.Add(2 * time.Minute)
	if got, err := checkObserved(j, cp(125, pkey), now); err != nil || got.Seconds != 125 {
		t.Fatalf("a checkpoint within what the renter saw: %v", err)
	}
	for name, raw := range map[string][]byte{
		"more time than has passed": cp(300, pkey),
		"going back":                cp(30, pkey),
		"signed by someone else":    cp(120, skey),
	} {
		if _, err := checkObserved(j, raw, now); err == nil {
			t.Errorf("%s: countersigned", name)
		}
	}
	unseen := j
	unseen.ObservedStart = time.Time{}
	if _, err := checkObserved(unseen, cp(60, pkey), now); err == nil {
		t.Error("a checkpoint of a job whose start the renter never saw: countersigned")
	}
}
