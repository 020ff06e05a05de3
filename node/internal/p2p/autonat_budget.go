package p2p

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
)

// AutoNAT dial-backs per source network. A coordinator dials back the nodes that ask it
// whether they are reachable (AutoNAT v1, which AutoRelay follows, and v2): libp2p bounds
// them in all (autonatPerMinute) and per peer, and a peer ID costs nothing, so one host
// rotating fresh keys could spend the whole budget and leave every honest provider's
// reachability unknown. The requests of one network (an IPv4 address, an IPv6 /64;
// NetworkOf) are counted together, and past AutoNATPerNetwork a minute the request's
// stream is reset before the service reads it. The host's own address is exempt, as from
// every network budget.

// AutoNATPerNetwork is how many AutoNAT requests one network may make a minute (and at
// once): the dial-backs of a farm of ten nodes behind one address, three each.
const AutoNATPerNetwork = 30

// autonatProtocols are the AutoNAT services' request protocols.
var autonatProtocols = map[libp2pprotocol.ID]bool{
	"/libp2p/autonat/1.0.0":          true,
	"/libp2p/autonat/2/dial-request": true,
}

var errAutoNATBudget = errors.New("AutoNAT requests past the budget of the peer's network")

// autonatGate is a resource manager that refuses the streams of AutoNAT requests past the
// budget of their network (the stream's protocol is set once negotiated: SetProtocol).
type autonatGate struct {
	network.ResourceManager
	budget  *Budget[string]
	refused atomic.Int64

	mu  sync.Mutex
	net network.Network // nil until the host is built (use): nothing is refused before
}

func newAutoNATGate(rm network.ResourceManager) *autonatGate {
	return &autonatGate{ResourceManager: rm, budget: NewBudget[string](AutoNATPerNetwork, AutoNATPerNetwork)}
}

func (g *autonatGate) use(n network.Network) {
	g.mu.Lock()
	g.net = n
	g.mu.Unlock()
}

func (g *autonatGate) OpenStream(p peer.ID, dir network.Direction) (network.StreamManagementScope, error) {
	s, err := g.ResourceManager.OpenStream(p, dir)
	if err != nil || dir != network.DirInbound {
		return s, err
	}
	return &gatedStream{StreamManagementScope: s, gate: g, peer: p}, nil
}

// admit spends one request of p's network, and says whether it was within the budget.
func (g *autonatGate) admit(p peer.ID) bool {
	g.mu.Lock()
	n := g.net
	g.mu.Unlock()
	if n == nil {
		return true
	}
	conns := n.ConnsToPeer(p)
	if len(conns) == 0 {
		return true // gone already: its stream goes with it
	}
	net := NetworkOfConn(conns[0])
	if net == "loopback" || g.budget.Spend(net, time.Now()) {
		return true
	}
	g.refused.Add(1)
	return false
}

// gatedStream is an inbound stream's scope, which checks the budget when the stream turns
// out to be an AutoNAT request.
type gatedStream struct {
	network.StreamManagementScope
	gate *autonatGate
	peer peer.ID
}

func (s *gatedStream) SetProtocol(proto libp2pprotocol.ID) error {
	if autonatProtocols[proto] && !s.gate.admit(s.peer) {
		return errAutoNATBudget
	}
	return s.StreamManagementScope.SetProtocol(proto)
}

// AutoNATRefused is how many AutoNAT requests this node refused past their network's
// budget.
func (p *Peer) AutoNATRefused() int64 {
	if p.autonat == nil {
		return 0
	}
	return p.autonat.refused.Load()
}
