// Package subsystem holds what every subsystem of a node is handed (node/internal/*): the
// node's libp2p peer, its clock, its logger and its metrics. Each subsystem's Deps embeds
// Base and adds what is its own (the ledger stores it uses, its config, its collaborators).
package subsystem

import (
	"log/slog"

	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
)

// Base is what every subsystem is given by node.New.
type Base struct {
	// Peer is the node's libp2p host and key (records are signed with it).
	Peer *p2p.Peer
	// Clock is the node's clock: clock.Fake in tests.
	Clock clock.Clock
	Log   *slog.Logger
	// Metrics is the node's Prometheus registry of its own.
	Metrics *metrics.Metrics
}
