package benchmarks

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// A coordinator's side of the benchmarks: the transfer turn the bench-net stream's runs
// share, the budgets of its peers, and asking a provider to benchmark now.

// CoordinatorDeps are what a coordinator's side of the benchmarks needs.
type CoordinatorDeps struct {
	subsystem.Base // the peer, clock, logger and metrics of the node
	// Trust checks the providers' attestations (the coordinator trusts itself).
	Trust protocol.Trust
	// Minimum is the listing minimum it holds providers to (coordinator.host_minimum).
	Minimum protocol.HostMinimum
	// Links keeps the latest measurement of each provider's link, for its review.
	Links Links
	// Models holds the coordinator's model catalogue, which its challenges name.
	Models Catalogues
	// Revocations and Applications tell whether a provider's certificate was revoked and
	// whether its application is open: only certified providers and applicants get the
	// transfer turn. Without them, nobody is certified or applying.
	Revocations  Revocations
	Applications Applications
}

// Links keeps a coordinator's measurements of providers' links (the ledger).
type Links interface {
	SetLinkMeasurement(ledger.LinkMeasurement) error
}

// Coordinator serves the providers' network benchmark and challenges (bench-net stream) and
// asks providers to benchmark now.
type Coordinator struct {
	peer    *p2p.Peer
	clock   clock.Clock
	metrics *metrics.Metrics
	trust   protocol.Trust
	models  Catalogues
	// rate bounds the bench-net streams of each peer; bytes their transfers, per peer and
	// per network.
	rate    *p2p.PeerRate
	bytes   *p2p.Sources
	minimum protocol.HostMinimum
	links   Links
	log     *slog.Logger

	// The transfer turn (turns.go). turn lets one run's transfers go at a time, so that
	// what the coordinator measures is the provider's link, not the other runs sharing the
	// coordinator's; revoked and apps judge who may have it; applicantNets rations the
	// applicants' turns per network, turns every peer's.
	turn          turnQueue
	revoked       Revocations
	apps          Applications
	applicantNets *p2p.NetworkBudget
	// turns are the transfer turns taken in the last hour, per peer: turnsPerHour each
	// (the package's tests, which run many times a minute, raise it).
	turns *p2p.PeerRate
}

// benchRunsPerMinute bounds the bench-net streams a peer opens in a minute.
const benchRunsPerMinute = 6

// BenchBytesPerHour is how many bytes of bench-net transfers one peer may ask for an hour
// (both ways; one full run, 128 MiB, at once); its network (IPv4 address, IPv6 /64) four
// times that.
// A run at the largest size (64 MiB each way) takes 128 MiB.
const BenchBytesPerHour = 512 << 20

// NewCoordinator returns a coordinator's side of the benchmarks.
func NewCoordinator(d CoordinatorDeps) *Coordinator {
	c := &Coordinator{peer: d.Peer, clock: d.Clock, metrics: d.Metrics, trust: d.Trust, models: d.Models,
		rate: p2p.NewPeerRate(benchRunsPerMinute), bytes: p2p.NewSources(float64(BenchBytesPerHour)/60, 2*protocol.MaxBenchTransfer, 4),
		minimum: d.Minimum, links: d.Links, log: d.Log, revoked: d.Revocations, apps: d.Applications,
		applicantNets: p2p.NewNetworkBudget(applicantTurnsPerNetwork/60.0, applicantTurnsPerNetwork), turns: p2p.NewPeerRateOver(turnsPerHour, time.Hour)}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// ChallengeProvider asks a provider to run its benchmarks now (a coordinator's request):
// the provider answers once the new attestation is signed, and returns it.
func (c *Coordinator) ChallengeProvider(ctx context.Context, p peer.ID) (*protocol.SignedAttestation, error) {
	s, err := c.peer.OpenStream(ctx, p, protocol.BenchChallengeProtocol)
	if err != nil {
		return nil, fmt.Errorf("reach provider %s: %w", p, err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Minute))
	s.CloseWrite()
	var reply protocol.BenchNetMsg
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxBenchChallengeAnswer, &reply); err != nil {
		return nil, fmt.Errorf("provider's answer: %w", err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("provider %s: %s", p, reply.Error)
	}
	a, err := protocol.CheckAttestation(reply.Record, c.clock.Now(), c.trust, c.models.Lookup)
	if err != nil {
		return nil, fmt.Errorf("provider's attestation: %w", err)
	}
	if a.Signer != p || a.Challenge.Coordinator != c.peer.ID.String() {
		return nil, fmt.Errorf("%w: attestation by %s on a challenge of %s", protocol.ErrWrongSigner, a.Signer, a.Challenge.Coordinator)
	}
	return a, nil
}
