package protocol

import (
	"testing"
	"time"
)

// TestCheckExtension: a provider's longer lease is taken when it keeps every term but its
// end, names the lease it extends and adds at most the proposal's max_seconds; a receipt
// of the whole run then checks against it.
func TestCheckExtension(t *testing.T) {
	rsk, renter := newKey(t)
	psk, provider := newKey(t)
	l := Lease{Version: JobVersion, Job: "0123456789abcdef", Proposal: RecordSHA256([]byte("proposal")), Renter: renter.String(), Provider: provider.String(),
		Model: "L4-24GB", GPUs: 1, Price: 450_000, IssuedAt: testNow, EndsAt: testNow.Add(time.Hour), Limits: Limits{1 << 30, 1000, 256, 1 << 30}}
	lraw := seal(t, KindLease, l, psk)
	longer := l
	longer.EndsAt, longer.Extends = l.EndsAt.Add(time.Hour), RecordSHA256(lraw)
	xraw := seal(t, KindLease, longer, psk)
	if got, err := CheckExtension(xraw, lraw, &l, 3600); err != nil || !got.EndsAt.Equal(longer.EndsAt) {
		t.Fatalf("extension: %+v %v", got, err)
	}
	if _, err := CheckExtension(seal(t, KindLease, longer, rsk), lraw, &l, 3600); Reason(err) != "wrong_signer" {
		t.Fatalf("an extension signed by the renter: %v", err)
	}
	for name, edit := range map[string]func(x *Lease){
		"dearer":             func(x *Lease) { x.Price++ },
		"more gpus":          func(x *Lease) { x.GPUs = 2 },
		"reissued":           func(x *Lease) { x.IssuedAt = x.IssuedAt.Add(time.Minute) },
		"egress":             func(x *Lease) { x.Egress = true },
		"ports":              func(x *Lease) { x.Ports = []int{8000} },
		"extends another":    func(x *Lease) { x.Extends = RecordSHA256([]byte("other")) },
		"first lease again":  func(x *Lease) { x.Extends = "" },
		"shorter":            func(x *Lease) { x.EndsAt = l.EndsAt.Add(-time.Minute) },
		"more than max":      func(x *Lease) { x.EndsAt = l.EndsAt.Add(time.Hour + time.Second) },
		"beyond the longest": func(x *Lease) { x.IssuedAt = l.IssuedAt; x.EndsAt = l.IssuedAt.Add(MaxJobDuration + time.Second) },
	} {
		x := longer
		edit(&x)
		max := int64(3600)
		if name == "beyond the longest" {
			max = int64(MaxJobDuration / time.Second)
		}
		if _, err := CheckExtension(seal(t, KindLease, x, psk), lraw, &l, max); Reason(err) != "invalid" {
			t.Errorf("%s: %v", name, err)
		}
	}
	r := Receipt{Version: JobVersion, Job: l.Job, Lease: RecordSHA256(xraw), Provider: l.Provider, Renter: l.Renter, Model: l.Model, GPUs: 1,
		StartedAt: testNow, EndedAt: testNow.Add(90 * time.Minute), Seconds: 5400, Price: l.Price, Amount: Cost(l.Price, 1, 5400), Reason: "exited"}
	if _, err := CheckReceipt(seal(t, KindReceipt, r, psk), xraw, &longer, testNow.Add(2*time.Hour)); err != nil {
		t.Fatalf("a receipt of the run past the first lease's end: %v", err)
	}
	if err := CheckLeaseTerms(&longer, testNow); err != nil {
		t.Fatalf("the coordinator's terms check of an extended lease: %v", err)
	}
}
