package p2p

import (
	"slices"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Which transport two nodes talk over. libp2p dials QUIC first and TCP 30 ms (private
// addresses) or 250 ms (public) later, so two nodes listening on both end up on QUIC. Jobs
// move bulk data over the connection (image archives, inputs, outputs, a job's ports), and
// on QUIC that costs two to three times the CPU of TCP (quic-go handles each 1,400-byte
// datagram on its own; docs/performance.md, "Job tunnels": a tunnel carried 8-17% of a
// plain TCP copy over QUIC here, 42-69% over TCP). So a node dials TCP first and QUIC by
// the same delays after it; QUIC still wins where TCP does not connect (a firewall that
// lets only UDP through). Hole punching is not ranked: libp2p dials every address of a
// simultaneous connect at once.

// tcpFirst ranks a peer's addresses as libp2p's default ranker does, with TCP and QUIC
// swapped: each direct TCP address takes the delay its group gave QUIC, each QUIC address
// that TCP's delay later. Relayed addresses keep theirs.
func tcpFirst(addrs []ma.Multiaddr) []network.AddrDelay {
	ranked := swarm.DefaultDialRanker(addrs)
	for i, ad := range ranked {
		if IsRelayed(ad.Addr) {
			continue
		}
		shift := swarm.PublicTCPDelay
		if manet.IsPrivateAddr(ad.Addr) {
			shift = swarm.PrivateTCPDelay
		}
		switch {
		case isTCP(ad.Addr):
			ranked[i].Delay = max(0, ad.Delay-shift)
		case isQUIC(ad.Addr):
			ranked[i].Delay += shift
		}
	}
	slices.SortStableFunc(ranked, func(a, b network.AddrDelay) int { return int(a.Delay - b.Delay) })
	return ranked
}

func isTCP(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_TCP)
	return err == nil && !hasProtocol(a, ma.P_WS) && !hasProtocol(a, ma.P_WSS)
}

func isQUIC(a ma.Multiaddr) bool { return hasProtocol(a, ma.P_QUIC_V1) || hasProtocol(a, ma.P_QUIC) }

func hasProtocol(a ma.Multiaddr, code int) bool {
	_, err := a.ValueForProtocol(code)
	return err == nil
}
