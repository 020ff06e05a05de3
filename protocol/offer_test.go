package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
)

var testNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func newKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	return sk, id
}

func validOffer(id peer.ID) Offer {
	return Offer{
		Version:      OfferVersion,
		Provider:     id.String(),
		Seq:          7,
		IssuedAt:     testNow,
		ExpiresAt:    testNow.Add(10 * time.Minute),
		Region:       "eu-west",
		Availability: "24/7",
		GPUs: []OfferGPUs{
			{Model: "H100-80GB", Count: 8, VRAMGB: 80, PricePerGPUHour: 2_100_000},
			{Model: "L4-24GB", Count: 2, VRAMGB: 24, PricePerGPUHour: 450_000},
		},
		Addrs: []string{"/ip4/127.0.0.1/tcp/4001"},
	}
}

func sealed(t testing.TB, sk crypto.PrivKey, payload any) []byte {
	t.Helper()
	return seal(t, KindOffer, payload, sk)
}

func TestOfferRoundTrip(t *testing.T) {
	sk, id := newKey(t)
	o := validOffer(id)
	raw := sealed(t, sk, o)
	got, err := CheckOffer(raw, testNow.Add(time.Minute))
	if err != nil {
		t.Fatalf("valid offer rejected: %v", err)
	}
	if got.Signer != id || got.Offer.Seq != 7 || len(got.Offer.GPUs) != 2 || got.Offer.GPUs[0].PricePerGPUHour != 2_100_000 {
		t.Fatalf("decoded offer differs: %+v", got)
	}
	v, err := Verify(raw, testNow)
	if err != nil || v.Kind != KindOffer || v.Signer != id {
		t.Fatalf("Verify: %+v, %v", v, err)
	}
	// The envelope is a standard libp2p signed envelope: libp2p's own code verifies it.
	if _, err := record.ConsumeTypedEnvelope(raw, &payloadRecord{spec: kindSpecs[0]}); err != nil {
		t.Fatalf("libp2p rejects our envelope: %v", err)
	}
}

func TestOfferRejections(t *testing.T) {
	sk, id := newKey(t)
	otherSK, otherID := newKey(t)
	good := sealed(t, sk, validOffer(id))

	mutate := func(f func(*Offer)) []byte {
		o := validOffer(id)
		f(&o)
		return sealed(t, sk, o)
	}
	tampered := bytes.Replace(good, []byte(`"eu-west"`), []byte(`"us-east"`), 1)
	if bytes.Equal(tampered, good) {
		t.Fatal("tamper did not change the record")
	}
	cases := []struct {
		name string
		raw  []byte
		want error
	}{
		{"tampered payload", tampered, ErrBadSignature},
		{"signed by another peer", func() []byte { o := validOffer(id); return sealed(t, otherSK, o) }(), ErrWrongSigner},
		{"expired", mutate(func(o *Offer) { o.ExpiresAt = testNow.Add(-time.Second); o.IssuedAt = testNow.Add(-time.Hour) }), ErrExpired},
		{"issued in the future", mutate(func(o *Offer) { o.IssuedAt = testNow.Add(time.Hour); o.ExpiresAt = testNow.Add(2 * time.Hour) }), ErrFuture},
		{"unknown version", mutate(func(o *Offer) { o.Version = 2 }), ErrUnknownVersion},
		{"zero seq", mutate(func(o *Offer) { o.Seq = 0 }), ErrInvalid},
		{"negative price", mutate(func(o *Offer) { o.GPUs[0].PricePerGPUHour = -1 }), ErrInvalid},
		{"duplicate model", mutate(func(o *Offer) { o.GPUs[1].Model = "H100-80GB" }), ErrInvalid},
		{"lower-case model", mutate(func(o *Offer) { o.GPUs[0].Model = "h100-80gb" }), ErrInvalid},
		{"withdrawn with GPUs", mutate(func(o *Offer) { o.Withdrawn = "closed" }), ErrInvalid},
		{"nothing offered", mutate(func(o *Offer) { o.GPUs = nil }), ErrInvalid},
		{"validity too long", mutate(func(o *Offer) { o.ExpiresAt = testNow.Add(48 * time.Hour) }), ErrInvalid},
		{"bad region", mutate(func(o *Offer) { o.Region = "eu west;drop" }), ErrInvalid},
		{"unknown egress policy", mutate(func(o *Offer) { o.Egress = "everything" }), ErrInvalid},
		{"egress deny spelled out", mutate(func(o *Offer) { o.Egress = EgressDeny }), ErrInvalid},
		{"bandwidth cap without egress", mutate(func(o *Offer) { o.EgressMbps = 100 }), ErrInvalid},
		{"negative bandwidth cap", mutate(func(o *Offer) { o.Egress, o.EgressMbps = EgressPublicOnly, -1 }), ErrInvalid},
		{"malformed json", sealedRaw(t, sk, []byte(`{"version":1,`)), ErrMalformed},
		{"unknown field", sealedRaw(t, sk, []byte(`{"version":1,"evil":true}`)), ErrMalformed},
		{"trailing data", sealedRaw(t, sk, append(mustJSON(t, validOffer(id)), []byte(` {}`)...)), ErrMalformed},
		{"not an envelope", []byte("hello world"), ErrMalformed},
		{"empty", nil, ErrUnknownKind},
		{"oversized", bytes.Repeat([]byte{1}, maxEnvelopeSize()+1), ErrTooLarge},
		{"oversized for an offer", sealedRaw(t, sk, mustJSON(t, struct {
			Offer
			Pad string `json:"pad"`
		}{validOffer(id), strings.Repeat("x", MaxOfferSize)})), ErrTooLarge},
		{"signed in another domain", otherDomain(t, sk, mustJSON(t, validOffer(id))), ErrBadSignature},
	}
	_ = otherID
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckOffer(c.raw, testNow)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v; want %v", err, c.want)
			}
			if _, err := Verify(c.raw, testNow); !errors.Is(err, c.want) {
				t.Fatalf("Verify got %v; want %v", err, c.want)
			}
			if Reason(err) == "other" {
				t.Fatalf("no metrics reason for %v", err)
			}
		})
	}
}

func TestSealRefusesOversized(t *testing.T) {
	sk, id := newKey(t)
	o := validOffer(id)
	o.Availability = strings.Repeat("x", MaxOfferSize)
	if _, err := Seal(KindOffer, o, sk); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v; want ErrTooLarge", err)
	}
}

func TestOfferIDAndKeys(t *testing.T) {
	_, id := newKey(t)
	oid := OfferID(id, "h100-80gb")
	p, m, err := ParseOfferID(oid)
	if err != nil || p != id || m != "H100-80GB" {
		t.Fatalf("ParseOfferID(%q) = %s %s %v", oid, p, m, err)
	}
	if _, _, err := ParseOfferID("nonsense"); err == nil {
		t.Fatal("bad offer ID accepted")
	}
	k := OfferKey(id)
	back, err := ParseOfferKey(k)
	if err != nil || back != id {
		t.Fatalf("ParseOfferKey(%q) = %s %v", k, back, err)
	}
	if _, err := ParseOfferKey("/pk/" + id.String()); err == nil {
		t.Fatal("foreign namespace accepted")
	}
	if ModelKey("h100-80gb") != ModelKey("H100-80GB ") {
		t.Fatal("model keys must not depend on spelling")
	}
	if ModelKey("L4-24GB") == ModelKey("H100-80GB") || RegionKey("eu-west") == ModelKey("eu-west") {
		t.Fatal("distinct search keys collide")
	}
}

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sealedRaw signs arbitrary payload bytes as an offer.
func sealedRaw(t testing.TB, sk crypto.PrivKey, payload []byte) []byte {
	env, err := record.Seal(&payloadRecord{spec: kindSpecs[0], data: payload}, sk)
	if err != nil {
		t.Fatal(err)
	}
	b, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// otherDomain signs a valid payload with the offer codec but another signature domain.
func otherDomain(t testing.TB, sk crypto.PrivKey, payload []byte) []byte {
	spec := kindSpecs[0]
	spec.domain = "/some/other/domain"
	env, err := record.Seal(&payloadRecord{spec: spec, data: payload}, sk)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := env.Marshal()
	return b
}

func FuzzOpen(f *testing.F) {
	sk, id := newKey(f)
	f.Add(sealed(f, sk, validOffer(id)))
	f.Add([]byte{})
	f.Add([]byte("\x0a\x00"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := Verify(raw, testNow)
		if err == nil && (v == nil || v.Kind == "") {
			t.Fatal("nil result without error")
		}
		if err != nil && Reason(err) == "other" {
			t.Fatalf("unclassified rejection: %v", err)
		}
	})
}

// FuzzOfferPayload signs fuzzed JSON payloads with a real key, so that the fuzzer reaches
// the payload decoder and the validation rules behind the signature check.
func FuzzOfferPayload(f *testing.F) {
	sk, id := newKey(f)
	f.Add(mustJSON(f, validOffer(id)))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"provider":"` + id.String() + `","seq":1,"gpus":[{"model":"X","count":-1}]}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		raw := sealedRaw(t, sk, payload)
		o, err := CheckOffer(raw, testNow)
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("unclassified rejection: %v", err)
			}
			return
		}
		if o.Offer.Validate() != nil || o.Signer != id {
			t.Fatal("accepted an offer that does not validate")
		}
	})
}

func TestCheckOffersBatch(t *testing.T) {
	sk, id := newKey(t)
	good := sealed(t, sk, validOffer(id))
	sk2, id2 := newKey(t)
	o2 := validOffer(id2)
	o2.Seq = 99
	good2 := sealed(t, sk2, o2)
	tampered := bytes.Replace(good2, []byte(`"eu-west"`), []byte(`"us-east"`), 1)
	expired := func() []byte {
		o := validOffer(id)
		o.ExpiresAt = testNow.Add(-time.Second)
		o.IssuedAt = testNow.Add(-time.Hour)
		return sealed(t, sk, o)
	}()
	raws := [][]byte{good, tampered, []byte("junk"), good2, expired}
	offers, errs := CheckOffers(raws, testNow)
	want := []error{nil, ErrBadSignature, ErrMalformed, nil, ErrExpired}
	for i := range raws {
		if want[i] == nil {
			if errs[i] != nil || offers[i] == nil {
				t.Fatalf("record %d: %v", i, errs[i])
			}
			// The batch gives the same answer as one-by-one checking.
			single, err := CheckOffer(raws[i], testNow)
			if err != nil || single.Offer.Seq != offers[i].Offer.Seq || single.Signer != offers[i].Signer {
				t.Fatalf("record %d: batch and single disagree", i)
			}
		} else if !errors.Is(errs[i], want[i]) || offers[i] != nil {
			t.Fatalf("record %d: got %v; want %v", i, errs[i], want[i])
		}
	}
	if offers[3].Offer.Seq != 99 {
		t.Fatal("batch mixed up records")
	}
}

func benchRecords(b *testing.B, n int) [][]byte {
	raws := make([][]byte, n)
	for i := range raws {
		sk, id := newKey(b)
		o := validOffer(id)
		o.Seq = uint64(i + 1)
		raws[i] = sealed(b, sk, o)
	}
	return raws
}

// BenchmarkVerifyOfferBatch checks records 64 at a time, as a catalogue sync delivers them.
func BenchmarkVerifyOfferBatch(b *testing.B) {
	const n = 256
	raws := benchRecords(b, n)
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < b.N {
		k := min(64, b.N-done)
		start := done % (n - 64)
		_, errs := CheckOffers(raws[start:start+k], testNow)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		done += k
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkVerifyOffer(b *testing.B) {
	// Distinct records from distinct providers, as a renter sees them.
	const n = 256
	raws := benchRecords(b, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := CheckOffer(raws[i%n], testNow); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// TestOfferEgress: an offer saying what its jobs with egress reach, and their cap, is
// accepted as it was signed (the control of the egress rejections above).
func TestOfferEgress(t *testing.T) {
	sk, id := newKey(t)
	o := validOffer(id)
	o.Egress, o.EgressMbps = EgressAllow, 250
	so, err := CheckOffer(sealed(t, sk, o), testNow)
	if err != nil || so.Offer.Egress != EgressAllow || so.Offer.EgressMbps != 250 {
		t.Fatalf("an offer with egress: %+v, %v", so, err)
	}
}
