package onboarding

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/protocol"
)

// fakeConn is the connection a request came over: a peer at an address.
type fakeConn struct {
	network.Conn
	peer peer.ID
	addr ma.Multiaddr
}

func (c fakeConn) RemotePeer() peer.ID           { return c.peer }
func (c fakeConn) RemoteMultiaddr() ma.Multiaddr { return c.addr }
func from(p peer.ID, addr string) network.Conn   { return fakeConn{peer: p, addr: ma.StringCast(addr)} }
func submitRequest(raw []byte) protocol.ApplyRequest {
	return protocol.ApplyRequest{Op: "submit", Record: raw}
}

// TestApplicationQueueNotFloodable: a stranger cannot fill the review queue (security
// review 2026-12-05, finding 12). From one IPv6 /48, moving to a new /64 and a new peer ID
// for each application, it holds MaxOpenPerNetwork places; from many networks, the queue
// takes NewApplicationsPerHour new applications an hour in all, so that it fills no faster
// than reviewers see it. A real applicant refused meanwhile is told to wait, not that its
// application is refused: its node tries again, those tries cost it none of its hourly
// submissions, and it is taken in within the hour.
func TestApplicationQueueNotFloodable(t *testing.T) {
	tc := newTestCoordinator(t, nil)
	submit := func(a *testApplicant, addr string) protocol.ApplyResponse {
		raw, _ := a.sign(t, form(), tc.clock.Now())
		return tc.answer(from(a.id, addr), submitRequest(raw))
	}
	open := func() int {
		apps, err := tc.Applications(protocol.StatusPending, false)
		if err != nil {
			t.Fatal(err)
		}
		return len(apps)
	}

	taken := 0
	for i := range 50 {
		resp := submit(newTestApplicant(), fmt.Sprintf("/ip6/2001:db8:aa:%x::1/tcp/4001", i))
		if resp.OK {
			taken++
		}
	}
	if taken != MaxOpenPerNetwork {
		t.Fatalf("one stranger's /48 took %d places in the queue; want %d", taken, MaxOpenPerNetwork)
	}

	for i := range 200 {
		submit(newTestApplicant(), fmt.Sprintf("/ip4/198.51.100.%d/tcp/4001", i))
	}
	if n := open(); n != NewApplicationsPerHour {
		t.Fatalf("a flood from 200 networks left %d applications open within the hour; want %d", n, NewApplicationsPerHour)
	}

	// A real applicant during the flood: its node sends its application again and again
	// (applicant.Run: from half a second apart; every 5 s here).
	ada := newTestApplicant()
	raw, _ := ada.sign(t, form(), tc.clock.Now())
	refused, start := 0, tc.clock.Now()
	for {
		resp := tc.answer(from(ada.id, "/ip4/203.0.113.7/tcp/4001"), submitRequest(raw))
		if resp.OK {
			break
		}
		if resp.Reason != "other" {
			t.Fatalf("try %d during the flood: %s (%s); want a refusal its node retries (reason other)", refused+1, resp.Error, resp.Reason)
		}
		if refused++; tc.clock.Now().Sub(start) > time.Hour {
			t.Fatalf("the real applicant is still refused after an hour: %s", resp.Error)
		}
		tc.clock.Advance(5 * time.Second)
	}
	if refused <= SubmitsPerHour {
		t.Fatalf("the real applicant was refused %d times; the test wants more than its %d submissions an hour", refused, SubmitsPerHour)
	}
	if n := open(); n != NewApplicationsPerHour+1 {
		t.Fatalf("%d applications open; want the flood's %d and the real one", n, NewApplicationsPerHour)
	}
}
