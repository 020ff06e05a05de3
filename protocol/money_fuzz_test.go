package protocol

import (
	"crypto/rand"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Fuzzing with invariants: whatever the records say, what the checks accept can never
// charge more than its hold, last longer than its lease, or end after the receiver's clock.

var fuzzKeys = func() (keys [3]crypto.PrivKey) {
	for i := range keys {
		keys[i], _, _ = crypto.GenerateEd25519Key(rand.Reader)
	}
	return keys
}()

var typeOfReceipt = reflect.TypeFor[Receipt]()

func fuzzID(i int) peer.ID { id, _ := peer.IDFromPrivateKey(fuzzKeys[i]); return id }

// fuzzLease is a lease of the provider (key 1) with the renter (key 0), and its envelope.
func fuzzLease(tb testing.TB, price MicroUSDC, gpus int, dur time.Duration) (*Lease, []byte) {
	l := &Lease{Version: JobVersion, Job: "0123456789abcdef", Proposal: "00", Renter: fuzzID(0).String(), Provider: fuzzID(1).String(),
		Model: "L4-24GB", GPUs: gpus, Price: price, IssuedAt: testNow, EndsAt: testNow.Add(dur),
		Limits: Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	raw, err := Seal(KindLease, l, fuzzKeys[1])
	if err != nil {
		tb.Fatal(err)
	}
	return l, raw
}

// FuzzCheckReceipt: a receipt built from arbitrary figures, checked against a valid lease
// at an arbitrary time: if accepted, its amount is exactly its cost, its seconds fit the
// lease, it ends within the lease and the clock, and the hold a renter placed for the lease
// covers it.
func FuzzCheckReceipt(f *testing.F) {
	f.Add(int64(3600), int64(0), int64(3600), int64(2_100_000), 1, int64(0), int64(7200))
	f.Add(int64(2_592_001), int64(0), int64(4_000_000_000), int64(2_100_000), 8, int64(0), int64(1))
	f.Add(int64(90), int64(-300), int64(90), int64(1), 256, int64(1), int64(90))
	f.Fuzz(func(t *testing.T, secs, startOff, endOff, price int64, gpus int, amountDelta, nowOff int64) {
		if price <= 0 || price > int64(MaxPricePerGPUHour) || gpus < 1 || gpus > MaxGPUsPerItem {
			return // the lease's own range rules (CheckLeaseTerms) refuse these
		}
		dur := time.Duration(1+(uint64(secs)^uint64(endOff))%uint64(MaxJobDuration/time.Second)) * time.Second
		l, lraw := fuzzLease(t, MicroUSDC(price), gpus, dur)
		if CheckLeaseTerms(l, testNow) != nil {
			return
		}
		clamp := func(v int64) time.Duration { return time.Duration(v%(1<<40)) * time.Second }
		r := Receipt{Version: JobVersion, Job: l.Job, Lease: RecordSHA256(lraw), Provider: l.Provider, Renter: l.Renter, Model: l.Model,
			GPUs: gpus, StartedAt: testNow.Add(clamp(startOff)), EndedAt: testNow.Add(clamp(endOff)), Seconds: secs, Price: l.Price}
		r.Amount = Cost(r.Price, gpus, max(0, min(secs, 1<<40))) + MicroUSDC(amountDelta%3)
		raw, err := Seal(KindReceipt, r, fuzzKeys[1])
		if err != nil {
			return
		}
		now := testNow.Add(clamp(nowOff))
		got, err := CheckReceipt(raw, lraw, l, now)
		if err != nil {
			return
		}
		leaseSecs := int64(l.EndsAt.Sub(l.IssuedAt) / time.Second)
		switch {
		case got.Amount != Cost(got.Price, got.GPUs, got.Seconds):
			t.Fatalf("accepted amount %d for %d s", got.Amount, got.Seconds)
		case got.Seconds < 0 || got.Seconds > leaseSecs+1:
			t.Fatalf("accepted %d s on a lease of %d s", got.Seconds, leaseSecs)
		case got.EndedAt.After(now.Add(MaxClockSkew)) || got.EndedAt.After(l.EndsAt.Add(MaxClockSkew)):
			t.Fatalf("accepted an end at %s (now %s, lease ends %s)", got.EndedAt, now, l.EndsAt)
		case got.StartedAt.Before(l.IssuedAt.Add(-MaxClockSkew)):
			t.Fatalf("accepted a start at %s before the lease", got.StartedAt)
		case Charge(got.Amount, HoldAmount(l.Price, l.GPUs, leaseSecs)) != got.Amount:
			t.Fatalf("a %d receipt exceeds the hold of its lease", got.Amount)
		case CheckpointCharge(got, leaseSecs) > got.Amount:
			t.Fatalf("the checkpoint rule charges more than the receipt")
		}
	})
}

// FuzzReceiptPayload: any JSON payload signed as a receipt. If accepted, reading it again
// through encoding/json gives the same receipt: no repeated or case-folded member could
// make another reader see other figures.
func FuzzReceiptPayload(f *testing.F) {
	l, lraw := fuzzLease(f, 450_000, 1, time.Hour)
	good, _ := json.Marshal(Receipt{Version: JobVersion, Job: l.Job, Lease: RecordSHA256(lraw), Provider: l.Provider, Renter: l.Renter,
		Model: l.Model, GPUs: 1, StartedAt: testNow, EndedAt: testNow.Add(time.Minute), Seconds: 60, Price: l.Price, Amount: Cost(l.Price, 1, 60), Reason: "exited"})
	f.Add(good)
	f.Add(append(good[:len(good)-1], []byte(`,"SECONDS":600}`)...))
	f.Add(append(good[:len(good)-1], []byte(`,"seconds":600}`)...))
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !json.Valid(payload) {
			return
		}
		raw, err := Seal(KindReceipt, json.RawMessage(payload), fuzzKeys[1])
		if err != nil {
			return
		}
		got, err := CheckReceipt(raw, lraw, l, testNow.Add(time.Hour))
		if err != nil {
			return
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(payload, &members); err != nil {
			t.Fatalf("accepted a payload that is not an object: %v", err)
		}
		for k := range members {
			if _, ok := fieldsOf(typeOfReceipt)[k]; !ok {
				t.Fatalf("accepted member %q, not a field name", k)
			}
		}
		var again Receipt
		json.Unmarshal(payload, &again)
		if again != *got {
			t.Fatalf("two readings: %+v and %+v", again, *got)
		}
	})
}

// FuzzCheckHold: a hold from arbitrary figures: if accepted, its amount is positive, its
// period ordered, and it has not expired at the time it was checked.
func FuzzCheckHold(f *testing.F) {
	f.Add(int64(1_000_000), int64(0), int64(3600), 1000, int64(60))
	f.Add(int64(-1), int64(10), int64(-10), 6000, int64(0))
	f.Fuzz(func(t *testing.T, amount, issuedOff, expiresOff int64, bps int, nowOff int64) {
		clamp := func(v int64) time.Duration { return time.Duration(v%(1<<40)) * time.Second }
		h := EscrowHold{Version: SettlementVersion, Coordinator: fuzzID(2).String(), Renter: fuzzID(0).String(), Provider: fuzzID(1).String(),
			Job: "0123456789abcdef", Amount: MicroUSDC(amount), CommissionBPS: bps, IssuedAt: testNow.Add(clamp(issuedOff)), ExpiresAt: testNow.Add(clamp(expiresOff))}
		raw, err := Seal(KindEscrowHold, h, fuzzKeys[2])
		if err != nil {
			return
		}
		now := testNow.Add(clamp(nowOff))
		got, err := CheckHold(raw, now, NewTrust(fuzzID(2)))
		if err != nil {
			return
		}
		if got.Amount <= 0 || !got.ExpiresAt.After(got.IssuedAt) || !now.Before(got.ExpiresAt) || got.IssuedAt.After(now.Add(MaxClockSkew)) ||
			got.CommissionBPS < 0 || got.CommissionBPS > MaxCommissionBPS {
			t.Fatalf("accepted hold %+v at %s", got.EscrowHold, now)
		}
		if c := Charge(MicroUSDC(1<<62), got.Amount); c > got.Amount || Commission(c, got.CommissionBPS) > c {
			t.Fatalf("a charge of %d or its commission exceeds the hold of %d", c, got.Amount)
		}
	})
}
