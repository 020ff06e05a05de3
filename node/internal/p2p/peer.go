// Package p2p is a node's libp2p side: the host, the DHT, gossipsub with peer scoring, and
// the one way every subsystem opens streams and exchanges request and response frames. It is
// the only package of the module that imports go-libp2p-kad-dht and go-libp2p-pubsub.
package p2p

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/gpunex/gpunex/protocol"
)

// Options say how to start a Peer.
type Options struct {
	// Host is used as it is when set (tests); otherwise one is built listening on Listen.
	Host      host.Host
	Key       crypto.PrivKey
	Listen    []string
	UserAgent string
	Bootstrap []peer.AddrInfo
	// OfferValidator validates the values stored under protocol.OfferNamespace in the DHT.
	OfferValidator record.Validator
	// Reachability is "public" (a coordinator: it serves relays and AutoNAT), "private", or
	// "auto" (AutoNAT finds out). TakeRelaySlots has a node behind NAT take relay
	// reservations on its bootstrap peers (a provider: renters must reach it). Relay limits
	// the relay a public node serves.
	Reachability   string
	TakeRelaySlots bool
	// RelayIfUnknownAfter is how long a node in "auto" that takes relay slots waits for
	// AutoNAT before it takes them anyway (0: UnknownReachabilityWait).
	RelayIfUnknownAfter time.Duration
	Relay               Relay
	// MaxPeers is the connection manager's high water mark (low: three quarters of it);
	// 0: libp2p's default (192).
	MaxPeers int
}

// Peer is a node's place in the network.
type Peer struct {
	Host host.Host
	Key  crypto.PrivKey
	ID   peer.ID

	dht      *dht.IpfsDHT
	ps       *pubsub.PubSub
	scores   GossipScores
	ownsHost bool

	mu     sync.Mutex
	topics []*Topic
	cancel context.CancelFunc
	// bans refuses the connections of peers that kept going past their limits (nil when
	// the host was given).
	bans  *bans
	reach reachability
	// autonat refuses AutoNAT requests past their network's budget (nil when the host was
	// given).
	autonat *autonatGate
	// overBudget counts gossip messages rejected past their sender's budget of repeats and
	// ignored records (Join).
	overBudget atomic.Int64
	// gossip counts gossipsub's stream openings tried again and the peers taken in by
	// their stream (gossipHost).
	gossip gossipState
	// gossipRepairs counts the reconnections to bootstrap peers out of gossip (repairGossip).
	gossipRepairs atomic.Int64
	// bootstrapRedials counts the dials of unconnected bootstrap peers by a node publishing
	// to nobody (reachBootstrap).
	bootstrapRedials atomic.Int64
	// identify counts the connections whose identify failed (watchIdentify).
	identify identifyFailures
	// jobStreams counts each peer's open job streams (keepForJobs).
	jobStreams map[peer.ID]int
	// relayedUse is when each relayed connection peers opened to this node last had one of
	// its streams handled (closeIdleRelayed).
	relayedUse map[network.Conn]time.Time
}

// New starts the host (unless given), the DHT in server mode and gossipsub with peer scoring.
// The caller must Close it.
func New(o Options) (_ *Peer, err error) {
	// p, not the named result (which every `return nil, err` sets to nil), is what the
	// deferred Close takes down when a step fails.
	p := &Peer{Host: o.Host, Key: o.Key}
	if p.ID, err = peer.IDFromPrivateKey(o.Key); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.Host == nil {
		p.bans = newBans()
		acl := newRelayACL(o.Relay)
		opts := natOptions(o, acl)
		var rm network.ResourceManager
		if o.MaxPeers > 0 {
			cm, err := NewConnManager(o.MaxPeers)
			if err != nil {
				return nil, err
			}
			if rm, err = resourceManager(o.MaxPeers); err != nil {
				return nil, err
			}
			opts = append(opts, libp2p.ConnectionManager(cm))
		} else if rm, err = defaultResourceManager(); err != nil {
			return nil, err
		}
		p.autonat = newAutoNATGate(rm)
		opts = append(opts, libp2p.ResourceManager(p.autonat))
		p.Host, err = libp2p.New(append([]libp2p.Option{
			libp2p.Identity(o.Key),
			libp2p.ListenAddrStrings(o.Listen...),
			libp2p.UserAgent(o.UserAgent),
			libp2p.ConnectionGater(p.bans),
			libp2p.SwarmOpts(swarm.WithDialRanker(tcpFirst)), // dial.go
		}, opts...)...)
		if err != nil {
			return nil, fmt.Errorf("start libp2p host on %v: %w", o.Listen, err)
		}
		p.ownsHost = true
		acl.use(p.Host.Network())
		p.autonat.use(p.Host.Network())
	}
	if p.Host.ID() != p.ID {
		return nil, errors.New("host identity differs from the node key")
	}
	p.dht, err = dht.New(p.Host,
		dht.Mode(dht.ModeServer),
		dht.ProtocolPrefix(protocol.DHTProtocolPrefix),
		dht.Validator(record.NamespacedValidator{protocol.OfferNamespace: o.OfferValidator}),
		dht.BootstrapPeers(o.Bootstrap...),
	)
	if err != nil {
		return nil, fmt.Errorf("start DHT: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.reach.watch(ctx, p)
	if p.ownsHost && o.TakeRelaySlots {
		go p.closeIdleRelayedLoop(ctx)
		if o.Reachability != "public" && o.Reachability != "private" && len(o.Bootstrap) > 0 {
			go p.reach.relayIfUnknown(ctx, p, cmp.Or(o.RelayIfUnknownAfter, UnknownReachabilityWait))
		}
	}
	p.ps, err = pubsub.NewGossipSub(ctx, newGossipHost(p.Host, &p.gossip), append([]pubsub.Option{
		pubsub.WithFloodPublish(true),
		pubsub.WithMaxMessageSize(256 << 10), // an offer (protocol.MaxOfferSize) with room to spare
		// Offers come in bursts (providers starting together, a network rejoining): with the
		// defaults (32 each), a node forwarding a hundred offers at once dropped some, and
		// its peers waited for the next republish (the scale harness, docs/performance.md).
		pubsub.WithValidateQueueSize(1024),
		pubsub.WithPeerOutboundQueueSize(512),
	}, gossipScoreOptions(p.scores.record)...)...)
	if err != nil {
		return nil, fmt.Errorf("start gossipsub: %w", err)
	}
	p.gossip.ps.Store(p.ps)
	p.watchIdentify(ctx) // after gossipsub, which it asks before replacing a connection
	return p, nil
}

// defaultResourceManager is libp2p's resource manager with its default limits, as a host
// built without one gets.
func defaultResourceManager() (network.ResourceManager, error) {
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()))
}

// ConnectionGrace is how long a new connection is spared when the connection manager trims
// past p2p.max_peers (libp2p's default: a minute). A provider's new connections are mostly
// other providers' DHT walks (routing-table refreshes, offer records stored at each
// publication): 30 to 60 a minute at 300 providers, which a minute's grace would keep
// above the limit. The gossip mesh, the DHT's routing table and jobs are kept first,
// whatever their age (meshtags.go).
const ConnectionGrace = 10 * time.Second

// NewConnManager is a node's connection manager: past maxPeers connections it trims back to
// three quarters of them, sparing those younger than ConnectionGrace.
func NewConnManager(maxPeers int) (*connmgr.BasicConnMgr, error) {
	return connmgr.NewConnManager(maxPeers*3/4, maxPeers, connmgr.WithGracePeriod(ConnectionGrace))
}

// resourceManager is libp2p's resource manager with its default limits, scaled to the
// machine, except that the whole node may hold twice maxPeers connections (the connection
// manager trims back past maxPeers; new ones have ConnectionGrace) with 32 streams each. By
// default a machine with 24 GiB allows 256 inbound connections in all: a coordinator
// refused its 257th provider (the scale harness, docs/performance.md).
func resourceManager(maxPeers int) (network.ResourceManager, error) {
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	scaled := limits.AutoScale()
	partial := scaled.ToPartialLimitConfig()
	atLeast := func(v *rcmgr.LimitVal, n int) {
		if *v >= 0 && int(*v) < n {
			*v = rcmgr.LimitVal(n)
		}
	}
	conns, streams := 2*maxPeers, 64*maxPeers
	// Connections and streams being set up (a burst of joins at a coordinator).
	for _, l := range []*rcmgr.ResourceLimits{&partial.Transient, &partial.AllowlistedTransient} {
		atLeast(&l.Conns, conns/4)
		atLeast(&l.ConnsInbound, conns/4)
		atLeast(&l.Streams, conns)
		atLeast(&l.StreamsInbound, conns)
	}
	for _, l := range []*rcmgr.ResourceLimits{&partial.ServiceDefault, &partial.ProtocolDefault} {
		atLeast(&l.StreamsInbound, 2*conns) // a stream or two per peer (gossip, DHT, probes)
		atLeast(&l.StreamsOutbound, 2*conns)
		atLeast(&l.Streams, 4*conns)
	}
	for _, l := range []*rcmgr.ResourceLimits{&partial.System, &partial.AllowlistedSystem} {
		atLeast(&l.Conns, conns)
		atLeast(&l.ConnsInbound, conns)
		atLeast(&l.ConnsOutbound, conns)
		atLeast(&l.Streams, streams)
		atLeast(&l.StreamsInbound, streams)
		atLeast(&l.StreamsOutbound, streams)
	}
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(partial.Build(scaled)))
}

// Close leaves every topic and closes the DHT, and the host when New built it.
func (p *Peer) Close() error {
	var errs []error
	p.mu.Lock()
	topics := p.topics
	p.topics = nil
	p.mu.Unlock()
	for _, t := range topics {
		t.close()
	}
	if p.cancel != nil {
		p.cancel()
	}
	if p.dht != nil {
		errs = append(errs, p.dht.Close())
	}
	if p.ownsHost && p.Host != nil {
		errs = append(errs, p.Host.Close())
	}
	return errors.Join(errs...)
}

// Addrs returns the node's full multiaddrs (with /p2p/<id>).
// Relay addresses come first: a node behind NAT is reached through them, and offers keep
// only the first 16 addresses.
func (p *Peer) Addrs() []string {
	var relayed, direct []string
	for _, a := range p.Host.Addrs() {
		if IsRelayed(a) {
			relayed = append(relayed, a.String()+"/p2p/"+p.ID.String())
		} else {
			direct = append(direct, a.String()+"/p2p/"+p.ID.String())
		}
	}
	return append(relayed, direct...)
}

// Connected returns how many peers the host is connected to.
func (p *Peer) Connected() int { return len(p.Host.Network().Peers()) }

// GossipScore returns a peer's latest gossipsub score.
func (p *Peer) GossipScore(id peer.ID) (float64, bool) { return p.scores.Get(id) }

// PenalisedPeers counts the peers whose gossipsub score is negative.
func (p *Peer) PenalisedPeers() float64 { return p.scores.Negative() }

// Handle sets the handler of a stream protocol.
func (p *Peer) Handle(proto string, h network.StreamHandler) {
	if BulkProtocols[proto] {
		inner := h
		h = func(s network.Stream) {
			done := p.keepForJobs(s.Conn().RemotePeer())
			defer done()
			inner(s)
		}
	}
	p.Host.SetStreamHandler(libp2pprotocol.ID(proto), func(s network.Stream) {
		if s.Conn().Stat().Limited { // a relayed connection in use (closeIdleRelayed)
			p.usedRelayed(s.Conn())
			defer p.usedRelayed(s.Conn())
		}
		h(s)
	})
}

// keepForJobs marks a peer a job stream is open with, so that the connection manager
// (p2p.max_peers) closes its connection last, until done is called. The mark lasts as long
// as the peer's job streams, which their deadlines bound: a stranger that opens one to
// push gossip peers out loses it with the stream.
func (p *Peer) keepForJobs(id peer.ID) (done func()) {
	p.mu.Lock()
	if p.jobStreams == nil {
		p.jobStreams = make(map[peer.ID]int)
	}
	p.jobStreams[id]++
	if p.jobStreams[id] == 1 {
		p.Host.ConnManager().TagPeer(id, jobTag, 100)
	}
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.jobStreams[id]--; p.jobStreams[id] <= 0 {
				delete(p.jobStreams, id)
				p.Host.ConnManager().UntagPeer(id, jobTag)
			}
		})
	}
}

const jobTag = "gpunex-job"

// jobStream is a job stream this host opened, marked (keepForJobs) until closed or reset.
type jobStream struct {
	network.Stream
	done func()
}

func (s jobStream) Close() error {
	defer s.done()
	return s.Stream.Close()
}

func (s jobStream) Reset() error {
	defer s.done()
	return s.Stream.Reset()
}

// Reach makes sure the host knows an address of id: connected already, in the peerstore,
// or found through the DHT.
func (p *Peer) Reach(ctx context.Context, id peer.ID) error {
	if p.Host.Network().Connectedness(id) == network.Connected || len(p.Host.Peerstore().Addrs(id)) > 0 {
		return nil
	}
	ai, err := p.dht.FindPeer(ctx, id)
	if err != nil {
		return fmt.Errorf("find %s: %w", id, err)
	}
	p.Host.Peerstore().AddAddrs(ai.ID, ai.Addrs, 10*time.Minute)
	return nil
}

// OpenStream reaches id and opens a stream on proto. A dial that fails because an earlier
// one failed moments ago (libp2p's dial backoff) is tried once more at once: the caller
// asked now, and the peer may be back.
func (p *Peer) OpenStream(ctx context.Context, id peer.ID, proto string) (network.Stream, error) {
	if err := p.Reach(ctx, id); err != nil {
		return nil, err
	}
	// A peer behind NAT may be reached through a relay only, within the relay's limits
	// (docs/operations.md, "NAT traversal"); a hole punch under way is waited for first.
	if BulkProtocols[proto] {
		p.preferDirect(ctx, id)
	}
	ctx = network.WithAllowLimitedConn(ctx, proto)
	s, err := p.Host.NewStream(ctx, id, libp2pprotocol.ID(proto))
	if err != nil && errors.Is(err, swarm.ErrDialBackoff) && p.clearBackoff(id) {
		s, err = p.Host.NewStream(ctx, id, libp2pprotocol.ID(proto))
	}
	if err != nil || !BulkProtocols[proto] {
		return s, err
	}
	return jobStream{Stream: s, done: p.keepForJobs(id)}, nil
}

// clearBackoff forgets the dial backoff a failed dial of id set, so that the next dial is
// made at once; false where the network has none (mocknet).
func (p *Peer) clearBackoff(id peer.ID) bool {
	sw, ok := p.Host.Network().(*swarm.Swarm)
	if ok {
		sw.Backoff().Clear(id)
	}
	return ok
}

// Exchange sends one JSON frame to a peer on a protocol and reads one JSON frame back (at
// most max bytes), all within timeout.
func (p *Peer) Exchange(ctx context.Context, id peer.ID, proto string, timeout time.Duration, req any, max int, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := p.OpenStream(ctx, id, proto)
	if err != nil {
		return err
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	if err := protocol.WriteJSONFrame(s, req); err != nil {
		return err
	}
	s.CloseWrite()
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), max, resp); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	return nil
}

// RoutingTableSize returns how many peers the DHT's routing table holds.
func (p *Peer) RoutingTableSize() int { return p.dht.RoutingTable().Size() }

// RefreshRoutingTable refreshes the DHT's routing table and waits for it or ctx.
func (p *Peer) RefreshRoutingTable(ctx context.Context) {
	select {
	case <-p.dht.RefreshRoutingTable():
	case <-ctx.Done():
	}
}

// StoredProviders counts the provider records this node stores for the DHT under the
// given keys (one per provider and key), buffered writes included.
func (p *Peer) StoredProviders(ctx context.Context, keys []cid.Cid) (int, error) {
	n := 0
	for _, k := range keys {
		ps, err := p.dht.ProviderStore().GetProviders(ctx, k.Hash())
		if err != nil {
			return n, err
		}
		n += len(ps)
	}
	return n, nil
}

// PutValue stores a record in the DHT.
func (p *Peer) PutValue(ctx context.Context, key string, value []byte) error {
	return p.dht.PutValue(ctx, key, value)
}

// GetValue fetches the best record under key from the DHT, asking until quorum peers answered.
func (p *Peer) GetValue(ctx context.Context, key string, quorum int) ([]byte, error) {
	return p.dht.GetValue(ctx, key, dht.Quorum(quorum))
}

// Provide announces the node under a content key.
func (p *Peer) Provide(ctx context.Context, key cid.Cid) error {
	return p.dht.Provide(ctx, key, true)
}

// FindProviders streams the peers announced under a content key, until ctx ends.
func (p *Peer) FindProviders(ctx context.Context, key cid.Cid) <-chan peer.AddrInfo {
	return p.dht.FindProvidersAsync(ctx, key, 0)
}
