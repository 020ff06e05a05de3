//go:build scale

package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	coreconnmgr "github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/node/config"
)

// The scale harness's mocknet mode (-scale.links=mocknet): the nodes' hosts are go-libp2p's
// mocknet hosts, linked in memory with a latency and a bandwidth drawn per link, so that a
// thousand providers fit in one process. Everything above the host (node.New: gossipsub, the
// DHT, the protocols, the validators) is the production code.

// linkRegions are where nodes sit, for their links' latency; nodes are placed round robin.
var linkRegions = []string{"eu", "us-east", "us-west", "asia", "sa"}

// interRegionLatency is the one-way latency between two regions in milliseconds (mocknet
// delays every write by its link's latency, so a round trip takes twice this), indexed as
// linkRegions. Within a region a link takes 5 to 20 ms.
var interRegionLatency = [5][5]int{
	//     eu us-east us-west asia  sa
	/* eu      */ {0, 40, 75, 120, 100},
	/* us-east */ {40, 0, 35, 110, 60},
	/* us-west */ {75, 35, 0, 60, 90},
	/* asia    */ {120, 110, 60, 0, 150},
	/* sa      */ {100, 60, 90, 150, 0},
}

// mockLinks is the simulated network: one mocknet for the run, each node's region and
// access bandwidth, and the links made so far.
type mockLinks struct {
	mn mocknet.Mocknet

	mu     sync.Mutex
	rng    *rand.Rand // fixed seed: a run's draws depend only on the order links are made
	region map[peer.ID]int
	access map[peer.ID]float64 // bytes per second
	links  int
	added  int
	cms    []*connmgr.BasicConnMgr

	// linked holds the pairs linked so far ([2]peer.ID, the lesser first), read without mu:
	// every stream a node opens asks, and 1,000 nodes asking under one lock made a convoy
	// of ten thousand goroutines that stalled the providers' joining past 200.
	linked sync.Map
}

func newMockLinks() *mockLinks {
	return &mockLinks{mn: mocknet.New(), rng: rand.New(rand.NewPCG(31, 1000)),
		region: map[peer.ID]int{}, access: map[peer.ID]float64{}}
}

// accessMbps draws a node's access bandwidth by role: a coordinator in a data centre,
// providers on 100 to 1,000 Mbit/s, renters on 50 to 500.
func (m *mockLinks) accessMbps(role string) float64 {
	switch role {
	case config.RoleCoordinator:
		return 10_000
	case config.RoleProvider:
		return 100 + 900*m.rng.Float64()
	default:
		return 50 + 450*m.rng.Float64()
	}
}

// host adds a node to the mocknet and returns its host: mocknet's basic host (identify, no
// transport, no resource manager) with a connection manager of the production limits, and
// links made when the node dials.
func (m *mockLinks) host(key crypto.PrivKey, role string, maxPeers int) (host.Host, error) {
	m.mu.Lock()
	i := m.added
	m.added++
	bw := m.accessMbps(role) * 1e6 / 8
	m.mu.Unlock()
	// A distinct address per node, so that the protocols' per-address limits see a thousand
	// hosts. Mocknet dials by peer ID: addresses are only names.
	addr := ma.StringCast(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", i/62500, i/250%250, 1+i%250))
	h, err := m.mn.AddPeer(key, addr)
	if err != nil {
		return nil, err
	}
	cm, err := connmgr.NewConnManager(maxPeers*3/4, maxPeers) // as p2p.New
	if err != nil {
		return nil, err
	}
	h.Network().Notify(cm.Notifee())
	m.mu.Lock()
	m.region[h.ID()] = i % len(linkRegions)
	m.access[h.ID()] = bw
	m.cms = append(m.cms, cm)
	m.mu.Unlock()
	return &mockHost{Host: h, links: m, cm: cm}, nil
}

// link makes the link between a and b unless there is one. Links are made when a dials b,
// not all at once: 1,050 nodes linked pairwise make 550,000 links (376 MB of heap,
// measured), charged to whichever node joined last; made on dial, they follow the
// connections, as a kernel's sockets do.
func (m *mockLinks) link(a, b peer.ID) {
	if a == b {
		return
	}
	key := [2]peer.ID{min(a, b), max(a, b)}
	if _, ok := m.linked.Load(key); ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.linked.Load(key); ok {
		return
	}
	ra, oka := m.region[a]
	rb, okb := m.region[b]
	if !oka || !okb {
		return // not a node of this run: the dial fails as it would without a route
	}
	l, err := m.mn.LinkPeers(a, b)
	if err != nil {
		return
	}
	m.links++
	l.SetOptions(mocknet.LinkOptions{Latency: m.latency(ra, rb), Bandwidth: min(m.access[a], m.access[b])})
	m.linked.Store(key, struct{}{})
}

// latency draws a link's one-way latency: 5 to 20 ms within a region, the table's figure
// between regions, with up to 10% jitter either way.
func (m *mockLinks) latency(ra, rb int) time.Duration {
	ms := 5 + 15*m.rng.Float64()
	if ra != rb {
		ms = float64(interRegionLatency[ra][rb]) * (0.9 + 0.2*m.rng.Float64())
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func (m *mockLinks) linkCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.links
}

func (m *mockLinks) close() {
	m.mn.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, cm := range m.cms {
		cm.Close()
	}
}

// describe is the link model, for the report.
func (m *mockLinks) describe() string {
	return fmt.Sprintf("mocknet (in memory): %d regions round robin (%v), one-way latency 5-20 ms within a region, "+
		"20-150 ms between (eu-us-east 40, us-east-us-west 35, us-west-asia 60, eu-asia 120, asia-sa 150) +-10%% per link; "+
		"bandwidth per link the lesser of its ends' (coordinator 10 Gbit/s, providers 100-1000 Mbit/s, renters 50-500 Mbit/s); "+
		"links made on first dial", len(linkRegions), linkRegions)
}

// mockHost is a mocknet host with what p2p.New's hosts have and mocknet's lack: a connection
// manager (gossipsub and the DHT tag and protect peers in it; it trims past p2p.max_peers),
// and a link made before each dial.
type mockHost struct {
	host.Host
	links *mockLinks
	cm    *connmgr.BasicConnMgr
}

func (h *mockHost) ConnManager() coreconnmgr.ConnManager { return h.cm }

func (h *mockHost) Connect(ctx context.Context, pi peer.AddrInfo) error {
	h.links.link(h.ID(), pi.ID)
	return h.Host.Connect(ctx, pi)
}

func (h *mockHost) NewStream(ctx context.Context, p peer.ID, pids ...libp2pprotocol.ID) (network.Stream, error) {
	h.links.link(h.ID(), p)
	st, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil {
		return nil, err
	}
	return &deadlineStream{Stream: st}, nil
}

func (h *mockHost) SetStreamHandler(pid libp2pprotocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, func(st network.Stream) { handler(&deadlineStream{Stream: st}) })
}

func (h *mockHost) SetStreamHandlerMatch(pid libp2pprotocol.ID, match func(libp2pprotocol.ID) bool, handler network.StreamHandler) {
	h.Host.SetStreamHandlerMatch(pid, match, func(st network.Stream) { handler(&deadlineStream{Stream: st}) })
}

// deadlineStream gives a mocknet stream the deadlines mocknet ignores (its SetDeadline does
// nothing): the protocols bound their exchanges with them, and without them a read from a
// peer that never answers waits forever. A deadline that passes resets the stream, where
// QUIC's would fail the pending read or write with a timeout: either way the exchange ends.
type deadlineStream struct {
	network.Stream
	mu          sync.Mutex
	read, write *time.Timer
}

func (s *deadlineStream) arm(timer **time.Timer, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *timer != nil {
		(*timer).Stop()
		*timer = nil
	}
	if !t.IsZero() {
		*timer = time.AfterFunc(time.Until(t), func() { s.Stream.Reset() })
	}
}

func (s *deadlineStream) SetReadDeadline(t time.Time) error  { s.arm(&s.read, t); return nil }
func (s *deadlineStream) SetWriteDeadline(t time.Time) error { s.arm(&s.write, t); return nil }
func (s *deadlineStream) SetDeadline(t time.Time) error {
	s.arm(&s.read, t)
	s.arm(&s.write, t)
	return nil
}

func (s *deadlineStream) disarm() {
	s.arm(&s.read, time.Time{})
	s.arm(&s.write, time.Time{})
}

func (s *deadlineStream) Close() error {
	s.disarm()
	return s.Stream.Close()
}

func (s *deadlineStream) Reset() error {
	s.disarm()
	return s.Stream.Reset()
}
