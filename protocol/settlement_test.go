package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Commission rounding never creates or loses a micro-USDC: for every charge and rate, the
// provider's share plus the commission is the charge, and summing over a batch keeps it.
func TestCommissionSplitsExactly(t *testing.T) {
	cases := []struct {
		charge     MicroUSDC
		bps        int
		commission MicroUSDC
	}{
		{0, 1000, 0},
		{1, 1000, 0},  // a micro-USDC is too small to take 10% of: the provider keeps it
		{9, 1000, 0},  // 0.9 rounds down
		{10, 1000, 1}, // exactly 10%
		{2_100_000, 1000, 210_000},
		{2_100_001, 1000, 210_000},
		{3_333_333, 1500, 499_999}, // 499,999.95 rounds down
		{1_000_000, 0, 0},
		{1_000_000, MaxCommissionBPS, 500_000},
		{MicroUSDC(int64Max() / 2), 1, MicroUSDC(int64Max() / 2 / 10_000)},
	}
	for _, c := range cases {
		got := Commission(c.charge, c.bps)
		if got != c.commission {
			t.Errorf("Commission(%d, %d bps) = %d, want %d", c.charge, c.bps, got, c.commission)
		}
		if net := c.charge - got; net+got != c.charge || net < 0 {
			t.Errorf("split of %d: net %d + commission %d", c.charge, net, got)
		}
	}
	var total, paid, kept MicroUSDC
	for i := range 10_000 {
		charge := MicroUSDC(i*7919%1_000_003 + i)
		c := Commission(charge, 1234)
		total += charge
		kept += c
		paid += charge - c
	}
	if paid+kept != total {
		t.Fatalf("a batch of 10,000 charges: paid %d + kept %d != charged %d", paid, kept, total)
	}
}

func int64Max() int64 { return 1<<63 - 1 }

func TestHoldAmountAndCharge(t *testing.T) {
	// 2.10 USDC per GPU-hour, 2 GPUs, one hour: 4.20 plus the second a receipt may round to.
	if got := HoldAmount(2_100_000, 2, 3600); got != Cost(2_100_000, 2, 3601) || got != 4_201_166 {
		t.Fatalf("HoldAmount = %d", got)
	}
	if Charge(5, 3) != 3 || Charge(3, 5) != 3 {
		t.Fatal("a charge is the receipt's amount capped at the hold")
	}
}

func TestMerkleRoot(t *testing.T) {
	h := func(c byte) string { return strings.Repeat(string([]byte{c}), 64) }
	one, _ := MerkleRoot([]string{h('a')})
	two, _ := MerkleRoot([]string{h('a'), h('b')})
	three, _ := MerkleRoot([]string{h('a'), h('b'), h('c')})
	swapped, _ := MerkleRoot([]string{h('b'), h('a')})
	if one == two || two == three || two == swapped {
		t.Fatalf("roots must differ: %s %s %s %s", one, two, three, swapped)
	}
	if one == h('a') {
		t.Fatal("a leaf is hashed, not used as the root")
	}
	again, _ := MerkleRoot([]string{h('a'), h('b'), h('c')})
	if again != three {
		t.Fatal("root is not deterministic")
	}
	if _, err := MerkleRoot(nil); err == nil {
		t.Fatal("empty list accepted")
	}
	if _, err := MerkleRoot([]string{"zz"}); err == nil {
		t.Fatal("bad hash accepted")
	}
}

func TestPayoutSettingsValidate(t *testing.T) {
	good := PayoutSettings{Method: PayoutUSDC, Schedule: PayoutWeekly, SolanaAddress: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bank := PayoutSettings{Method: PayoutBank, Schedule: PayoutMonthly, AccountName: "Ada GPU SARL", IBAN: "FR1420041010050500013M02606", BIC: "PSSTFRPPPAR"}
	if err := bank.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		field string
		edit  func(*PayoutSettings)
	}{
		{"schedule", func(s *PayoutSettings) { s.Schedule = "daily" }},
		{"method", func(s *PayoutSettings) { s.Method = "paypal" }},
		{"solana_address", func(s *PayoutSettings) { s.SolanaAddress = "0OIl" + good.SolanaAddress[4:] }},
		{"solana_address", func(s *PayoutSettings) { s.SolanaAddress = "11111111111111111111111111111111111" }},
		{"iban", func(s *PayoutSettings) { *s = bank; s.IBAN = "FR1420041010050500013M02607" }},
		{"iban", func(s *PayoutSettings) { *s = bank; s.IBAN = "FR14 2004 1010 0505 0001 3M02 606" }},
		{"bic", func(s *PayoutSettings) { *s = bank; s.BIC = "PSST" }},
		{"account_name", func(s *PayoutSettings) { *s = bank; s.AccountName = " " }},
	}
	for _, c := range cases {
		s := good
		c.edit(&s)
		var fe *FieldError
		if err := s.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: got %v, want an error on %s", s, err, c.field)
		}
	}
}

func TestEscrowHoldChecks(t *testing.T) {
	coordKey, coord := newKey(t)
	_, renter := newKey(t)
	_, provider := newKey(t)
	otherKey, _ := newKey(t)
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	hold := EscrowHold{Version: 1, Coordinator: coord.String(), Renter: renter.String(), Provider: provider.String(),
		Job: "0123456789abcdef", Amount: 4_201_166, IssuedAt: now, ExpiresAt: now.Add(HoldGrace + 2*time.Hour)}
	raw := seal(t, KindEscrowHold, hold, coordKey)
	h, err := CheckHold(raw, now, NewTrust(coord))
	if err != nil {
		t.Fatal(err)
	}
	p := &Proposal{Job: hold.Job, Renter: hold.Renter, Provider: hold.Provider, GPUs: 2, MaxSeconds: 3600}
	if err := CheckHoldCovers(h, p, 2_100_000, now.Add(time.Hour)); err != nil {
		t.Fatalf("a hold of exactly the maximum cost: %v", err)
	}
	if err := CheckHoldCovers(h, p, 2_100_001, now.Add(time.Hour)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a hold below the cost at a higher price: %v", err)
	}
	if err := CheckHoldCovers(h, p, 2_100_000, now.Add(3*time.Hour)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a hold that ends before the lease: %v", err)
	}
	other := *p
	other.Job = "fedcba9876543210"
	if err := CheckHoldCovers(h, &other, 2_100_000, now.Add(time.Hour)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a hold for another job: %v", err)
	}
	if _, err := CheckHold(raw, now, NewTrust(provider)); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("untrusted coordinator: %v", err)
	}
	if _, err := CheckHold(raw, hold.ExpiresAt, NewTrust(coord)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired hold: %v", err)
	}
	forged := seal(t, KindEscrowHold, hold, otherKey)
	if _, err := CheckHold(forged, now, NewTrust(coord)); !errors.Is(err, ErrWrongSigner) {
		t.Fatalf("hold signed by another key: %v", err)
	}
}

func TestCheckBatch(t *testing.T) {
	coordKey, coord := newKey(t)
	_, provider := newKey(t)
	r1, r2 := strings.Repeat("1", 64), strings.Repeat("2", 64)
	root, _ := MerkleRoot([]string{r1, r2})
	b := PayoutBatch{Version: 1, Batch: "20261207-001", Coordinator: coord.String(), Seq: 1, IssuedAt: time.Now(),
		State: BatchPlanned, CommissionBPS: 1000, MerkleRoot: root,
		Payouts: []Payout{{Provider: provider.String(), Method: PayoutUSDC, Amount: 10, Receipts: []string{r1, r2}, MerkleRoot: root}}}
	if _, err := CheckBatch(seal(t, KindPayoutBatch, b, coordKey), NewTrust(coord)); err != nil {
		t.Fatal(err)
	}
	tampered := b
	tampered.Payouts = []Payout{b.Payouts[0]}
	tampered.Payouts[0].Receipts = []string{r1}
	if _, err := CheckBatch(seal(t, KindPayoutBatch, tampered, coordKey), NewTrust(coord)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a receipt removed without changing the root: %v", err)
	}
	twice := b
	twice.Payouts = append([]Payout{}, b.Payouts[0], b.Payouts[0])
	if _, err := CheckBatch(seal(t, KindPayoutBatch, twice, coordKey), NewTrust(coord)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a receipt paid twice: %v", err)
	}
}

func TestRecommend(t *testing.T) {
	cases := []struct {
		m    Market
		want MicroUSDC
	}{
		{Market{}, 0},
		{Market{MedianListPrice: 2_000_000, Utilisation: 0}, 1_700_000},
		{Market{MedianListPrice: 2_000_000, Utilisation: 500}, 2_000_000},
		{Market{MedianListPrice: 2_000_000, Leases: 3, MedianLeasePrice: 1_000_000, Utilisation: 1000}, 1_150_000},
		{Market{MedianListPrice: 2_000_000, Leases: 2, MedianLeasePrice: 1_000_000, Utilisation: 1000}, 2_300_000},
	}
	for _, c := range cases {
		if got, basis := Recommend(c.m); got != c.want || basis == "" {
			t.Errorf("Recommend(%+v) = %d (%s), want %d", c.m, got, basis, c.want)
		}
	}
	if Median([]MicroUSDC{3, 1, 2}) != 2 || Median([]MicroUSDC{1, 4}) != 2 || Median(nil) != 0 {
		t.Fatal("median")
	}
}
