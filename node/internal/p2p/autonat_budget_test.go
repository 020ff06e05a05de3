package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/internal/recordtest"
)

// TestAutoNATBudgetPerNetwork: fresh identities from one network get a coordinator's AutoNAT
// service AutoNATPerNetwork times a minute in all, the rest of their requests are refused
// before the service reads them; a node of another network is still served.
func TestAutoNATBudgetPerNetwork(t *testing.T) {
	key, _ := recordtest.NewKey()
	coord, err := New(Options{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Reachability: "public", OfferValidator: anyValue{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { coord.Close() })
	ask := func(ip string) bool {
		t.Helper()
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/" + ip + "/tcp/0"))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		return askAutoNAT(t, h, coord)
	}
	served, start := 0, time.Now()
	const tries = AutoNATPerNetwork + 15
	for range tries {
		if ask("127.0.0.2") {
			served++
		}
	}
	// The budget: a burst of AutoNATPerNetwork, refilled at as many a minute meanwhile.
	budget := AutoNATPerNetwork + int(time.Since(start).Minutes()*AutoNATPerNetwork) + 1
	if refused := coord.AutoNATRefused(); served > budget || int(refused) < tries-budget {
		t.Fatalf("%d fresh identities of one network: %d requests served, %d refused; the network's budget was %d", tries, served, refused, budget)
	}
	before := coord.AutoNATRefused()
	if !ask("127.0.0.3") || coord.AutoNATRefused() != before {
		t.Fatal("a node of another network was refused")
	}
}

// askAutoNAT opens an AutoNAT v1 request stream to the coordinator and says whether the
// service got it (the stream was not reset at once: the service waits for the request).
func askAutoNAT(t *testing.T, h host.Host, coord *Peer) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Connect(ctx, peer.AddrInfo{ID: coord.ID, Addrs: coord.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	s, err := h.NewStream(ctx, coord.ID, "/libp2p/autonat/1.0.0")
	if err != nil {
		return false
	}
	defer s.Reset()
	// A refused stream is reset as soon as the protocol is set; a served one waits for a
	// request that never comes.
	s.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = s.Read(make([]byte, 1))
	return err != nil && isTimeout(err)
}

func isTimeout(err error) bool {
	te, ok := err.(interface{ Timeout() bool })
	return ok && te.Timeout()
}
