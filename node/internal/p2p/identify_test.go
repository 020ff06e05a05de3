package p2p

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	identifypb "github.com/libp2p/go-libp2p/p2p/protocol/identify/pb"
	"github.com/libp2p/go-msgio/pbio"
)

// A connection whose identify exchange fails is counted, with its reason, so that an
// operator (gpunex_identify_failures_total) and the scale harness can tell why a connected
// peer stays out of gossip.
func TestIdentifyFailureCounted(t *testing.T) {
	node := newLoopbackPeer(t)
	mute := loopbackHost(t)
	mute.RemoveStreamHandler(identify.ID) // answers no identify request
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connectUntilIdentifyFails(ctx, t, node, mute)
	if got := node.IdentifyFailedWith(mute.ID()); got == "" {
		t.Fatal("no reason kept for the peer whose identify failed")
	}
	if got := node.IdentifyFailureReasons(); len(got) != 1 {
		t.Fatalf("reasons %v, want one", got)
	}
	if got := node.IdentifyFailedWith(node.ID); got != "" {
		t.Fatalf("a reason kept for a peer never met: %q", got)
	}
}

// gossipWatching returns once node's gossipsub takes new peers in only as identify names
// their protocols. When it starts, gossipsub takes in every peer already connected, and
// opens its stream to each without identify: a connection made before that start (a
// loaded test machine runs the goroutine late) would be gossiping whatever its identify
// did. So a helper peer is connected and published to until it receives, which shows the
// start has passed.
func gossipWatching(ctx context.Context, t *testing.T, node *Peer) {
	t.Helper()
	const topic = "/gpunex/test/warm-up"
	helper := loopbackHost(t)
	sub := subscribedOn(ctx, t, helper, topic)
	joined, err := node.ps.Join(topic)
	if err != nil {
		t.Fatal(err)
	}
	defer joined.Close()
	// A connection whose identify failed (a loaded machine) carries no gossip, and this
	// helper is not a bootstrap peer, whose connections the node would replace: the test
	// replaces it every 2 s instead.
	var connected time.Time
	for {
		if time.Since(connected) > 2*time.Second {
			node.Host.Network().ClosePeer(helper.ID())
			if err := node.Host.Connect(ctx, peer.AddrInfo{ID: helper.ID(), Addrs: helper.Addrs()}); err != nil {
				t.Fatal(err)
			}
			connected = time.Now()
		}
		if err := joined.Publish(ctx, []byte("warm-up")); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := sub.Next(rctx)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the node's gossip never reached a helper peer")
		}
	}
}

// connectUntilIdentifyFails connects node to h and waits until node counts a failed
// identify.
func connectUntilIdentifyFails(ctx context.Context, t *testing.T, node *Peer, h host.Host) {
	t.Helper()
	if err := node.Host.Connect(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	for node.IdentifyFailures() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the failed identify was not counted")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// overloadedIdentify makes h answer its first identify requests (left of them) by
// resetting them, as an overloaded coordinator's ran out of time in the scale harness, and
// the later ones with its protocols; only from peer "from" when it is set (other peers'
// requests are answered). The handler is set once, before any peer connects, so that
// none of h's protocols changes (which would make h push its identify to its peers, a
// path an overloaded coordinator does not take).
func overloadedIdentify(t *testing.T, h host.Host, from peer.ID, left int32) {
	t.Helper()
	key, err := crypto.MarshalPublicKey(h.Peerstore().PubKey(h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	var failing atomic.Int32
	failing.Store(left)
	h.SetStreamHandler(identify.ID, func(s network.Stream) {
		if (from == "" || s.Conn().RemotePeer() == from) && failing.Add(-1) >= 0 {
			_ = s.Reset()
			return
		}
		msg := &identifypb.Identify{PublicKey: key}
		for _, p := range h.Mux().Protocols() {
			msg.Protocols = append(msg.Protocols, string(p))
		}
		for _, a := range h.Addrs() {
			msg.ListenAddrs = append(msg.ListenAddrs, a.Bytes())
		}
		_ = pbio.NewDelimitedWriter(s).WriteMsg(msg)
		_ = s.Close()
	})
}

// A node whose identify with its coordinator failed on both ends (both overloaded) is out
// of the coordinator's gossip: what it publishes does not reach the coordinator, even once
// both answer identify again, because identify is not tried again on a connection. The
// node replaces the connection: identify runs on the new one and gossip flows, and again (a
// while later) when the new connection's identify fails too. Only a bootstrap peer's
// connections are replaced.
func TestUnidentifiedConnectionReplaced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failures  int32 // identify requests the coordinator fails
		wait      time.Duration
		bootstrap bool
		arrives   bool
		replaced  int64
	}{
		{"replaced", 1, 100 * time.Millisecond, true, true, 1},
		{"failing again on the new connection", 2, 100 * time.Millisecond, true, true, 2},
		{"left as it was", 1, time.Hour, true, false, 0},
		{"not a bootstrap peer", 1, 100 * time.Millisecond, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			const topic = "/gpunex/offers/model/1/H100-80GB"
			coord := loopbackHost(t)
			overloadedIdentify(t, coord, "", tc.failures)
			sub := subscribedOn(ctx, t, coord, topic)
			node := newLoopbackPeer(t)
			// The coordinator's identify of the node fails too: had it not, the coordinator's
			// gossip stream would have taken it into the node's gossip (the next test).
			overloadedIdentify(t, node.Host, coord.ID(), tc.failures)
			node.identify.retryAfter.Store(int64(tc.wait))
			// The coordinator's setup changed its protocols just now, and libp2p pushes such a
			// change to the connected peers a moment later: a push reaching the node after it
			// connects would name the coordinator's protocols without identify, a path an
			// overloaded coordinator does not take (it made this test pass by chance).
			node.Host.RemoveStreamHandler(identify.IDPush)
			node.identify.replaceEvery.Store(int64(time.Second))
			gossipWatching(ctx, t, node)
			nodeTopic, err := node.ps.Join(topic)
			if err != nil {
				t.Fatal(err)
			}
			if tc.bootstrap {
				node.Host.ConnManager().Protect(coord.ID(), bootstrapProtection)
			}
			connectUntilIdentifyFails(ctx, t, node, coord)
			arrived := publishedUntilReceived(ctx, t, nodeTopic, sub)
			if arrived != tc.arrives {
				ps, _ := node.Host.Peerstore().GetProtocols(coord.ID())
				t.Fatalf("a publication reached the coordinator: %v, want %v (connections replaced: %d; the node's connections to the coordinator %d, the coordinator's protocols it learnt %d, its identify failures %d)",
					arrived, tc.arrives, node.IdentifyReplacements(), len(node.Host.Network().ConnsToPeer(coord.ID())), len(ps), node.IdentifyFailures())
			}
			if got := node.IdentifyReplacements(); got != tc.replaced {
				t.Fatalf("connections replaced %d times, want %d", got, tc.replaced)
			}
		})
	}
}

// A peer whose identify failed on one end only is taken into that end's gossip by the
// gossip stream it opens. Over QUIC at 300 providers, providers stayed out of their
// coordinator's gossip for minutes this way: each had identified the coordinator and
// opened its gossip stream, the coordinator's identify of each had run out of time, so the
// coordinator never opened its own stream and the provider never learnt that it follows
// the offers' topics: the provider's offer, published to the topic's subscribers it knew,
// reached nobody. Here the coordinator's identify of the provider fails: the provider's
// publications reach it anyway, with no connection replaced. Also when the provider comes
// back on a new connection whose identify fails, the peerstore still naming its protocols
// from the earlier one (libp2p keeps them a minute).
func TestGossipPeerTakenInByItsStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		back bool // gossip flowed on an earlier connection, closed
	}{
		{"identify failed", false},
		{"back on a new connection", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			const topic = "/gpunex/offers/model/1/H100-80GB"
			coord := newLoopbackPeer(t)
			coord.gossip.grace.Store(int64(200 * time.Millisecond))
			prov := loopbackHost(t)
			if !tc.back {
				overloadedIdentify(t, prov, coord.ID, 1_000)
			}
			provPS, err := pubsub.NewGossipSub(ctx, prov)
			if err != nil {
				t.Fatal(err)
			}
			provTopic, err := provPS.Join(topic) // publishes without subscribing, as a provider does
			if err != nil {
				t.Fatal(err)
			}
			gossipWatching(ctx, t, coord)
			coordTopic, err := coord.ps.Join(topic)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := coordTopic.Subscribe()
			if err != nil {
				t.Fatal(err)
			}
			if tc.back {
				if err := coord.Host.Connect(ctx, peer.AddrInfo{ID: prov.ID(), Addrs: prov.Addrs()}); err != nil {
					t.Fatal(err)
				}
				if !publishedUntilReceived(ctx, t, provTopic, sub) {
					t.Fatal("no gossip on the first connection")
				}
				coord.Host.Network().ClosePeer(prov.ID())
				for len(prov.Network().ConnsToPeer(coord.ID)) > 0 || slices.Contains(coord.ps.ListPeers(""), prov.ID()) {
					if ctx.Err() != nil {
						t.Fatal("still connected after closing")
					}
					time.Sleep(10 * time.Millisecond)
				}
				// Set while the provider has no peer: the change pushes identify to none.
				overloadedIdentify(t, prov, coord.ID, 1_000)
			}
			// The warm-up's helper may have been taken in by its stream too (its identify
			// failing on a loaded machine): only the provider is counted here.
			before := coord.GossipPeersTakenIn()
			connectUntilIdentifyFails(ctx, t, coord, prov)
			if !publishedUntilReceived(ctx, t, provTopic, sub) {
				t.Fatalf("the provider's publications never reached the coordinator (peers taken in by their stream: %d)", coord.GossipPeersTakenIn()-before)
			}
			if got := coord.GossipPeersTakenIn() - before; got != 1 {
				t.Fatalf("peers taken in by their stream: %d, want 1", got)
			}
			if got := coord.IdentifyReplacements(); got != 0 {
				t.Fatalf("connections replaced %d times, want none", got)
			}
		})
	}
}

// publishedUntilReceived publishes on topic every 100 ms, 50 times at most, until sub
// receives, and reports whether it did.
func publishedUntilReceived(ctx context.Context, t *testing.T, topic *pubsub.Topic, sub *pubsub.Subscription) bool {
	t.Helper()
	for i := range 50 {
		if err := topic.Publish(ctx, fmt.Appendf(nil, "offer %d", i)); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := sub.Next(rctx)
		cancel()
		if err == nil {
			return true
		}
	}
	return false
}
