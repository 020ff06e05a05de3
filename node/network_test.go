package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// TestOfferNetwork runs 20 nodes (a coordinator, 16 providers, a provider on a fake clock,
// a renter, and a hostile peer) and checks what a renter sees: every offer by model and by
// region, a price change, an offer leaving when its window closes and when its provider
// stops, and never a forged or replayed offer.
func TestOfferNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn := newTestNet(t)
	const nProviders = 16
	var providers []*Node
	for i := 0; i < nProviders; i++ {
		providers = append(providers, tn.add(providerConfig(i), nil))
	}
	// A provider whose availability window closes three minutes from now (in its own
	// clock, which the test moves).
	now := time.Now().UTC()
	start, end := now.Add(-time.Hour).Truncate(time.Minute), now.Add(3*time.Minute).Truncate(time.Minute)
	window := fmt.Sprintf("%s %s-%s", start.Weekday().String()[:3], start.Format("15:04"), end.Format("15:04"))
	clock := clock.NewFake(now)
	wcfg := providerConfig(nProviders)
	wcfg.Provider.Availability = config.AvailabilityConfig{Timezone: "UTC", Windows: []string{window}}
	windowed := tn.add(wcfg, clock)
	renter := tn.add(testConfig(config.RoleRenter), nil)

	all := append(append([]*Node{}, providers...), windowed)
	// Every provider's offer is found by model and by region.
	for _, m := range testModels {
		want := map[string]bool{}
		for i, p := range all {
			if testModels[i%len(testModels)].model == m.model {
				want[p.ID().String()] = true
			}
		}
		eventually(t, 20*time.Second, "search by model "+m.model, func() (bool, string) {
			got := providersIn(search(t, renter, api.SearchFilter{Model: m.model}))
			for id := range want {
				if _, ok := got[id]; !ok {
					return false, fmt.Sprintf("%d of %d providers", len(got), len(want))
				}
			}
			for id, r := range got {
				if !want[id] || r.Model != m.model {
					t.Fatalf("search for %s returned %s (%s)", m.model, id, r.Model)
				}
			}
			return true, ""
		})
	}
	for _, region := range testRegions {
		rows := search(t, renter, api.SearchFilter{Region: region})
		n := 0
		for i := range all {
			if testRegions[i%len(testRegions)] == region {
				n++
			}
		}
		if len(rows) != n {
			t.Fatalf("search in %s: %d offers; want %d", region, len(rows), n)
		}
		for _, r := range rows {
			if r.Region != region {
				t.Fatalf("search in %s returned an offer in %s", region, r.Region)
			}
		}
	}
	// By merit by default, by price on request, and filters combine.
	rows := search(t, renter, api.SearchFilter{})
	if len(rows) != len(all) {
		t.Fatalf("unfiltered search: %d offers; want %d", len(rows), len(all))
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].Rank.Merit > rows[i-1].Rank.Merit {
			t.Fatalf("not sorted by merit: %v before %v", rows[i-1].Rank, rows[i].Rank)
		}
	}
	rows = search(t, renter, api.SearchFilter{Sort: "price"})
	for i := 1; i < len(rows); i++ {
		if rows[i].PriceMicroUSDC < rows[i-1].PriceMicroUSDC {
			t.Fatalf("not sorted by price: %s before %s", rows[i-1].PriceUSDC, rows[i].PriceUSDC)
		}
	}
	for _, r := range search(t, renter, api.SearchFilter{MaxPrice: 2_500_000, MinGPUs: 4}) {
		if r.PriceMicroUSDC > 2_500_000 || r.GPUs < 4 {
			t.Fatalf("filter ignored: %+v", r)
		}
	}

	// A renter that joins now, after every offer was gossiped, has them all at once: it
	// pulls the catalogue from its peers on joining (before any search, before any republish).
	eventually(t, 10*time.Second, "every offer gossiped to the bootstrap node", func() (bool, string) {
		n := len(tn.boot.book.Live(time.Now()))
		return n == len(all), fmt.Sprintf("%d of %d offers", n, len(all))
	})
	late := tn.add(testConfig(config.RoleRenter), nil)
	eventually(t, 10*time.Second, "late renter synced", func() (bool, string) {
		n := len(late.book.Live(time.Now()))
		return n == len(all), fmt.Sprintf("%d of %d offers", n, len(all))
	})
	// Providers may also push their records to the newcomer's DHT store, so the sync may
	// bring nothing new; it must still have delivered every offer.
	eventually(t, 10*time.Second, "late renter's sync delivered every offer", func() (bool, string) {
		v := testutil.ToFloat64(late.metrics.OfferSyncRecords)
		return v >= float64(len(all)), fmt.Sprintf("%v of %d", v, len(all))
	})

	// A price change reaches the renter.
	target := providers[3]
	before, _ := target.book.Get(target.ID())
	oldRaw := before.Raw
	model := before.Offer.GPUs[0].Model
	if _, err := target.publisher.SetPrice(context.Background(), model, 7_770_000); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "price change seen", func() (bool, string) {
		r, ok := providersIn(search(t, renter, api.SearchFilter{Model: model}))[target.ID().String()]
		return ok && r.PriceUSDC == "7.77", fmt.Sprintf("%+v", r)
	})

	// A hostile peer gossips a replay of the old offer, a tampered one, and one forged in
	// another provider's name; it also tries to store a forged offer in the DHT.
	evil := newEvilPeer(t, tn)
	victim := providers[5]
	vso, _ := victim.book.Get(victim.ID())
	forgedOffer := vso.Offer
	forgedOffer.Seq += 1000
	forgedOffer.GPUs = append([]protocol.OfferGPUs{}, forgedOffer.GPUs...)
	forgedOffer.GPUs[0].PricePerGPUHour = 1 // bait
	forged, err := protocol.Seal(protocol.KindOffer, forgedOffer, evil.key)
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte{}, vso.Raw...)
	tampered[len(tampered)-80] ^= 1
	rejectedBefore := testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues("offer", "gossip", "replay"))
	evil.publishTo(t, protocol.ModelTopic(model), oldRaw)
	evil.publishTo(t, protocol.ModelTopic(forgedOffer.GPUs[0].Model), forged)
	evil.publishTo(t, protocol.ModelTopic(forgedOffer.GPUs[0].Model), tampered)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = evil.dht.PutValue(ctx, protocol.OfferKey(victim.ID()), forged)
	cancel()
	t.Logf("hostile DHT put: %v", err)
	eventually(t, 5*time.Second, "replay counted", func() (bool, string) {
		v := testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues("offer", "gossip", "replay"))
		return v > rejectedBefore, fmt.Sprint(v)
	})
	for _, r := range search(t, renter, api.SearchFilter{}) {
		if r.PriceMicroUSDC == 1 {
			t.Fatalf("forged offer shown: %+v", r)
		}
		if r.Provider == target.ID().String() && r.PriceUSDC != "7.77" {
			t.Fatalf("replayed offer shown: %+v", r)
		}
	}
	rejected := 0.0
	for _, n := range tn.nodes {
		rejected += testutil.ToFloat64(n.metrics.RecordsRejected.WithLabelValues("offer", "gossip", "wrong_signer")) +
			testutil.ToFloat64(n.metrics.RecordsRejected.WithLabelValues("offer", "gossip", "bad_signature")) +
			testutil.ToFloat64(n.metrics.RecordsRejected.WithLabelValues("offer", "dht_validator", "wrong_signer"))
	}
	if rejected == 0 {
		t.Fatal("forged records were not counted as rejected")
	}
	// The renter's gossip scoring penalises the peer that sent them.
	eventually(t, 5*time.Second+p2p.ScoreInspectEvery, "hostile peer penalised", func() (bool, string) {
		s, ok := renter.peer.GossipScore(evil.id)
		return ok && s < 0, fmt.Sprint(s, ok)
	})

	// The window closes: the offer is withdrawn and leaves the renter's search.
	// Other loops wait on the same clock: should the publisher set its timer just after the
	// clock moved, that timer is due a republish interval later, so the clock moves on by
	// that much while the test waits (the window stays closed).
	clock.Advance(end.Sub(now) + time.Second)
	eventually(t, 5*time.Second, "offer gone after its window closed", func() (bool, string) {
		_, ok := providersIn(search(t, renter, api.SearchFilter{}))[windowed.ID().String()]
		if ok {
			clock.Advance(wcfg.Offers.Republish.Duration)
		}
		return !ok, "still listed"
	})
	if so := windowed.publisher.Current(); so.Offer.Withdrawn == "" {
		t.Fatal("offer outside the window is not marked withdrawn")
	}

	// A provider stops: its offer disappears.
	gone := providers[7]
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	gone.Close(ctx)
	cancel()
	eventually(t, 5*time.Second, "offer gone after its provider stopped", func() (bool, string) {
		_, ok := providersIn(search(t, renter, api.SearchFilter{}))[gone.ID().String()]
		return !ok, "still listed"
	})
}

// evilPeer speaks the gpunex protocols without checking anything.
type evilPeer struct {
	id     peer.ID
	key    crypto.PrivKey
	dht    *dht.IpfsDHT
	ps     *pubsub.PubSub
	topics map[string]*pubsub.Topic
	// nodes are the test network's nodes when the peer was made: a topic is published to
	// once each of them that subscribes to it lists it.
	nodes []*Node
}

// acceptAll lets the hostile peer's DHT store anything.
type acceptAll struct{}

func (acceptAll) Validate(string, []byte) error        { return nil }
func (acceptAll) Select(string, [][]byte) (int, error) { return 0, nil }

func newEvilPeer(t *testing.T, tn *testNet) *evilPeer {
	h, sk := newHost(t)
	t.Cleanup(func() { h.Close() })
	ctx := context.Background()
	// Connect to everyone so that its gossip reaches the renter directly.
	for _, n := range tn.nodes {
		h.Connect(ctx, peer.AddrInfo{ID: n.ID(), Addrs: n.Host().Addrs()})
	}
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithFloodPublish(true))
	if err != nil {
		t.Fatal(err)
	}
	d, err := dht.New(h, dht.Mode(dht.ModeServer), dht.ProtocolPrefix(protocol.DHTProtocolPrefix),
		dht.Validator(record.NamespacedValidator{protocol.OfferNamespace: acceptAll{}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	<-d.RefreshRoutingTable()
	return &evilPeer{h.ID(), sk, d, ps, map[string]*pubsub.Topic{}, slices.Clone(tn.nodes)}
}

// subscribes says whether a node subscribes to a topic: to an offers topic if it follows
// it (renters and coordinators: providers follow none), to the others always.
func subscribes(n *Node, name string) bool {
	if strings.HasPrefix(name, "/gpunex/offers/") {
		return slices.Contains(n.catalogue.Followed(), name)
	}
	return true
}

// publishTo publishes raw on a topic, joining it first.
func (e *evilPeer) publishTo(t *testing.T, name string, raw []byte) {
	t.Helper()
	topic := e.topics[name]
	if topic == nil {
		var err error
		if topic, err = e.ps.Join(name); err != nil {
			t.Fatal(err)
		}
		e.topics[name] = topic
		// Gossip only reaches peers that know the new peer joined the topic; every node
		// that subscribes, not just one: a node that rejects a record does not forward it,
		// so a record published before the renter knows the peer may never reach it.
		eventually(t, 15*time.Second, "every node in the hostile peer's topic view", func() (bool, string) {
			peers := topic.ListPeers()
			for _, n := range e.nodes {
				if subscribes(n, name) && !slices.Contains(peers, n.ID()) {
					return false, fmt.Sprintf("%s missing from %v", n.ID(), peers)
				}
			}
			return true, ""
		})
	}
	if err := topic.Publish(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
}

// TestJunkGossipCostsItsSender: on every topic, records only their sender could have made
// (malformed, a self-certified offer, a score dated far in the future) are rejected and
// drive the sender's gossip score below the graylist threshold on the node that received
// them; stale records an honest relay may forward (an expired score) cost nothing within
// the budget; honest peers keep their score.
func TestJunkGossipCostsItsSender(t *testing.T) {
	tn := newTestNet(t)
	coord := tn.boot
	renter := tn.add(testConfig(config.RoleRenter), nil)
	evil := newEvilPeer(t, tn)
	now := time.Now().UTC()

	// Stale but well made: ignored, free.
	stale, err := protocol.Seal(protocol.KindScore, protocol.ScoreRecord{Version: protocol.ScoreVersion, Coordinator: evil.id.String(),
		Provider: evil.id.String(), Seq: 1, IssuedAt: now.Add(-48 * time.Hour), ExpiresAt: now.Add(-24 * time.Hour)}, evil.key)
	if err != nil {
		t.Fatal(err)
	}
	ignoredBefore := testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues("score", "gossip", "expired"))
	evil.publishTo(t, protocol.ScoresTopic, stale)
	eventually(t, 15*time.Second+p2p.ScoreInspectEvery, "the expired record seen and scored", func() (bool, string) {
		_, scored := renter.peer.GossipScore(evil.id)
		return scored && testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues("score", "gossip", "expired")) > ignoredBefore, ""
	})
	time.Sleep(p2p.ScoreInspectEvery + 100*time.Millisecond) // one more score inspection, after the record
	if s, _ := renter.peer.GossipScore(evil.id); s < 0 {
		t.Fatalf("an expired record cost its relay %v", s)
	}

	// Junk on each topic.
	selfCert, err := protocol.Seal(protocol.KindCertificate, protocol.Certificate{Version: protocol.CertificateVersion, Coordinator: evil.id.String(),
		Provider: evil.id.String(), Serial: 1, Application: "0123456789ab", Tier: protocol.TierCommunity, IssuedAt: now, ExpiresAt: now.Add(time.Hour),
		GPUs: []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 1}}}, evil.key)
	if err != nil {
		t.Fatal(err)
	}
	offer := protocol.Offer{Version: protocol.OfferVersion, Provider: evil.id.String(), Seq: 1, IssuedAt: now, ExpiresAt: now.Add(10 * time.Minute),
		Region: "eu-west", GPUs: []protocol.OfferGPUs{{Model: "L4-24GB", Count: 1, VRAMGB: 24, PricePerGPUHour: 1}}, Certificate: selfCert}
	selfCertified, err := protocol.Seal(protocol.KindOffer, offer, evil.key)
	if err != nil {
		t.Fatal(err)
	}
	farFuture, err := protocol.Seal(protocol.KindScore, protocol.ScoreRecord{Version: protocol.ScoreVersion, Coordinator: evil.id.String(),
		Provider: evil.id.String(), Seq: 1, IssuedAt: now.Add(24 * time.Hour), ExpiresAt: now.Add(48 * time.Hour)}, evil.key)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		evil.publishTo(t, protocol.ModelTopic("L4-24GB"), selfCertified)
		evil.publishTo(t, protocol.RevocationsTopic, []byte(fmt.Sprintf("junk revocation %d", i)))
		evil.publishTo(t, protocol.ScoresTopic, farFuture)
		evil.publishTo(t, protocol.MarketTopic, []byte(fmt.Sprintf("junk market statistics %d", i)))
	}
	for _, victim := range []*Node{renter, coord} {
		eventually(t, 10*time.Second+p2p.ScoreInspectEvery, "hostile peer graylisted", func() (bool, string) {
			s, ok := victim.peer.GossipScore(evil.id)
			return ok && s < -1000, fmt.Sprint(s, ok)
		})
	}
	for _, reason := range []string{"self_signed", "far_future", "malformed"} {
		n := 0.0
		for _, kind := range []string{"offer", "score", "revocation", "market-stats"} {
			n += testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues(kind, "gossip", reason))
		}
		if n == 0 {
			t.Errorf("no %s record counted as rejected", reason)
		}
	}
	if s, ok := renter.peer.GossipScore(coord.ID()); ok && s < 0 {
		t.Fatalf("the honest coordinator's score fell to %v", s)
	}
}
