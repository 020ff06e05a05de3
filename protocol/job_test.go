package protocol

import (
	"strings"
	"testing"
	"time"
)

func TestCost(t *testing.T) {
	cases := []struct {
		price   MicroUSDC
		gpus    int
		seconds int64
		want    MicroUSDC
	}{
		{2_100_000, 1, 3600, 2_100_000},
		{2_100_000, 8, 3600, 16_800_000},
		{2_100_000, 1, 1, 583},   // 583.33 rounded down
		{1, 1, 3599, 0},          // under a micro-USDC
		{450_000, 2, 90, 22_500}, // exact
		{999_999, 3, 7, 5_833},   // 5833.3275
		{MaxPricePerGPUHour, MaxGPUsPerItem, int64(MaxJobDuration / time.Second), MaxPricePerGPUHour * MaxGPUsPerItem * 720},
	}
	for _, c := range cases {
		if got := Cost(c.price, c.gpus, c.seconds); got != c.want {
			t.Errorf("Cost(%d, %d, %d) = %d; want %d", c.price, c.gpus, c.seconds, got, c.want)
		}
	}
}

func validProposal(renter, provider string) Proposal {
	return Proposal{
		Version: JobVersion, Job: "0123456789abcdef", Renter: renter, Provider: provider, IssuedAt: testNow,
		Model: "L4-24GB", GPUs: 1, MaxSeconds: 3600, MaxPrice: 500_000,
		Image: Image{ArchiveSHA256: strings.Repeat("ab", 32), ArchiveSize: 1000}, Args: []string{"echo", "hi"}, Env: []string{"A=1"},
	}
}

// TestJobRecords: a proposal, the lease that answers it, a receipt and countersignatures;
// each refused when signed by the wrong side or when its terms drift.
func TestJobRecords(t *testing.T) {
	rsk, renter := newKey(t)
	psk, provider := newKey(t)
	p := validProposal(renter.String(), provider.String())
	praw := seal(t, KindProposal, p, rsk)
	got, err := CheckProposal(praw, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckProposal(praw, testNow.Add(ProposalTTL+time.Second)); Reason(err) != "expired" {
		t.Fatalf("stale proposal: %v", err)
	}
	if _, err := CheckProposal(seal(t, KindProposal, p, psk), testNow); Reason(err) != "wrong_signer" {
		t.Fatalf("proposal signed by someone else: %v", err)
	}
	for name, edit := range map[string]func(p *Proposal){
		"no image":       func(p *Proposal) { p.Image = Image{} },
		"two images":     func(p *Proposal) { p.Image.Ref = "busybox" },
		"zero gpus":      func(p *Proposal) { p.GPUs = 0 },
		"reserved env":   func(p *Proposal) { p.Env = []string{"GPUNEX_VISIBLE_GPUS=all"} },
		"bad job id":     func(p *Proposal) { p.Job = "x" },
		"too long":       func(p *Proposal) { p.MaxSeconds = int64(MaxJobDuration/time.Second) + 1 },
		"lower case sku": func(p *Proposal) { p.Model = "l4-24gb" },
		"port 0":         func(p *Proposal) { p.Ports = []int{0} },
		"port 65536":     func(p *Proposal) { p.Ports = []int{65536} },
		"port twice":     func(p *Proposal) { p.Ports = []int{8000, 8000} },
		"17 ports":       func(p *Proposal) { p.Ports = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17} },
	} {
		q := p
		edit(&q)
		if _, err := CheckProposal(seal(t, KindProposal, q, rsk), testNow); Reason(err) != "invalid" {
			t.Errorf("%s: %v", name, err)
		}
	}

	l := Lease{Version: JobVersion, Job: p.Job, Proposal: RecordSHA256(praw), Renter: p.Renter, Provider: p.Provider, Model: p.Model,
		GPUs: 1, Price: 450_000, IssuedAt: testNow, EndsAt: testNow.Add(time.Hour), Limits: Limits{1 << 30, 1000, 256, 1 << 30}}
	lraw := seal(t, KindLease, l, psk)
	if _, err := CheckLease(lraw, praw, got); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckLease(seal(t, KindLease, l, rsk), praw, got); Reason(err) != "wrong_signer" {
		t.Fatalf("lease signed by the renter: %v", err)
	}
	backdated := l
	backdated.IssuedAt, backdated.EndsAt = testNow.Add(-time.Hour), testNow
	if _, err := CheckLease(seal(t, KindLease, backdated, psk), praw, got); Reason(err) != "invalid" {
		t.Fatalf("a lease dated an hour before the proposal: %v", err)
	}
	// A lease serves the ports the proposal declared, no more and no fewer.
	withPort := p
	withPort.Ports = []int{8000, 8888}
	wraw := seal(t, KindProposal, withPort, rsk)
	wgot, err := CheckProposal(wraw, testNow)
	if err != nil {
		t.Fatal(err)
	}
	wl := l
	wl.Proposal = RecordSHA256(wraw)
	if _, err := CheckLease(seal(t, KindLease, wl, psk), wraw, wgot); Reason(err) != "invalid" {
		t.Fatalf("a lease leaving out the proposal's ports: %v", err)
	}
	wl.Ports = []int{8000, 8888}
	if _, err := CheckLease(seal(t, KindLease, wl, psk), wraw, wgot); err != nil {
		t.Fatalf("a lease with the proposal's ports: %v", err)
	}
	extra := l
	extra.Ports = []int{22}
	if _, err := CheckLease(seal(t, KindLease, extra, psk), praw, got); Reason(err) != "invalid" {
		t.Fatalf("a lease adding a port: %v", err)
	}
	dear := l
	dear.Price = 600_000
	if _, err := CheckLease(seal(t, KindLease, dear, psk), praw, got); Reason(err) != "invalid" {
		t.Fatalf("lease above the maximum price: %v", err)
	}
	cs := Countersignature{Version: JobVersion, Of: KindLease, SHA256: RecordSHA256(lraw), Job: p.Job, Signer: renter.String(), SignedAt: testNow}
	if _, err := CheckCountersignature(seal(t, KindCountersignature, cs, rsk), lraw, KindLease, renter, testNow); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckCountersignature(seal(t, KindCountersignature, cs, psk), lraw, KindLease, renter, testNow); Reason(err) != "wrong_signer" {
		t.Fatalf("countersigned by the wrong side: %v", err)
	}
	if _, err := CheckCountersignature(seal(t, KindCountersignature, cs, rsk), praw, KindLease, renter, testNow); Reason(err) != "invalid" {
		t.Fatalf("countersignature of another record: %v", err)
	}

	r := Receipt{Version: JobVersion, Job: p.Job, Lease: RecordSHA256(lraw), Provider: p.Provider, Renter: p.Renter, Model: p.Model, GPUs: 1,
		StartedAt: testNow, EndedAt: testNow.Add(90 * time.Second), Seconds: 90, Price: 450_000, Amount: Cost(450_000, 1, 90), Reason: "exited"}
	if _, err := CheckReceipt(seal(t, KindReceipt, r, psk), lraw, &l, testNow); err != nil {
		t.Fatal(err)
	}
	inflated := r
	inflated.Amount++
	if _, err := CheckReceipt(seal(t, KindReceipt, inflated, psk), lraw, &l, testNow); Reason(err) != "invalid" {
		t.Fatalf("inflated receipt: %v", err)
	}
	longer := r
	longer.Seconds = 4000
	longer.Amount = Cost(longer.Price, 1, longer.Seconds)
	if _, err := CheckReceipt(seal(t, KindReceipt, longer, psk), lraw, &l, testNow); Reason(err) != "invalid" {
		t.Fatalf("receipt longer than its period: %v", err)
	}
}
