//go:build scale

package node

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
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
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
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

// mockLinks is the simulated network: one mocknet for the run, every node's host made and
// every pair of nodes linked before the first node starts (prepare).
//
// Links used to be made when a node first dialled another, but making one takes mocknet's
// single lock of the whole network, and so does finding one at each new connection: at 800
// providers, on 2 cores, 9,600 dials were queued on that lock (a goroutine dump) and the
// providers' joining stopped. Made beforehand by one goroutine, the links of 1,051 nodes
// cost about 400 MB, the harness's and not a node's (the heap per role is measured from
// after them). A new connection still takes the lock briefly, to find its link.
type mockLinks struct {
	mn    mocknet.Mocknet
	rng   *rand.Rand // fixed seed: access bandwidths depend only on the order nodes are made
	links int

	mu    sync.Mutex
	ready map[string][]readyHost // by role, in the order they are handed out
	cms   []*connmgr.BasicConnMgr

	// While counting is set, each dial that opens a connection is counted by what asked for
	// it (dialers: "caller protocol" → *atomic.Int64): what makes a provider churn.
	counting atomic.Bool
	dialers  sync.Map
}

// readyHost is a node's key and host, made before the node starts.
type readyHost struct {
	key  crypto.PrivKey
	host *mockHost
}

// mockNode is a node's place in the simulated network.
type mockNode struct {
	id     peer.ID
	region int
	access float64 // bytes per second
}

func newMockLinks() *mockLinks {
	return &mockLinks{mn: mocknet.New(), rng: rand.New(rand.NewPCG(31, 1000)), ready: map[string][]readyHost{}}
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

// prepare makes a host for each of roles (a role, and its nodes' p2p.max_peers), then links
// every pair, each link with a latency and a bandwidth drawn for it.
func (m *mockLinks) prepare(roles []string, maxPeers func(role string) int) error {
	var nodes []mockNode
	for i, role := range roles {
		key, _, err := crypto.GenerateEd25519Key(crand.Reader)
		if err != nil {
			return err
		}
		// A distinct address per node, so that the protocols' per-address limits see a
		// thousand hosts. Mocknet dials by peer ID: addresses are only names.
		addr := ma.StringCast(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", i/62500, i/250%250, 1+i%250))
		h, err := m.mn.AddPeer(key, addr)
		if err != nil {
			return err
		}
		cm, err := p2p.NewConnManager(maxPeers(role)) // as p2p.New
		if err != nil {
			return err
		}
		h.Network().Notify(cm.Notifee())
		nodes = append(nodes, mockNode{id: h.ID(), region: i % len(linkRegions), access: m.accessMbps(role) * 1e6 / 8})
		m.cms = append(m.cms, cm)
		m.ready[role] = append(m.ready[role], readyHost{key: key, host: &mockHost{Host: h, links: m, cm: cm,
			labels: pprof.WithLabels(context.Background(), pprof.Labels("role", role))}})
	}
	for i, a := range nodes {
		for _, b := range nodes[i+1:] {
			l, err := m.mn.LinkPeers(a.id, b.id)
			if err != nil {
				return err
			}
			l.SetOptions(mocknet.LinkOptions{Latency: latency([2]peer.ID{min(a.id, b.id), max(a.id, b.id)}, a.region, b.region),
				Bandwidth: min(a.access, b.access)})
			m.links++
		}
	}
	return nil
}

// take hands out the next prepared key and host of role.
func (m *mockLinks) take(role string) (crypto.PrivKey, host.Host, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ready[role]) == 0 {
		return nil, nil, fmt.Errorf("no %s host prepared", role)
	}
	r := m.ready[role][0]
	m.ready[role] = m.ready[role][1:]
	return r.key, r.host, nil
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

func (m *mockLinks) linkCount() int { return m.links }

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
		"every pair linked before the first node starts", len(linkRegions), linkRegions)
}

// mockHost is a mocknet host with what p2p.New's hosts have and mocknet's lack: a connection
// manager (gossipsub and the DHT tag and protect peers in it; it trims past p2p.max_peers),
// and streams with deadlines and a send window.
type mockHost struct {
	host.Host
	links *mockLinks
	cm    *connmgr.BasicConnMgr
	// labels are the node's profiler labels. Mocknet runs a stream's handler on a goroutine
	// started by the dialer, which would carry the dialer's role: the handler takes these.
	labels context.Context
}

func (h *mockHost) ConnManager() coreconnmgr.ConnManager { return h.cm }

// IDService is the host's identify service: gossipsub's host waits on it before taking a
// peer in by its stream (p2p.gossipHost.takeIn), as it does on a production host.
func (h *mockHost) IDService() identify.IDService {
	return h.Host.(interface{ IDService() identify.IDService }).IDService()
}

func (h *mockHost) Network() network.Network { return mockNetwork{h.Host.Network()} }

// mockNetwork is a mocknet network whose Connectedness takes its lock for reading, as the
// swarm's does: mocknet's takes it for writing. Gossipsub asks at every dead-peer check on
// its event loop, and at 1,000 providers on 2 cores 176 nodes' event loops were found
// queued on their own network's lock behind its readers, their publishes stuck for
// minutes (a goroutine dump).
type mockNetwork struct{ network.Network }

func (n mockNetwork) Connectedness(p peer.ID) network.Connectedness {
	if len(n.ConnsToPeer(p)) > 0 {
		return network.Connected
	}
	return network.NotConnected
}

func (h *mockHost) Connect(ctx context.Context, pi peer.AddrInfo) error {
	h.countDial(pi.ID, "")
	return h.Host.Connect(ctx, pi)
}

func (h *mockHost) NewStream(ctx context.Context, p peer.ID, pids ...libp2pprotocol.ID) (network.Stream, error) {
	if len(pids) > 0 {
		h.countDial(p, pids[0])
	}
	st, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil {
		return nil, err
	}
	return newDeadlineStream(st), nil
}

func (h *mockHost) SetStreamHandler(pid libp2pprotocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, func(st network.Stream) {
		pprof.SetGoroutineLabels(h.labels)
		handler(newDeadlineStream(st))
	})
}

func (h *mockHost) SetStreamHandlerMatch(pid libp2pprotocol.ID, match func(libp2pprotocol.ID) bool, handler network.StreamHandler) {
	h.Host.SetStreamHandlerMatch(pid, match, func(st network.Stream) {
		pprof.SetGoroutineLabels(h.labels)
		handler(newDeadlineStream(st))
	})
}

// countDial counts a dial to p that will open a connection, by the first function above
// the host that asked for it and the stream's protocol.
func (h *mockHost) countDial(p peer.ID, pid libp2pprotocol.ID) {
	if !h.links.counting.Load() || len(h.Network().ConnsToPeer(p)) > 0 {
		return
	}
	pcs := make([]uintptr, 24)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	caller := "?"
	for {
		f, more := frames.Next()
		if !strings.Contains(f.Function, "go-libp2p/p2p/") && !strings.Contains(f.Function, "mockHost") {
			caller = f.Function[strings.LastIndex(f.Function, "/")+1:]
			break
		}
		if !more {
			break
		}
	}
	key := caller + " " + string(pid)
	v, ok := h.links.dialers.Load(key)
	if !ok {
		v, _ = h.links.dialers.LoadOrStore(key, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// dialReport is the counted dials per node and minute, the most frequent first.
func (m *mockLinks) dialReport(nodes int, perMin float64) string {
	type count struct {
		what string
		n    int64
	}
	var all []count
	var total int64
	m.dialers.Range(func(k, v any) bool {
		n := v.(*atomic.Int64).Load()
		all = append(all, count{k.(string), n})
		total += n
		return true
	})
	slices.SortFunc(all, func(a, b count) int { return int(b.n - a.n) })
	var parts []string
	for i, c := range all {
		if i == 8 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", c.what, float64(c.n)/float64(nodes)*perMin))
	}
	return fmt.Sprintf("dials that opened a connection, per node and minute: %.1f (%s)", float64(total)/float64(nodes)*perMin, strings.Join(parts, "; "))
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
