//go:build scale

package node

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
	"github.com/gpunex/gpunex/node/internal/p2p"
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
//
// Linking takes no lock of the harness's: every stream and dial a node makes asks for its
// link, and with one lock for them (even held only to make a new link), 1,400 DHT queries
// of a loaded 250-node network queued on it, each hand-over waiting for the scheduler, and
// the providers' joining stalled for minutes. Each pair is linked once (linkOnce); the
// nodes' facts are in a sync.Map; a link's latency is drawn from the pair itself.
type mockLinks struct {
	mn mocknet.Mocknet

	mu    sync.Mutex // added, rng, cms: taken once per node
	rng   *rand.Rand // fixed seed: access bandwidths depend only on the order nodes join
	added int
	cms   []*connmgr.BasicConnMgr

	nodes  sync.Map // peer.ID → mockNode
	linked sync.Map // [2]peer.ID (the lesser first) → *linkOnce
	links  atomic.Int64
}

// mockNode is a node's place in the simulated network.
type mockNode struct {
	region int
	access float64 // bytes per second
}

// linkOnce makes one pair's link once, whoever dials first.
type linkOnce struct{ once sync.Once }

func newMockLinks() *mockLinks {
	return &mockLinks{mn: mocknet.New(), rng: rand.New(rand.NewPCG(31, 1000))}
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
	cm, err := connmgr.NewConnManager(maxPeers*3/4, maxPeers, connmgr.WithGracePeriod(p2p.ConnectionGrace)) // as p2p.New
	if err != nil {
		return nil, err
	}
	h.Network().Notify(cm.Notifee())
	m.nodes.Store(h.ID(), mockNode{region: i % len(linkRegions), access: bw})
	m.mu.Lock()
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
	v, ok := m.linked.Load(key)
	if !ok {
		v, _ = m.linked.LoadOrStore(key, &linkOnce{})
	}
	v.(*linkOnce).once.Do(func() {
		na, oka := m.nodes.Load(a)
		nb, okb := m.nodes.Load(b)
		if !oka || !okb {
			m.linked.Delete(key) // not a node of this run (yet): the dial fails as it would without a route
			return
		}
		l, err := m.mn.LinkPeers(a, b)
		if err != nil {
			m.linked.Delete(key)
			return
		}
		m.links.Add(1)
		ea, eb := na.(mockNode), nb.(mockNode)
		l.SetOptions(mocknet.LinkOptions{Latency: latency(key, ea.region, eb.region), Bandwidth: min(ea.access, eb.access)})
	})
}

// latency draws a link's one-way latency from the pair itself (the same pair, the same
// latency, in whatever order links are made): 5 to 20 ms within a region, the table's
// figure between regions, with up to 10% jitter either way.
func latency(pair [2]peer.ID, ra, rb int) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(pair[0]))
	h.Write([]byte(pair[1]))
	rng := rand.New(rand.NewPCG(h.Sum64(), 31))
	ms := 5 + 15*rng.Float64()
	if ra != rb {
		ms = float64(interRegionLatency[ra][rb]) * (0.9 + 0.2*rng.Float64())
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func (m *mockLinks) linkCount() int { return int(m.links.Load()) }

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
	return newDeadlineStream(st), nil
}

func (h *mockHost) SetStreamHandler(pid libp2pprotocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, func(st network.Stream) { handler(newDeadlineStream(st)) })
}

func (h *mockHost) SetStreamHandlerMatch(pid libp2pprotocol.ID, match func(libp2pprotocol.ID) bool, handler network.StreamHandler) {
	h.Host.SetStreamHandlerMatch(pid, match, func(st network.Stream) { handler(newDeadlineStream(st)) })
}

// deadlineStream gives a mocknet stream two things a kernel's socket has and mocknet's
// lacks.
//
// Deadlines (mocknet's SetDeadline does nothing): the protocols bound their exchanges with
// them, and without them a read from a peer that never answers waits forever. A deadline
// that passes resets the stream, where QUIC's would fail the pending read or write with a
// timeout: either way the exchange ends.
//
// A send window: mocknet delivers each write of 256 bytes or more a whole link latency
// after the one before (one write in flight per stream), so a protocol that writes record
// by record moves a few KB per round trip, where TCP or QUIC would keep a window of data in
// flight. Here Write queues its bytes and returns; one flusher at a time sends all that is
// queued as one write, which the link delays by its latency and its bandwidth. A writer more
// than sendWindow ahead of the link waits, as on a full socket buffer.
type deadlineStream struct {
	network.Stream
	mu          sync.Mutex
	read, write *time.Timer

	wmu      sync.Mutex
	sent     *sync.Cond // on wmu: a flush ended or sent a batch
	pending  []byte
	flushing bool
	werr     error
}

// sendWindow is how far a writer may run ahead of its stream's link.
const sendWindow = 1 << 20

func newDeadlineStream(st network.Stream) *deadlineStream {
	s := &deadlineStream{Stream: st}
	s.sent = sync.NewCond(&s.wmu)
	return s
}

func (s *deadlineStream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for len(s.pending) >= sendWindow && s.werr == nil {
		s.sent.Wait()
	}
	if s.werr != nil {
		return 0, s.werr
	}
	s.pending = append(s.pending, p...)
	if !s.flushing {
		s.flushing = true
		go s.flush()
	}
	return len(p), nil
}

// flush sends what is queued, batch after batch, until nothing is.
func (s *deadlineStream) flush() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for len(s.pending) > 0 && s.werr == nil {
		batch := s.pending
		s.pending = nil
		s.wmu.Unlock()
		_, err := s.Stream.Write(batch)
		s.wmu.Lock()
		if err != nil {
			s.werr = err
		}
		s.sent.Broadcast()
	}
	s.pending, s.flushing = nil, false
	s.sent.Broadcast()
}

// drain waits until what is queued is sent, and says whether it was.
func (s *deadlineStream) drain() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for s.flushing {
		s.sent.Wait()
	}
	return s.werr
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

func (s *deadlineStream) CloseWrite() error {
	if err := s.drain(); err != nil {
		return err
	}
	return s.Stream.CloseWrite()
}

func (s *deadlineStream) Close() error {
	err := s.drain()
	s.disarm()
	if cerr := s.Stream.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *deadlineStream) Reset() error {
	s.disarm()
	s.wmu.Lock()
	if s.werr == nil {
		s.werr = network.ErrReset
	}
	s.pending = nil
	s.sent.Broadcast()
	s.wmu.Unlock()
	return s.Stream.Reset()
}
