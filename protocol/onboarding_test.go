package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
)

func validApplication(id peer.ID) Application {
	return Application{
		Version: ApplicationVersion, ID: "0123456789ab", Provider: id.String(), Seq: 1, IssuedAt: testNow,
		Name: "Ada Lovelace", Email: "ada@example.org", Company: "Analytical GPUs SARL",
		GPUs: []ApplicationGPU{{
			Model: "H100-80GB", Count: 8, HostRAMGB: 1024, UpGbps: 10, DownGbps: 10,
			Availability: "24/7", Location: Location{City: "Lyon", Country: "FR", Region: "eu-west"},
		}},
		UPS: true, CommitmentMonths: 12, MaintenanceNotes: "2 hours on the first Sunday of each month",
	}
}

func seal(t testing.TB, kind Kind, payload any, sk crypto.PrivKey) []byte {
	t.Helper()
	raw, err := Seal(kind, payload, sk)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestApplicationFieldErrors: every missing or invalid field is named in the error.
func TestApplicationFieldErrors(t *testing.T) {
	sk, id := newKey(t)
	cases := []struct {
		field string
		edit  func(a *Application)
	}{
		{"name", func(a *Application) { a.Name = "" }},
		{"email", func(a *Application) { a.Email = "not-an-address" }},
		{"gpus", func(a *Application) { a.GPUs = nil }},
		{"gpus[0].model", func(a *Application) { a.GPUs[0].Model = "" }},
		{"gpus[0].count", func(a *Application) { a.GPUs[0].Count = 0 }},
		{"gpus[0].host_ram_gb", func(a *Application) { a.GPUs[0].HostRAMGB = 0 }},
		{"gpus[0].internet_up_gbps", func(a *Application) { a.GPUs[0].UpGbps = -1 }},
		{"gpus[0].internet_down_gbps", func(a *Application) { a.GPUs[0].DownGbps = 0 }},
		{"gpus[0].availability", func(a *Application) { a.GPUs[0].Availability = "mon 25:00-26:00" }},
		{"gpus[0].location.city", func(a *Application) { a.GPUs[0].Location.City = "" }},
		{"gpus[0].location.country", func(a *Application) { a.GPUs[0].Location.Country = "France" }},
		{"gpus[0].location.region", func(a *Application) { a.GPUs[0].Location.Region = "" }},
		{"commitment_months", func(a *Application) { a.CommitmentMonths = 0 }},
		{"id", func(a *Application) { a.ID = "../../etc" }},
	}
	for _, c := range cases {
		a := validApplication(id)
		c.edit(&a)
		_, err := CheckApplication(seal(t, KindApplication, a, sk), testNow)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
	a := validApplication(id)
	a.GPUs[0].Availability = "mon-fri 08:00-20:00, sat,sun 10:00-14:00 (Europe/Paris)"
	if _, err := CheckApplication(seal(t, KindApplication, a, sk), testNow); err != nil {
		t.Fatalf("valid application with a schedule: %v", err)
	}
}

// TestApplicationRejections: signed by another peer, replayed long after, oversized.
func TestApplicationRejections(t *testing.T) {
	sk, id := newKey(t)
	other, _ := newKey(t)
	a := validApplication(id)
	if _, err := CheckApplication(seal(t, KindApplication, a, other), testNow); !errors.Is(err, ErrWrongSigner) {
		t.Fatalf("application signed by another peer: %v", err)
	}
	if _, err := CheckApplication(seal(t, KindApplication, a, sk), testNow.Add(MaxApplicationAge+time.Second)); !errors.Is(err, ErrExpired) {
		t.Fatalf("old application: %v", err)
	}
	a.MaintenanceNotes = strings.Repeat("x", MaxApplicationSize)
	if _, err := Seal(KindApplication, a, sk); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized application sealed: %v", err)
	}
}

// TestProposeTier is the documented tier rule as a table.
func TestProposeTier(t *testing.T) {
	_, id := newKey(t)
	cases := []struct {
		name     string
		edit     func(a *Application)
		want     string
		whyMatch string
	}{
		{"all thresholds met", func(a *Application) {}, TierEnterprise, "meet"},
		{"no UPS", func(a *Application) { a.UPS = false }, TierCommunity, "no UPS"},
		{"commitment 11 months", func(a *Application) { a.CommitmentMonths = 11 }, TierCommunity, "commitment 11"},
		{"commitment exactly 12", func(a *Application) { a.CommitmentMonths = 12 }, TierEnterprise, "meet"},
		{"slow uplink", func(a *Application) { a.GPUs[0].UpGbps = 0.5 }, TierCommunity, "< 1"},
		{"exactly 1 Gbps both ways", func(a *Application) { a.GPUs[0].UpGbps, a.GPUs[0].DownGbps = 1, 1 }, TierEnterprise, "meet"},
		{"asymmetric 10/1", func(a *Application) { a.GPUs[0].UpGbps, a.GPUs[0].DownGbps = 1, 10 }, TierCommunity, "not symmetric"},
		{"ratio 0.9 is symmetric", func(a *Application) { a.GPUs[0].UpGbps, a.GPUs[0].DownGbps = 9, 10 }, TierEnterprise, "meet"},
		{"second entry slow", func(a *Application) {
			g := a.GPUs[0]
			g.UpGbps = 0.1
			a.GPUs = append(a.GPUs, g)
		}, TierCommunity, "gpus[1]"},
	}
	for _, c := range cases {
		a := validApplication(id)
		c.edit(&a)
		tier, why := ProposeTier(&a)
		if tier != c.want || !strings.Contains(strings.Join(why, "; "), c.whyMatch) {
			t.Errorf("%s: %s (%v); want %s mentioning %q", c.name, tier, why, c.want, c.whyMatch)
		}
	}
	a := validApplication(id)
	a.UPS = false
	if err := CheckTierChoice(&a, TierEnterprise); err == nil {
		t.Fatal("Enterprise granted without a UPS")
	}
	if err := CheckTierChoice(&a, TierCommunity); err != nil {
		t.Fatal(err)
	}
	a.UPS, a.CommitmentMonths = true, 1
	if err := CheckTierChoice(&a, TierEnterprise); err != nil {
		t.Fatalf("reviewer may grant Enterprise with a UPS: %v", err)
	}
}

func TestCompareDetected(t *testing.T) {
	got := CompareDetected(
		[]ApplicationGPU{{Model: "H100-80GB", Count: 8}, {Model: "L4-24GB", Count: 2}},
		[]DetectedGPU{{Model: "H100-80GB", Count: 7}, {Model: "A100-80GB", Count: 1}, {Model: "L4-24GB", Count: 2}},
	)
	want := []string{"declared 8 x H100-80GB, detected 7", "detected 1 x A100-80GB, not declared"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q; want %q", got, want)
	}
}

// TestCompareHost: a declared host RAM over what the applying node has (beyond the 10%
// the kernel keeps) and a GPU whose VRAM is not its model's (an H100 NVL of 94 GB detected
// as H100-80GB) are differences; RAM within the tolerance, less declared than present, an
// unread RAM (0) and a model without a size in its name are not.
func TestCompareHost(t *testing.T) {
	got := CompareHost(
		[]ApplicationGPU{{Model: "H100-80GB", HostRAMGB: 512}, {Model: "L4-24GB", HostRAMGB: 256}, {Model: "L4-24GB", HostRAMGB: 64}},
		[]DetectedGPU{{Model: "H100-80GB", Count: 2, VRAMGB: 94}, {Model: "L4-24GB", VRAMGB: 23}, {Model: "MYSTERY", VRAMGB: 7}}, 240)
	want := []string{"gpus[0]: host RAM 512 GB declared, 240 GB detected on the applying node",
		"detected H100-80GB with 94 GB of VRAM, not the 80 GB its model says: another variant"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q; want %q", got, want)
	}
	if got := CompareHost([]ApplicationGPU{{Model: "H100-80GB", HostRAMGB: 512}}, nil, 0); len(got) != 0 {
		t.Fatalf("RAM not read: %q", got)
	}
}

func validCertificate(coord, prov peer.ID) Certificate {
	return Certificate{
		Version: CertificateVersion, Coordinator: coord.String(), Provider: prov.String(), Serial: 1,
		Application: "0123456789ab", Tier: TierEnterprise,
		GPUs:          []CertifiedGPU{{Model: "H100-80GB", Count: 8}, {Model: "L4-24GB", Count: 2}},
		CommitmentEnd: testNow.AddDate(1, 0, 0), IssuedAt: testNow, ExpiresAt: testNow.AddDate(0, 6, 0),
	}
}

// TestOfferCertificate: an offer is accepted only with a valid certificate from a trusted
// coordinator, within the approved models and counts.
func TestOfferCertificate(t *testing.T) {
	coordSK, coord := newKey(t)
	strangerSK, _ := newKey(t)
	_, prov := newKey(t)
	trust := NewTrust(coord)
	cert := seal(t, KindCertificate, validCertificate(coord, prov), coordSK)

	o := validOffer(prov)
	if _, err := OfferCertificate(&o, testNow, trust); !errors.Is(err, ErrNotCertified) || Reason(err) != "uncertified" {
		t.Fatalf("offer without a certificate: %v", err)
	}
	o.Certificate = cert
	c, err := OfferCertificate(&o, testNow, trust)
	if err != nil || c.Tier != TierEnterprise {
		t.Fatalf("certified offer: %v", err)
	}
	if _, err := OfferCertificate(&o, testNow.AddDate(0, 7, 0), trust); Reason(err) != "expired" {
		t.Fatalf("expired certificate: %v", err)
	}
	if _, err := OfferCertificate(&o, testNow, NewTrust()); Reason(err) != "untrusted" {
		t.Fatalf("untrusted coordinator: %v", err)
	}
	o.Certificate = seal(t, KindCertificate, validCertificate(coord, prov), strangerSK)
	if _, err := OfferCertificate(&o, testNow, trust); Reason(err) != "wrong_signer" {
		t.Fatalf("certificate signed by a stranger naming the coordinator: %v", err)
	}
	o.Certificate = cert
	o.GPUs[0].Count = 9
	if _, err := OfferCertificate(&o, testNow, trust); Reason(err) != "not_approved" {
		t.Fatalf("more GPUs than approved: %v", err)
	}
	o.GPUs[0].Count, o.GPUs[0].Model = 8, "A100-80GB"
	if _, err := OfferCertificate(&o, testNow, trust); Reason(err) != "not_approved" {
		t.Fatalf("model not approved: %v", err)
	}
	other := validOffer(prov)
	_, someoneElse := newKey(t)
	other.Provider = someoneElse.String()
	other.Certificate = cert
	if _, err := OfferCertificate(&other, testNow, trust); Reason(err) != "wrong_signer" {
		t.Fatalf("certificate of another provider: %v", err)
	}
	// The whole offer, certificate inside, stays under the offer size limit.
	o = validOffer(prov)
	o.Certificate = cert
	if raw := sealed(t, provKey(t), o); len(raw) > MaxOfferSize {
		t.Fatalf("certified offer is %d bytes", len(raw))
	}
}

func provKey(t *testing.T) crypto.PrivKey { sk, _ := newKey(t); return sk }

func TestRevocationAndNotification(t *testing.T) {
	coordSK, coord := newKey(t)
	_, prov := newKey(t)
	trust := NewTrust(coord)
	certRaw := seal(t, KindCertificate, validCertificate(coord, prov), coordSK)
	cert, err := CheckCertificate(certRaw, testNow, trust)
	if err != nil {
		t.Fatal(err)
	}
	rev := Revocation{Version: RevocationVersion, Coordinator: coord.String(), Provider: prov.String(), IssuedAt: testNow.Add(time.Hour), Reason: "fraudulent benchmarks"}
	r, err := CheckRevocation(seal(t, KindRevocation, rev, coordSK), testNow.Add(time.Hour), trust)
	if err != nil || !r.Revokes(cert) {
		t.Fatalf("revocation: %v", err)
	}
	later := validCertificate(coord, prov)
	later.IssuedAt, later.Serial = testNow.Add(2*time.Hour), 2
	lc, err := CheckCertificate(seal(t, KindCertificate, later, coordSK), testNow.Add(2*time.Hour), trust)
	if err != nil || r.Revokes(lc) {
		t.Fatalf("a certificate issued after the revocation is valid: %v", err)
	}
	if _, err := CheckRevocation(seal(t, KindRevocation, rev, provKey(t)), testNow.Add(time.Hour), trust); Reason(err) != "wrong_signer" {
		t.Fatalf("forged revocation: %v", err)
	}

	n := Notification{Version: NotificationVersion, Coordinator: coord.String(), Provider: prov.String(), Seq: 1, IssuedAt: testNow,
		Application: "0123456789ab", Status: StatusApproved, Tier: TierEnterprise, Certificate: certRaw}
	if _, err := CheckNotification(seal(t, KindNotification, n, coordSK), testNow, trust, prov); err != nil {
		t.Fatal(err)
	}
	_, stranger := newKey(t)
	if _, err := CheckNotification(seal(t, KindNotification, n, coordSK), testNow, trust, stranger); Reason(err) != "invalid" {
		t.Fatalf("notification for someone else: %v", err)
	}
	if _, err := CheckNotification(seal(t, KindNotification, n, coordSK), testNow, NewTrust(), prov); Reason(err) != "untrusted" {
		t.Fatalf("untrusted notification: %v", err)
	}
	// A record of one kind never passes as another.
	if _, err := CheckCertificate(seal(t, KindNotification, n, coordSK), testNow, trust); Reason(err) != "unknown_kind" {
		t.Fatalf("notification as certificate: %v", err)
	}
}

// FuzzOnboardingPayload signs arbitrary payloads as each onboarding and job kind: every rejection
// is classified, and nothing accepted breaks its kind's rules.
func FuzzOnboardingPayload(f *testing.F) {
	sk, id := newKey(f)
	_, prov := newKey(f)
	f.Add(uint8(0), mustJSON(f, validApplication(id)))
	f.Add(uint8(1), mustJSON(f, validCertificate(id, prov)))
	f.Add(uint8(2), mustJSON(f, Revocation{Version: 1, Coordinator: id.String(), Provider: prov.String(), IssuedAt: testNow, Reason: "x"}))
	f.Add(uint8(3), mustJSON(f, Notification{Version: 1, Coordinator: id.String(), Provider: prov.String(), Seq: 1, IssuedAt: testNow, Status: StatusPending}))
	f.Add(uint8(0), []byte(`{"version":1,"gpus":[{"model":"X","count":-1}]}`))
	f.Add(uint8(4), mustJSON(f, validProposal(id.String(), prov.String())))
	// Settlement records (kinds 13-16 of kindSpecs).
	f.Add(uint8(12), mustJSON(f, EscrowHold{Version: 1, Coordinator: id.String(), Renter: prov.String(), Provider: prov.String(),
		Job: "0123456789abcdef", Amount: 5, CommissionBPS: 1000, IssuedAt: testNow, ExpiresAt: testNow.Add(time.Hour)}))
	f.Add(uint8(13), mustJSON(f, PayoutSettings{Version: 1, Provider: id.String(), Seq: 1, IssuedAt: testNow, Method: PayoutBank,
		Schedule: PayoutMonthly, AccountName: "A", IBAN: "FR1420041010050500013M02606", BIC: "PSSTFRPPPAR"}))
	root, _ := MerkleRoot([]string{strings.Repeat("a", 64)})
	f.Add(uint8(14), mustJSON(f, PayoutBatch{Version: 1, Batch: "20261207-001", Coordinator: id.String(), Seq: 1, IssuedAt: testNow, State: BatchPlanned,
		MerkleRoot: root, Payouts: []Payout{{Provider: prov.String(), Method: PayoutUSDC, Amount: 1, Receipts: []string{strings.Repeat("a", 64)}, MerkleRoot: root}}}))
	f.Add(uint8(15), mustJSON(f, MarketStats{Version: 1, Coordinator: id.String(), Seq: 1, IssuedAt: testNow, ExpiresAt: testNow.Add(time.Hour),
		Markets: []Market{{Model: "H100-80GB", Region: "eu-west", ListedGPUs: 8, Recommended: 2_000_000}}}))
	f.Fuzz(func(t *testing.T, kind uint8, payload []byte) {
		spec := kindSpecs[1+int(kind)%(len(kindSpecs)-1)] // every kind but the offer
		env, err := record.Seal(&payloadRecord{spec: spec, data: payload}, sk)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := env.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		v, err := Verify(raw, testNow)
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("unclassified rejection: %v", err)
			}
			return
		}
		if a, ok := v.Record.(*Application); ok && a.ValidateForm() != nil {
			t.Fatal("accepted an application that does not validate")
		}
		if c, ok := v.Record.(*SignedCertificate); ok && c.validate() != nil {
			t.Fatal("accepted a certificate that does not validate")
		}
	})
}
