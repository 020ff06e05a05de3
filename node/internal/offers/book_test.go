package offers

import (
	"bytes"
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/protocol"
)

func sealOffer(t *testing.T, sk crypto.PrivKey, seq uint64, price protocol.MicroUSDC) []byte {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(sk)
	now := time.Now().UTC()
	raw, err := protocol.Seal(protocol.KindOffer, protocol.Offer{
		Version: protocol.OfferVersion, Provider: id.String(), Seq: seq, IssuedAt: now, ExpiresAt: now.Add(time.Minute),
		Region: "eu-west", GPUs: []protocol.OfferGPUs{{Model: "L4-24GB", Count: 1, VRAMGB: 24, PricePerGPUHour: price}},
		Certificate: testCertificate(t, testCoordinatorKey, id, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 1}}, now),
	}, sk)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// newTestBook returns an offer book on an in-memory ledger, with its own metrics.
func newTestBook(t *testing.T) (*ledger.Ledger, *metrics.Metrics, *Book) {
	t.Helper()
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	ts, err := NewTrust(l.Offers, []peer.ID{testCoordinatorID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, m, NewBook(l.Offers, ts, m, quietLogger(), clock.System())
}

func newTestKey(t *testing.T) crypto.PrivKey {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return sk
}

// TestOfferBookBatchRules: the batch path used by catalogue syncs applies every rule of the
// single path: bad signatures and replays are rejected and counted, the newest record wins.
func TestOfferBookBatchRules(t *testing.T) {
	l, m, b := newTestBook(t)
	skA, skB := newTestKey(t), newTestKey(t)
	a1, a2 := sealOffer(t, skA, 1, 1_000_000), sealOffer(t, skA, 2, 2_000_000)
	bGood := sealOffer(t, skB, 5, 500_000)
	bTampered := bytes.Replace(bGood, []byte(`"eu-west"`), []byte(`"us-east"`), 1)

	if n, v := b.acceptBatch([][]byte{a2, bTampered, bGood}, "sync"); n != 2 || v != 2 {
		t.Fatalf("first batch: %d new, %d valid; want 2 and 2", n, v)
	}
	if n, v := b.acceptBatch([][]byte{a1, a2}, "sync"); n != 0 || v != 1 {
		t.Fatalf("replay batch: %d new, %d valid; want 0 and 1", n, v)
	}
	idA, _ := peer.IDFromPrivateKey(skA)
	if so, _ := b.Get(idA); so.Offer.Seq != 2 {
		t.Fatalf("held seq %d; want 2", so.Offer.Seq)
	}
	if v := testutil.ToFloat64(m.RecordsRejected.WithLabelValues("offer", "sync", "bad_signature")); v != 1 {
		t.Fatalf("bad signatures counted: %v", v)
	}
	if v := testutil.ToFloat64(m.RecordsRejected.WithLabelValues("offer", "sync", "replay")); v != 1 {
		t.Fatalf("replays counted: %v", v)
	}
	if len(b.Live(time.Now())) != 2 {
		t.Fatal("live offers")
	}
	// Restart: the ledger brings the newest record back, so the old one stays a replay.
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	b2 := NewBook(l.Offers, b.trust, m, quietLogger(), clock.System())
	if err := b2.Load(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b2.Accept(a1, "gossip"); err == nil {
		t.Fatal("replay accepted after restart")
	}
}

// TestOfferBookAnswersForAnother: a peer asked for its own offer cannot answer with someone
// else's; the DHT validator calls an older copy "superseded" but a different record under
// the same sequence a replay.
func TestOfferBookAnswersForAnother(t *testing.T) {
	_, m, b := newTestBook(t)
	skA, skB := newTestKey(t), newTestKey(t)
	idA, _ := peer.IDFromPrivateKey(skA)
	idB, _ := peer.IDFromPrivateKey(skB)
	a := sealOffer(t, skA, 3, 1_000_000)
	if _, _, err := b.acceptFrom(a, "stream", idB); err == nil {
		t.Fatal("A's offer accepted as B's answer")
	}
	if v := testutil.ToFloat64(m.RecordsRejected.WithLabelValues("offer", "stream", "wrong_signer")); v != 1 {
		t.Fatalf("wrong signer counted %v times", v)
	}
	if _, _, err := b.acceptFrom(a, "stream", idA); err != nil {
		t.Fatal(err)
	}
	v := DHTValidator{b}
	if err := v.Validate(protocol.OfferKey(idA), sealOffer(t, skA, 2, 1_000_000)); err == nil {
		t.Fatal("older record validated")
	}
	if err := v.Validate(protocol.OfferKey(idA), sealOffer(t, skA, 3, 9_000_000)); err == nil {
		t.Fatal("second record under the same sequence validated")
	}
	if err := v.Validate(protocol.OfferKey(idB), a); err == nil {
		t.Fatal("A's offer validated under B's key")
	}
	for reason, want := range map[string]float64{"superseded": 1, "replay": 1, "wrong_signer": 1} {
		if got := testutil.ToFloat64(m.RecordsRejected.WithLabelValues("offer", "dht_validator", reason)); got != want {
			t.Errorf("dht_validator %s counted %v; want %v", reason, got, want)
		}
	}
	if err := v.Validate(protocol.OfferKey(idA), a); err != nil {
		t.Fatalf("current record refused: %v", err)
	}
}

// TestOfferBookReencodedCopy: anyone can wrap a provider's signed payload in a re-encoded
// envelope (an extra protobuf field keeps the signature valid). If that copy arrives first,
// the provider's own record is still the same record, not a replay.
func TestOfferBookReencodedCopy(t *testing.T) {
	_, m, b := newTestBook(t)
	sk := newTestKey(t)
	genuine := sealOffer(t, sk, 3, 1_000_000)
	copied := append(append([]byte{}, genuine...), 0x48, 0x01) // field 9, varint 1
	if _, fresh, err := b.Accept(copied, "gossip"); err != nil || !fresh {
		t.Fatalf("re-encoded copy: fresh=%v err=%v", fresh, err)
	}
	if _, _, err := b.Accept(genuine, "gossip"); err != nil {
		t.Fatalf("the provider's own record refused after a re-encoded copy: %v", err)
	}
	if v := testutil.ToFloat64(m.RecordsRejected.WithLabelValues("offer", "gossip", "replay")); v != 0 {
		t.Fatalf("replays counted: %v", v)
	}
	// A different payload under the same sequence is still a replay.
	if _, _, err := b.Accept(sealOffer(t, sk, 3, 2_000_000), "gossip"); err == nil {
		t.Fatal("a second record under one sequence accepted")
	}
}

// TestOfferBookCertificates: offers without a certificate, with one from an untrusted key,
// with an expired one, or beyond what it approves, are refused on every channel and counted.
func TestOfferBookCertificates(t *testing.T) {
	_, m, b := newTestBook(t)
	sk := newTestKey(t)
	id, _ := peer.IDFromPrivateKey(sk)
	now := time.Now().UTC()
	offer := func(cert []byte, count int) []byte {
		raw, err := protocol.Seal(protocol.KindOffer, protocol.Offer{
			Version: protocol.OfferVersion, Provider: id.String(), Seq: uint64(now.UnixNano()), IssuedAt: now, ExpiresAt: now.Add(time.Minute),
			Region: "eu-west", GPUs: []protocol.OfferGPUs{{Model: "L4-24GB", Count: count, VRAMGB: 24, PricePerGPUHour: 1}}, Certificate: cert,
		}, sk)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	approved := []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}}
	expired := testCertificate(t, testCoordinatorKey, id, approved, now.AddDate(0, 0, -40))
	cases := map[string][]byte{
		"uncertified":  offer(nil, 1),
		"untrusted":    offer(testCertificate(t, newTestKey(t), id, approved, now), 1),
		"expired":      offer(expired, 1),
		"not_approved": offer(testCertificate(t, testCoordinatorKey, id, approved, now), 3),
	}
	for reason, raw := range cases {
		if _, _, err := b.Accept(raw, "gossip"); protocol.Reason(err) != reason {
			t.Errorf("%s: got %v", reason, err)
		}
		if got := testutil.ToFloat64(m.RecordsRejected.WithLabelValues("offer", "gossip", reason)); got != 1 {
			t.Errorf("%s counted %v times", reason, got)
		}
	}
	if _, _, err := b.Accept(offer(testCertificate(t, testCoordinatorKey, id, approved, now), 2), "gossip"); err != nil {
		t.Fatalf("certified offer: %v", err)
	}
}
