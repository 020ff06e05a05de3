//go:build scale

package node

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// connOpenings counts the connections the providers open and accept during the window, by
// the other side's role and who dialled: what keeps a provider above p2p.max_peers.
type connOpenings struct {
	roles map[peer.ID]string

	mu     sync.Mutex
	opened map[string]int // "outbound to renter", ...
	closed int
}

func (s *scaleNet) countConnOpenings() *connOpenings {
	c := &connOpenings{roles: map[peer.ID]string{s.coord.ID(): "coordinator"}, opened: map[string]int{}}
	for _, p := range s.providers {
		c.roles[p.ID()] = "provider"
	}
	for _, r := range s.renters {
		c.roles[r.ID()] = "renter"
	}
	for _, p := range s.providers {
		p.Host().Network().Notify(&network.NotifyBundle{
			ConnectedF: func(_ network.Network, conn network.Conn) {
				way := "inbound from"
				if conn.Stat().Direction == network.DirOutbound {
					way = "outbound to"
				}
				role := c.roles[conn.RemotePeer()]
				if role == "" {
					role = "other"
				}
				c.mu.Lock()
				c.opened[way+" "+role]++
				c.mu.Unlock()
			},
			DisconnectedF: func(network.Network, network.Conn) {
				c.mu.Lock()
				c.closed++
				c.mu.Unlock()
			},
		})
	}
	return c
}

// heldBy says why the providers' connections stay open: per provider, the connections and
// the peers the connection manager may not trim (protected: gossip mesh, jobs,
// coordinators), those younger than the grace period, and those older than 5 minutes.
func heldBy(providers []*Node) string {
	var conns, protected, young, old, unknown int
	byTag := map[string]int{}
	tags := []string{"gpunex-bootstrap"}
	for _, t := range []string{protocol.RevocationsTopic, protocol.ScoresTopic, protocol.MarketTopic, protocol.ModelsTopic, protocol.OffersTopic} {
		tags = append(tags, "pubsub:"+t)
	}
	now := time.Now()
	for _, p := range providers {
		cm := p.Host().ConnManager()
		for _, id := range p.Host().Network().Peers() {
			for _, tag := range tags {
				if cm.IsProtected(id, tag) {
					byTag[tag]++
				}
			}
			if cm.IsProtected(id, "") {
				protected++
			}
		}
		for _, c := range p.Host().Network().Conns() {
			conns++
			age := now.Sub(c.Stat().Opened)
			switch {
			case c.Stat().Opened.IsZero():
				unknown++ // mocknet's connections carry no opening time
			case age < p2p.ConnectionGrace:
				young++
			case age > 5*time.Minute:
				old++
			}
		}
	}
	n := float64(max(len(providers), 1))
	var parts []string
	for _, tag := range tags {
		parts = append(parts, fmt.Sprintf("%s %.1f", tag, float64(byTag[tag])/n))
	}
	ages := fmt.Sprintf("connections younger than the grace period (%s) %.1f, older than 5 minutes %.1f", p2p.ConnectionGrace, float64(young)/n, float64(old)/n)
	if unknown > 0 {
		ages = "connections' ages not known (mocknet)"
	}
	return fmt.Sprintf("a provider's connections: %.1f; peers protected from trimming %.1f (by tag: %s); %s",
		float64(conns)/n, float64(protected)/n, strings.Join(parts, ", "), ages)
}

// report says, per provider and minute, how many connections were opened and closed.
func (c *connOpenings) report(providers int, perMin float64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := float64(max(providers, 1))
	total := 0
	var parts []string
	for k, v := range c.opened {
		total += v
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(v)/n*perMin))
	}
	sort.Strings(parts)
	return fmt.Sprintf("connections a provider opened or accepted per minute: %.1f (%s); closed %.1f",
		float64(total)/n*perMin, strings.Join(parts, ", "), float64(c.closed)/n*perMin)
}
