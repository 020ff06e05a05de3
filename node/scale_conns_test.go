//go:build scale

package node

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
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
