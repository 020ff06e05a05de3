package node

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// TestPreviousReleaseRenterKeepsItsOffers: a renter of the previous release, which follows
// the one offers topic of that release and asks for a catalogue sync without a request,
// still receives this release's offers (providers publish on that topic too, and the
// coordinator forwards it) and gets them all by sync; a provider of this release holds no
// one's offer but its own, while this release's renter holds every one.
func TestPreviousReleaseRenterKeepsItsOffers(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn := newTestNet(t)
	a, b := tn.add(providerConfig(0), nil), tn.add(providerConfig(1), nil)
	renter := tn.add(testConfig(config.RoleRenter), nil)

	// The old renter: gossipsub on the old topic, connected to the coordinator only.
	h, _ := newHost(t)
	t.Cleanup(func() { h.Close() })
	ctx := context.Background()
	if err := h.Connect(ctx, peer.AddrInfo{ID: tn.boot.ID(), Addrs: tn.boot.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	ps, err := pubsub.NewGossipSub(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(protocol.OffersTopic)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := topic.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	gossiped := make(chan struct{})
	go func() {
		defer close(gossiped)
		got := map[peer.ID]bool{}
		for len(got) < 2 {
			m, err := sub.Next(ctx)
			if err != nil {
				return
			}
			if so, err := protocol.CheckOffer(m.Data, time.Now()); err == nil && (so.Signer == a.ID() || so.Signer == b.ID()) {
				got[so.Signer] = true
				received.Store(int64(len(got)))
			}
		}
	}()
	// Republishes come every few minutes: have the providers publish now.
	for deadline := time.Now().Add(20 * time.Second); ; {
		a.publisher.Poke()
		b.publisher.Poke()
		select {
		case <-gossiped:
		case <-time.After(time.Second):
			if time.Now().Before(deadline) {
				continue
			}
			t.Fatalf("the old renter received %d of 2 offers on %s", received.Load(), protocol.OffersTopic)
		}
		break
	}

	// Its catalogue sync, without a request, brings every offer.
	s, err := h.NewStream(ctx, tn.boot.ID(), libp2pprotocol.ID(protocol.OfferSyncProtocol))
	if err != nil {
		t.Fatal(err)
	}
	s.CloseWrite()
	var synced []peer.ID
	if err := protocol.ReadSyncFrames(bufio.NewReader(s), func(raw []byte) {
		if so, err := protocol.CheckOffer(raw, time.Now()); err == nil {
			synced = append(synced, so.Signer)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(synced, a.ID()) || !slices.Contains(synced, b.ID()) {
		t.Fatalf("the old renter's sync brought %v", synced)
	}

	eventually(t, 15*time.Second, "this release's renter holds both offers", func() (bool, string) {
		x, _ := renter.book.Get(a.ID())
		y, _ := renter.book.Get(b.ID())
		return x != nil && y != nil, fmt.Sprint(x != nil, y != nil)
	})
	for _, p := range []*Node{a, b} {
		if live := p.book.Live(time.Now()); len(live) != 1 || live[0].Signer != p.ID() {
			t.Fatalf("a provider holds %d offers, want its own only", len(live))
		}
	}
}
