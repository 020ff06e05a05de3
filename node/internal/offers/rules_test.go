package offers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/protocol"
)

// TestGossipVerdicts: the offers topic validator accepts a provider's newer offer, takes the
// one held again as a repeat (a republish), ignores what an honest relay may forward (an
// older record, an expired one, one certified by a coordinator this node does not trust)
// and rejects what only its author could make (a forged record).
func TestGossipVerdicts(t *testing.T) {
	w := newWorld(t)
	p := w.certified()
	ctx := context.Background()
	v5 := w.offer(p, 5, 1_000_000, nil)
	for _, c := range []struct {
		what string
		raw  []byte
		want p2p.Verdict
	}{
		{"a first offer", v5, p2p.Accept},
		{"the same offer again", v5, p2p.Repeat},
		{"a newer offer", w.offer(p, 6, 1_100_000, nil), p2p.Accept},
		{"the older offer", v5, p2p.Ignore},
		{"an expired offer", w.offer(p, 7, 1, func(o *protocol.Offer) {
			o.IssuedAt, o.ExpiresAt = o.IssuedAt.Add(-time.Hour), o.IssuedAt.Add(-time.Minute)
		}), p2p.Ignore},
		{"an offer certified by an untrusted coordinator", w.offer(p, 8, 1, func(o *protocol.Offer) {
			stranger, _ := recordtest.NewKey()
			o.Certificate = testCertificate(t, stranger, p.id, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}}, w.clock.Now())
		}), p2p.Ignore},
		{"a forged offer", []byte(strings.Replace(string(w.offer(p, 9, 1, nil)), "eu-west", "us-east", 1)), p2p.Reject},
		{"an offer beyond its certificate", w.offer(p, 10, 1, func(o *protocol.Offer) { o.GPUs[0].Count = 3 }), p2p.Reject},
	} {
		if got := w.cat.ValidateOffer(ctx, p.id, c.raw); got != c.want {
			t.Errorf("%s: verdict %v, want %v", c.what, got, c.want)
		}
	}
	if so, _ := w.book.Get(p.id); so == nil || so.Offer.Seq != 6 || so.Offer.GPUs[0].PricePerGPUHour != 1_100_000 {
		t.Fatalf("the offer held: %+v", so)
	}
	if n := testutil.ToFloat64(w.metrics.RecordsAccepted.WithLabelValues("offer", "gossip")); n != 2 {
		t.Fatalf("offers counted as accepted: %v", n)
	}
}

// TestOfferExpiry: an offer leaves the live offers when it expires, or when its certificate
// does, and a withdrawn one never is live; Flush forgets expired offers, in memory and in
// the ledger, so that a restart does not bring them back.
func TestOfferExpiry(t *testing.T) {
	w := newWorld(t)
	a, b, c := w.certified(), w.certified(), w.certified()
	now := w.clock.Now()
	shortCert, err := protocol.Seal(protocol.KindCertificate, protocol.Certificate{Version: protocol.CertificateVersion,
		Coordinator: testCoordinatorID.String(), Provider: b.id.String(), Serial: 1, Application: "0123456789ab", Tier: protocol.TierCommunity,
		GPUs: []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}}, CommitmentEnd: now.AddDate(0, 1, 0), IssuedAt: now.Add(-time.Hour), ExpiresAt: now.Add(30 * time.Second)}, testCoordinatorKey)
	if err != nil {
		t.Fatal(err)
	}
	b.cert = shortCert
	for _, raw := range [][]byte{
		w.offer(a, 1, 1_000_000, func(o *protocol.Offer) { o.ExpiresAt = o.IssuedAt.Add(2 * time.Minute) }),
		w.offer(b, 1, 1_000_000, nil),
		w.offer(c, 1, 1_000_000, func(o *protocol.Offer) { o.Withdrawn, o.GPUs = "outside availability window", nil }),
	} {
		if _, _, err := w.book.Accept(raw, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	live := func() int { return len(w.book.Live(w.clock.Now())) }
	if n := live(); n != 2 || testutil.ToFloat64(w.metrics.OffersKnown) != 2 {
		t.Fatalf("%d live offers; want the two not withdrawn", n)
	}
	if so, _ := w.book.Get(c.id); so == nil || so.Offer.Withdrawn == "" {
		t.Fatal("the withdrawal is not held (a renter asking sees why there is nothing to rent)")
	}
	// The gauge follows an offer replaced: withdrawn, then offered again, then withdrawn.
	withdraw := func(o *protocol.Offer) { o.Withdrawn, o.GPUs = "outside availability window", nil }
	for _, step := range []struct {
		raw  []byte
		want float64
	}{{w.offer(c, 2, 1_000_000, nil), 3}, {w.offer(c, 3, 1_000_000, withdraw), 2}} {
		if _, _, err := w.book.Accept(step.raw, "gossip"); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(w.metrics.OffersKnown); got != step.want {
			t.Fatalf("the gauge of live offers says %v; want %v", got, step.want)
		}
	}
	w.clock.Advance(31 * time.Second)
	if n := live(); n != 1 {
		t.Fatalf("%d live offers once a certificate expired; want 1", n)
	}
	if err := w.book.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(w.metrics.OffersKnown); got != 1 {
		t.Fatalf("the gauge of live offers says %v after the flush; want 1", got)
	}
	w.clock.Advance(2 * time.Minute)
	if err := w.book.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 0 {
		t.Fatalf("%d live offers after every expiry", n)
	}
	if so, _ := w.book.Get(a.id); so != nil {
		t.Fatal("Flush kept an expired offer")
	}
	again := NewBook(w.ledger.Offers, w.trust, w.metrics, quietLogger(), w.clock)
	if err := again.Load(); err != nil {
		t.Fatal(err)
	}
	if so, _ := again.Get(a.id); so != nil {
		t.Fatal("an expired offer came back after a restart")
	}
}

// TestRevocations: a trusted coordinator's revocation drops the provider's offer from the
// book, and the revoked certificate is refused from then on, also after a restart; a
// certificate issued after the revocation is not covered. A revocation dated ahead is
// ignored, an untrusted one rejected, one known already accepted without being counted
// again; a node hearing of its own revocation is told.
func TestRevocations(t *testing.T) {
	w := newWorld(t)
	p, other := w.certified(), w.certified()
	ctx := context.Background()
	for _, q := range []provider{p, other} {
		if _, _, err := w.book.Accept(w.offer(q, 1, 1_000_000, nil), "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	stranger, _ := recordtest.NewKey()
	if v := w.cat.ValidateRevocation(ctx, p.id, w.revocation(stranger, p, 0)); v != p2p.Reject {
		t.Fatalf("an untrusted revocation: verdict %v", v)
	}
	if v := w.cat.ValidateRevocation(ctx, p.id, w.revocation(testCoordinatorKey, p, time.Hour)); v != p2p.Ignore {
		t.Fatalf("a revocation dated an hour ahead: verdict %v", v)
	}
	if so, _ := w.book.Get(p.id); so == nil {
		t.Fatal("a refused revocation dropped the offer")
	}
	rev := w.revocation(testCoordinatorKey, p, 0)
	if v := w.cat.ValidateRevocation(ctx, p.id, rev); v != p2p.Accept {
		t.Fatalf("the coordinator's revocation: verdict %v", v)
	}
	if v := w.cat.ValidateRevocation(ctx, p.id, rev); v != p2p.Accept || testutil.ToFloat64(w.metrics.RecordsAccepted.WithLabelValues("revocation", "gossip")) != 1 {
		t.Fatal("a revocation known already is refused or counted again")
	}
	if so, _ := w.book.Get(p.id); so != nil || len(w.book.Live(w.clock.Now())) != 1 {
		t.Fatal("the revoked provider's offer is still held")
	}
	if _, _, err := w.book.Accept(w.offer(p, 2, 1_000_000, nil), "gossip"); protocol.Reason(err) != "revoked" {
		t.Fatalf("an offer with the revoked certificate: %v", err)
	}
	w.clock.Advance(time.Second)
	renewed := p
	renewed.cert = testCertificate(t, testCoordinatorKey, p.id, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}}, w.clock.Now().Add(time.Minute))
	if _, _, err := w.book.Accept(w.offer(renewed, 3, 1_000_000, nil), "gossip"); err != nil {
		t.Fatalf("an offer with a certificate issued after the revocation: %v", err)
	}
	trust, err := NewTrust(w.ledger.Offers, []peer.ID{testCoordinatorID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := protocol.OpenCertificate(p.cert, nil)
	if trust.RevocationOf(old) == nil || len(trust.Revocations()) != 1 {
		t.Fatal("the revocation is forgotten after a restart")
	}
	// The node's own revocation.
	me := provider{key: w.key, id: w.peer.ID}
	told := 0
	w.cat.OnOwnRevocation(func() { told++ })
	if err := w.cat.TakeRevocation(w.revocation(testCoordinatorKey, me, 0), "gossip"); err != nil || told != 1 {
		t.Fatalf("the node's own revocation: %v, told %d times", err, told)
	}
}

// TestDHTValidatorSelect: of the records the DHT returns for a key, the one with the
// highest sequence wins; a key that is not an offer key is refused.
func TestDHTValidatorSelect(t *testing.T) {
	w := newWorld(t)
	p := w.certified()
	v := w.book.DHTValidator()
	values := [][]byte{w.offer(p, 3, 1, nil), []byte("junk"), w.offer(p, 9, 1, nil), w.offer(p, 4, 1, nil)}
	if i, err := v.Select(protocol.OfferKey(p.id), values); err != nil || i != 2 {
		t.Fatalf("selected %d (%v); want the record of seq 9", i, err)
	}
	if _, err := v.Select(protocol.OfferKey(p.id), [][]byte{[]byte("junk")}); err == nil {
		t.Fatal("a record selected among junk")
	}
	if err := v.Validate("/gpunex-offer/not-a-peer", values[0]); err == nil {
		t.Fatal("an offer validated under a key that names no peer")
	}
	if err := v.Validate(protocol.OfferKey(p.id), values[0]); err != nil {
		t.Fatalf("a valid record: %v", err)
	}
}
