package offers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// TestOffersTravelByModel: a provider's offer reaches, by gossip alone, the renters that
// follow one of its models and no other; a provider receives no one's offer (it publishes
// without subscribing), so its book holds its own only; an offer sent on the topic of a
// model it does not offer is rejected and counted, and never reaches the book.
func TestOffersTravelByModel(t *testing.T) {
	provA, provB := newWorld(t), newWorld(t)
	l4Renter, h100Renter := newWorld(t), newWorld(t)
	pubA := newPublisher(t, provA, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}, {Model: "A100-80GB", Count: 2}})
	pubB := newPublisher(t, provB, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}, {Model: "A100-80GB", Count: 2}})
	if err := l4Renter.cat.Follow([]string{"l4-24gb"}); err != nil {
		t.Fatal(err)
	}
	if err := h100Renter.cat.Follow([]string{"H100-80GB"}); err != nil {
		t.Fatal(err)
	}
	all := []*world{provA, provB, l4Renter, h100Renter}
	for i, w := range all {
		for _, v := range all[i+1:] {
			w.connect(v)
		}
	}
	if provA.cat.Following() || !l4Renter.cat.Following() {
		t.Fatal("a provider should follow no offer topic, a renter its models'")
	}

	price := protocol.MicroUSDC(1_000_000)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		price += 10_000 // a new record each round: gossip drops a copy it has seen
		for _, p := range []*Publisher{pubA, pubB} {
			if _, err := p.SetPrice(context.Background(), "L4-24GB", price); err != nil {
				t.Fatal(err)
			}
		}
		a, _ := l4Renter.book.Get(provA.peer.ID)
		b, _ := l4Renter.book.Get(provB.peer.ID)
		if a != nil && b != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the L4 renter never received both providers' offers by gossip: %v, %v", a != nil, b != nil)
		}
	}
	// What was published reached the L4 renter; give the rest the same time to arrive.
	time.Sleep(time.Second)
	if n := len(h100Renter.book.Live(h100Renter.clock.Now())); n != 0 {
		t.Fatalf("the H100 renter holds %d offers of other models", n)
	}
	for _, w := range []*world{provA, provB} {
		live := w.book.Live(w.clock.Now())
		if len(live) != 1 || live[0].Signer != w.peer.ID {
			t.Fatalf("a provider's book holds %d offers, want its own only", len(live))
		}
	}

	// An L4 and A100 offer on the H100 topic: rejected, counted, not kept.
	raw := pubA.Current().Raw
	if v := h100Renter.cat.modelValidator("H100-80GB")(context.Background(), provA.peer.ID, raw); v != p2p.Reject {
		t.Fatalf("an offer on another model's topic: verdict %v, want Reject", v)
	}
	if n := testutil.ToFloat64(h100Renter.metrics.RecordsRejected.WithLabelValues("offer", "gossip", "wrong_topic")); n != 1 {
		t.Fatalf("offers on the wrong topic counted: %v", n)
	}
	if so, _ := h100Renter.book.Get(provA.peer.ID); so != nil {
		t.Fatal("an offer from the wrong topic reached the book")
	}
	// On the topic of a model it offers, the same record is taken.
	if v := h100Renter.cat.modelValidator("A100-80GB")(context.Background(), provA.peer.ID, raw); v != p2p.Accept {
		t.Fatalf("the offer on its own model's topic: verdict %v", v)
	}
}

// TestTopicsOfAProvider: a provider publishes on each declared model's topic once, and on
// the previous release's topic, whose nodes follow nothing else.
func TestTopicsOfAProvider(t *testing.T) {
	got := topicsOf([]string{"L4-24GB", "l4-24gb", "A100-80GB"})
	want := []string{protocol.OffersTopic, protocol.ModelTopic("L4-24GB"), protocol.ModelTopic("A100-80GB")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("topics %v, want %v", got, want)
	}
}

// TestOfferBelongsToItsModelsTopics: an offer travels on the topics of the models it
// offers and of those its certificate certifies (so that a model it stopped offering
// hears of it), and on no other: a provider declaring a model it is not certified for
// does not publish there, where it would be rejected and scored down.
func TestOfferBelongsToItsModelsTopics(t *testing.T) {
	w := newWorld(t)
	p := w.certified() // certified for L4-24GB only
	so, err := protocol.CheckOffer(w.offer(p, 1, 1_000_000, func(o *protocol.Offer) {
		o.GPUs = append(o.GPUs, protocol.OfferGPUs{Model: "A100-80GB", Count: 1, VRAMGB: 80, PricePerGPUHour: 2_000_000})
	}), w.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	so.Cert = &protocol.SignedCertificate{Certificate: protocol.Certificate{GPUs: []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}, {Model: "h100-80gb", Count: 1}}}}
	for model, want := range map[string]bool{"L4-24GB": true, "A100-80GB": true, "H100-80GB": true, "L40S-48GB": false} {
		if got := belongsTo(so, model); got != want {
			t.Errorf("an offer of L4 and A100, certified for L4 and H100, on the %s topic: %v, want %v", model, got, want)
		}
	}
	so.Offer.GPUs = nil // withdrawn: on its certified models' topics
	if !belongsTo(so, "H100-80GB") || belongsTo(so, "A100-80GB") {
		t.Error("a withdrawal should travel on its certified models' topics only")
	}
}
