package p2p

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// failingOpens is a host whose first stream openings fail, as a busy coordinator's do when
// identify or the protocol negotiation runs past libp2p's timeout.
type failingOpens struct {
	host.Host
	left atomic.Int32
}

func (h *failingOpens) NewStream(ctx context.Context, id peer.ID, protos ...protocol.ID) (network.Stream, error) {
	if h.left.Add(-1) >= 0 {
		return nil, errors.New("identify failed to complete: context deadline exceeded")
	}
	return h.Host.NewStream(ctx, id, protos...)
}

// subscribedOn starts gossipsub on h and subscribes to topic.
func subscribedOn(ctx context.Context, t *testing.T, h host.Host, topic string) *pubsub.Subscription {
	t.Helper()
	ps, err := pubsub.NewGossipSub(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	joined, err := ps.Join(topic)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := joined.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func loopbackHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// A coordinator whose gossip stream to a provider fails to open when the provider connects
// still receives the provider's offers: the opening is tried again while they stay
// connected. Without the new tries, the provider never learns what the coordinator
// follows, and its publishes never reach it.
func TestGossipStreamTriedAgain(t *testing.T) {
	saved := gossipStreamWaits
	t.Cleanup(func() { gossipStreamWaits = saved })
	for _, tc := range []struct {
		name    string
		waits   []time.Duration
		arrives bool
	}{
		{"tried again", []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}, true},
		{"without new tries", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gossipStreamWaits = tc.waits
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const topic = "/gpunex/offers/model/1/H100-80GB"
			coordHost := &failingOpens{Host: loopbackHost(t)}
			coordHost.left.Store(2)
			var counts gossipState
			sub := subscribedOn(ctx, t, newGossipHost(coordHost, &counts), topic)
			provHost := loopbackHost(t)
			provPS, err := pubsub.NewGossipSub(ctx, newGossipHost(provHost, &gossipState{}))
			if err != nil {
				t.Fatal(err)
			}
			provTopic, err := provPS.Join(topic) // publishes only, as a provider does
			if err != nil {
				t.Fatal(err)
			}
			if err := provHost.Connect(ctx, peer.AddrInfo{ID: coordHost.ID(), Addrs: coordHost.Addrs()}); err != nil {
				t.Fatal(err)
			}
			// Publish as a provider does, again each 200 ms, for 3 s.
			got := make(chan []byte, 1)
			go func() {
				if m, err := sub.Next(ctx); err == nil {
					got <- m.Data
				}
			}()
			deadline := time.After(3 * time.Second)
			arrived := false
		publishing:
			for {
				if err := provTopic.Publish(ctx, []byte("offer")); err != nil {
					t.Fatal(err)
				}
				select {
				case <-got:
					arrived = true
					break publishing
				case <-time.After(200 * time.Millisecond):
				case <-deadline:
					break publishing
				}
			}
			if arrived != tc.arrives {
				t.Fatalf("the provider's offer reached the coordinator: %v, want %v (provider's gossip peers on the topic: %v)", arrived, tc.arrives, provTopic.ListPeers())
			}
			if tc.arrives && counts.retries.Load() != 2 {
				t.Fatalf("%d openings tried again, want 2", counts.retries.Load())
			}
		})
	}
}

// A peer that speaks none of the protocols asked for is not tried again.
func TestGossipStreamUnsupportedNotTriedAgain(t *testing.T) {
	a, b := loopbackHost(t), loopbackHost(t)
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
	var counts gossipState
	if _, err := newGossipHost(a, &counts).NewStream(context.Background(), b.ID(), "/nobody/1.0.0"); err == nil {
		t.Fatal("a stream opened on a protocol the peer does not speak")
	}
	if counts.retries.Load() != 0 {
		t.Fatalf("%d openings tried again for a protocol the peer does not speak", counts.retries.Load())
	}
}
