package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestOneReadingOfSignedPayloads: a receipt whose payload names a member twice, or names it
// in another case, is refused as malformed, whichever of the readings another
// implementation would take; the genuine receipt passes.
func TestOneReadingOfSignedPayloads(t *testing.T) {
	rsk, renter := newKey(t)
	psk, provider := newKey(t)
	p := validProposal(renter.String(), provider.String())
	praw := seal(t, KindProposal, p, rsk)
	l := Lease{Version: JobVersion, Job: p.Job, Proposal: RecordSHA256(praw), Renter: p.Renter, Provider: p.Provider, Model: p.Model,
		GPUs: 1, Price: 450_000, IssuedAt: testNow, EndsAt: testNow.Add(time.Hour), Limits: Limits{1 << 30, 1000, 256, 1 << 30}}
	lraw := seal(t, KindLease, l, psk)
	r := Receipt{Version: JobVersion, Job: p.Job, Lease: RecordSHA256(lraw), Provider: p.Provider, Renter: p.Renter, Model: p.Model, GPUs: 1,
		StartedAt: testNow, EndedAt: testNow.Add(90 * time.Second), Seconds: 90, Price: 450_000, Amount: Cost(450_000, 1, 90), Reason: "exited"}
	genuine, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckReceipt(seal(t, KindReceipt, json.RawMessage(genuine), psk), lraw, &l, testNow.Add(time.Hour)); err != nil {
		t.Fatalf("genuine receipt: %v", err)
	}
	body := strings.TrimSuffix(string(genuine), "}")
	for name, payload := range map[string]string{
		"repeated member":        body + `,"amount_micro_usdc":40}`,
		"member in another case": strings.Replace(string(genuine), `"seconds"`, `"Seconds"`, 1),
		"case-folded repeat":     body + `,"SECONDS":90}`,
		"long s folds to s":      body + "," + `"\u017feconds":90}`,
	} {
		raw := seal(t, KindReceipt, json.RawMessage(payload), psk)
		if _, err := CheckReceipt(raw, lraw, &l, testNow.Add(time.Hour)); Reason(err) != "malformed" {
			t.Errorf("%s: want malformed, got %v", name, err)
		}
	}
	lb, _ := json.Marshal(l)
	cheaper := strings.TrimSuffix(string(lb), "}") + `,"price_micro_usdc_per_gpu_hour":1}`
	if _, _, err := OpenLease(seal(t, KindLease, json.RawMessage(cheaper), psk)); Reason(err) != "malformed" {
		t.Errorf("a lease naming its price twice: %v", err)
	}
}

// BenchmarkCheckpointExchange: one metering exchange of a running job, both sides' work:
// the provider signs a checkpoint, the renter checks and countersigns it, the provider
// checks the countersignature. A job does this once a minute (CheckpointInterval); the
// per-job CPU share is this time divided by 60 s.
func BenchmarkCheckpointExchange(b *testing.B) {
	rsk, renter := newKey(b)
	psk, provider := newKey(b)
	l := Lease{Version: JobVersion, Job: "0123456789abcdef", Proposal: "00", Renter: renter.String(), Provider: provider.String(), Model: "L4-24GB",
		GPUs: 1, Price: 450_000, IssuedAt: testNow, EndsAt: testNow.Add(time.Hour), Limits: Limits{1 << 30, 1000, 256, 1 << 30}}
	lraw := seal(b, KindLease, l, psk)
	for i := 0; b.Loop(); i++ {
		secs := int64(i % 3600)
		cp := Checkpoint{Version: JobVersion, Job: l.Job, Lease: RecordSHA256(lraw), Provider: l.Provider, Renter: l.Renter,
			Seconds: secs, Amount: Cost(l.Price, 1, secs), At: testNow.Add(time.Duration(secs) * time.Second)}
		raw, err := Seal(KindCheckpoint, cp, psk)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := CheckCheckpoint(raw, lraw, &l, testNow.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
		cs, err := Seal(KindCountersignature, Countersignature{Version: JobVersion, Of: KindCheckpoint, SHA256: RecordSHA256(raw), Job: l.Job,
			Signer: renter.String(), SignedAt: cp.At}, rsk)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := CheckCountersignature(cs, raw, KindCheckpoint, renter, testNow.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReceiptFromTheFuture: the reproduction of issue 14, a receipt ending in 2100 for a
// 30-day lease, is refused as far in the future; one a few minutes ahead (a skewed clock)
// is refused as merely early, which relays are not penalised for.
func TestReceiptFromTheFuture(t *testing.T) {
	rsk, renter := newKey(t)
	psk, provider := newKey(t)
	p := validProposal(renter.String(), provider.String())
	praw := seal(t, KindProposal, p, rsk)
	l := Lease{Version: JobVersion, Job: p.Job, Proposal: RecordSHA256(praw), Renter: p.Renter, Provider: p.Provider, Model: p.Model,
		GPUs: 1, Price: 450_000, IssuedAt: testNow, EndsAt: testNow.Add(MaxJobDuration), Limits: Limits{1 << 30, 1000, 256, 1 << 30}}
	lraw := seal(t, KindLease, l, psk)
	r := Receipt{Version: JobVersion, Job: p.Job, Lease: RecordSHA256(lraw), Provider: p.Provider, Renter: p.Renter, Model: p.Model, GPUs: 1,
		StartedAt: testNow, EndedAt: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), Seconds: 2_592_001, Price: 450_000}
	r.Amount = Cost(r.Price, 1, r.Seconds)
	if _, err := CheckReceipt(seal(t, KindReceipt, r, psk), lraw, &l, testNow.Add(time.Second)); Reason(err) != "far_future" {
		t.Fatalf("a receipt ending in 2100: %v", err)
	}
	r.EndedAt, r.Seconds = testNow.Add(10*time.Minute), 600
	r.Amount = Cost(r.Price, 1, r.Seconds)
	if _, err := CheckReceipt(seal(t, KindReceipt, r, psk), lraw, &l, testNow.Add(time.Second)); Reason(err) != "future" {
		t.Fatalf("a receipt ending 10 minutes ahead: %v", err)
	}
	if _, err := CheckReceipt(seal(t, KindReceipt, r, psk), lraw, &l, testNow.Add(10*time.Minute)); err != nil {
		t.Fatalf("the same receipt once its end has come: %v", err)
	}
}
