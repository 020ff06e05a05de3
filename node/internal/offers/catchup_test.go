package offers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/protocol"
)

// TestCoordinatorCatchesUpMissedOffer: a provider whose offer gossip never brought to its
// coordinator (it published while no one that follows its models heard it) has it fetched
// by the coordinator after answering a probe, and the renters that follow the model receive
// it from the coordinator's gossip. An offer the coordinator received recently is not asked
// for again.
func TestCoordinatorCatchesUpMissedOffer(t *testing.T) {
	coord, prov, renter := newWorld(t), newWorld(t), newWorld(t)
	pub := newPublisher(t, prov, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}, {Model: "A100-80GB", Count: 2}})
	var asked atomic.Int32
	prov.peer.Handle(protocol.OfferProtocol, func(s network.Stream) {
		asked.Add(1)
		pub.HandleOfferStream(s)
	})
	for _, w := range []*world{coord, renter} {
		if err := w.cat.Follow([]string{"L4-24GB"}); err != nil {
			t.Fatal(err)
		}
	}
	// Published before anyone is connected: gossip takes it nowhere.
	if _, err := pub.SetPrice(context.Background(), "L4-24GB", 1_200_000); err != nil {
		t.Fatal(err)
	}
	coord.connect(prov)
	coord.connect(renter)
	if so, _ := coord.book.Get(prov.peer.ID); so != nil {
		t.Fatal("the coordinator holds the offer before catching up")
	}
	// Wait for the renter to be the coordinator's gossip peer on the model's topic.
	for deadline := time.Now().Add(5 * time.Second); !coord.peer.GossipsWith(renter.peer.ID)[protocol.ModelTopic("L4-24GB")]; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the renter never became the coordinator's gossip peer")
		}
	}

	if !coord.cat.CatchUp(context.Background(), prov.peer.ID) {
		t.Fatal("the coordinator did not catch up the provider's offer")
	}
	if so, _ := coord.book.Get(prov.peer.ID); so == nil || so.Offer.Seq != pub.Current().Offer.Seq {
		t.Fatal("the caught-up offer is not the provider's current one in the coordinator's book")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if so, _ := renter.book.Get(prov.peer.ID); so != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renter never received the caught-up offer from the coordinator's gossip")
		}
	}
	if n := testutil.ToFloat64(coord.metrics.OffersCaughtUp); n != 1 {
		t.Fatalf("offers caught up counted: %v, want 1", n)
	}

	// Held and recent: not asked again.
	before := asked.Load()
	if coord.cat.CatchUp(context.Background(), prov.peer.ID) || asked.Load() != before {
		t.Fatal("the coordinator asked again for an offer it received moments ago")
	}
	// Signed longer ago than 1.5 republish intervals: a republish was missed, asked again.
	coord.clock.Advance(coord.cat.cfg.Republish.Duration * 2)
	coord.cat.CatchUp(context.Background(), prov.peer.ID)
	if asked.Load() != before+1 {
		t.Fatal("the coordinator did not ask again for an offer older than 1.5 republish intervals")
	}
}
