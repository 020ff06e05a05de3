// Package node is the gpunex daemon: a libp2p host with the private DHT and gossipsub, the
// provider, renter and coordinator roles, the local API, and the devnet.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// Version is the node software version, set at build time with -ldflags.
var Version = "0.1.0-dev"

// Deps are the node's outside parts. Every field is optional: New builds the real thing
// from the configuration for each one left empty.
type Deps struct {
	Host   host.Host      // the libp2p host; built from cfg.P2P when nil
	Ledger *ledger.Ledger // opened in DataDir when nil
	// DataDir is where the ledger lives when Ledger is nil.
	DataDir string
	Clock   Clock
	Logger  *slog.Logger
	// Sandbox runs a provider's jobs; when nil, a provider connects to containerd at
	// jobs.containerd_address.
	Sandbox sandbox.Runtime
	// JobsDir holds each job's folder (image archive, log, output); a temporary folder
	// when empty.
	JobsDir string
	// Home is the home folder; relative key file paths in the config are under it.
	Home string
}

// Node is a running gpunex daemon.
type Node struct {
	cfg     Config
	key     crypto.PrivKey
	id      peer.ID
	log     *slog.Logger
	clock   Clock
	host    host.Host
	dht     *dht.IpfsDHT
	ps      *pubsub.PubSub
	topic   *pubsub.Topic
	sub     *pubsub.Subscription
	ledger  *ledger.Ledger
	book    *offerBook
	trust   *trustStore
	metrics *Metrics
	prov    *provider // nil unless the role is provider
	// applicant is the provider's onboarding; nil unless the role is provider.
	applicant *applicant
	// coord is the coordinator's onboarding; nil unless the role is coordinator.
	coord    *coordinator
	jobs     *jobRunner   // nil unless the role is provider
	bench    *benchRunner // nil unless the role is provider
	revTopic *pubsub.Topic
	revSub   *pubsub.Subscription
	// Scores: every node keeps the latest score records; a coordinator makes them.
	reliability scoreBook
	scoreTopic  *pubsub.Topic
	scoreSub    *pubsub.Subscription
	scores      gossipScores
	// syncSlots bounds the catalogue syncs served at once.
	syncSlots chan struct{}
	home      string
	// money is the coordinator's settlement (nil on other roles); market the latest market
	// statistics every node keeps.
	money       *settlement
	market      marketBook
	marketTopic *pubsub.Topic
	marketSub   *pubsub.Subscription

	ownsHost, ownsLedger, ownsSandbox bool
	tempJobsDir                       string // removed at Close
	cancel                            context.CancelFunc
	wg                                sync.WaitGroup
	closeOnce                         sync.Once
}

// New starts a node: host, DHT, gossip, and the role's loops. The caller must Close it.
func New(ctx context.Context, cfg Config, key crypto.PrivKey, d Deps) (n *Node, err error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	n = &Node{cfg: cfg, key: key, log: d.Logger, clock: d.Clock, host: d.Host, ledger: d.Ledger, syncSlots: make(chan struct{}, maxSyncServing), home: d.Home}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.clock == nil {
		n.clock = SystemClock()
	}
	n.id, err = peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	defer func() {
		if err != nil {
			n.Close(context.Background())
		}
	}()

	if n.ledger == nil {
		n.ledger, err = ledger.Open(ledger.Options{Dir: filepath.Clean(d.DataDir), Logger: n.log})
		if err != nil {
			return nil, err
		}
		n.ownsLedger = true
	}
	if n.host == nil {
		n.host, err = libp2p.New(
			libp2p.Identity(key),
			libp2p.ListenAddrStrings(cfg.P2P.Listen...),
			libp2p.UserAgent("gpunex/"+Version),
		)
		if err != nil {
			return nil, fmt.Errorf("start libp2p host on %v: %w", cfg.P2P.Listen, err)
		}
		n.ownsHost = true
	}
	if n.host.ID() != n.id {
		return nil, errors.New("host identity differs from the node key")
	}
	n.metrics = newMetrics(func() float64 { return float64(len(n.host.Network().Peers())) }, n.scores.negative)
	trusted, err := cfg.TrustedCoordinators()
	if err != nil {
		return nil, err
	}
	if cfg.Role == RoleCoordinator {
		trusted = append(trusted, n.id)
	}
	if n.trust, err = newTrustStore(n.ledger, trusted); err != nil {
		return nil, err
	}
	n.book = newOfferBook(n.ledger, n.trust, n.metrics, n.log.With("subsystem", "offers"), n.clock)
	if err := n.book.load(); err != nil {
		return nil, fmt.Errorf("load offers seen: %w", err)
	}

	boot, err := cfg.BootstrapPeers()
	if err != nil {
		return nil, err
	}
	n.dht, err = dht.New(n.host,
		dht.Mode(dht.ModeServer),
		dht.ProtocolPrefix(protocol.DHTProtocolPrefix),
		dht.Validator(record.NamespacedValidator{protocol.OfferNamespace: dhtValidator{n.book}}),
		dht.BootstrapPeers(boot...),
	)
	if err != nil {
		return nil, fmt.Errorf("start DHT: %w", err)
	}
	n.ps, err = pubsub.NewGossipSub(runCtx, n.host, append([]pubsub.Option{
		pubsub.WithFloodPublish(true),
		pubsub.WithMaxMessageSize(256 << 10), // an offer (protocol.MaxOfferSize) with room to spare
	}, gossipScoreOptions(n.scores.record)...)...)
	if err != nil {
		return nil, fmt.Errorf("start gossipsub: %w", err)
	}
	if err := n.ps.RegisterTopicValidator(protocol.OffersTopic, n.validateGossip); err != nil {
		return nil, err
	}
	if n.topic, err = n.ps.Join(protocol.OffersTopic); err != nil {
		return nil, err
	}
	if n.sub, err = n.topic.Subscribe(); err != nil {
		return nil, err
	}
	n.host.SetStreamHandler(protocol.OfferSyncProtocol, n.handleSyncStream)
	if err := n.ps.RegisterTopicValidator(protocol.RevocationsTopic, n.validateRevocation); err != nil {
		return nil, err
	}
	if n.revTopic, err = n.ps.Join(protocol.RevocationsTopic); err != nil {
		return nil, err
	}
	if n.revSub, err = n.revTopic.Subscribe(); err != nil {
		return nil, err
	}
	n.host.SetStreamHandler(protocol.RevocationSyncProtocol, n.handleRevocationSync)
	n.reliability.scores = map[peer.ID]*protocol.SignedScore{}
	if err := n.ps.RegisterTopicValidator(protocol.ScoresTopic, n.validateScore); err != nil {
		return nil, err
	}
	if n.scoreTopic, err = n.ps.Join(protocol.ScoresTopic); err != nil {
		return nil, err
	}
	if n.scoreSub, err = n.scoreTopic.Subscribe(); err != nil {
		return nil, err
	}
	if err := n.ps.RegisterTopicValidator(protocol.MarketTopic, n.validateMarket); err != nil {
		return nil, err
	}
	if n.marketTopic, err = n.ps.Join(protocol.MarketTopic); err != nil {
		return nil, err
	}
	if n.marketSub, err = n.marketTopic.Subscribe(); err != nil {
		return nil, err
	}
	n.goLoop(func() { drain(runCtx, n.marketSub) })
	n.goLoop(func() { drain(runCtx, n.scoreSub) })
	n.goLoop(func() { drain(runCtx, n.revSub) })

	n.goLoop(func() { drain(runCtx, n.sub) })
	n.goLoop(func() { n.bootstrapLoop(runCtx, boot) })
	n.goLoop(func() { n.flushLoop(runCtx) })
	if cfg.Role == RoleProvider {
		n.prov, err = newProvider(n)
		if err != nil {
			return nil, err
		}
		n.applicant = newApplicant(n)
		if err := n.startJobs(ctx, d); err != nil {
			return nil, err
		}
		n.bench = newBenchRunner(n, n.jobs.dir)
		n.host.SetStreamHandler(protocol.OfferProtocol, n.handleOfferStream)
		n.host.SetStreamHandler(protocol.NotifyProtocol, n.handleNotify)
		n.host.SetStreamHandler(protocol.BenchChallengeProtocol, n.handleBenchChallenge)
		n.host.SetStreamHandler(protocol.UptimeProtocol, n.handleUptime)
		n.goLoop(func() { n.prov.run(runCtx) })
		n.goLoop(func() { n.applicant.run(runCtx) })
		n.goLoop(func() { n.bench.loop(runCtx) })
		n.goLoop(func() { n.reportLoop(runCtx) })
		n.goLoop(func() { n.payoutSettingsLoop(runCtx) })
	}
	if cfg.Role != RoleCoordinator {
		n.goLoop(func() { n.claimLoop(runCtx) })
	}
	if cfg.Role == RoleCoordinator {
		if n.coord, err = newCoordinator(n); err != nil {
			return nil, err
		}
		n.host.SetStreamHandler(protocol.ApplyProtocol, n.coord.handleApply)
		n.goLoop(func() { n.coord.renewLoop(runCtx) })
		n.host.SetStreamHandler(protocol.BenchNetProtocol, n.handleBenchNet)
		n.host.SetStreamHandler(protocol.JobReportProtocol, n.handleJobReport)
		if n.money, err = newSettlement(n); err != nil {
			return nil, err
		}
		n.host.SetStreamHandler(protocol.WalletProtocol, n.money.handleWallet)
		n.goLoop(func() { n.money.loop(runCtx) })
		sc := &scorer{n: n}
		n.goLoop(func() { sc.loop(runCtx) })
	}
	n.log.Info("node started", "peer_id", n.id, "role", cfg.Role, "addrs", n.host.Addrs())
	return n, nil
}

// startJobs sets up the provider's job runner: the sandbox runtime (containerd unless one is
// given), the jobs folder, the job streams, and the reconciliation of jobs left running.
func (n *Node) startJobs(ctx context.Context, d Deps) error {
	rt := d.Sandbox
	var rtErr error
	if rt == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := sandbox.NewContainerd(cctx, sandbox.ContainerdOptions{Address: n.cfg.Jobs.ContainerdAddress, Namespace: n.cfg.Jobs.Namespace})
		cancel()
		if err != nil {
			rtErr = err
			n.log.Warn("jobs cannot run: proposals will be refused until this is fixed", "err", err)
		} else {
			rt, n.ownsSandbox = c, true
		}
	}
	dir := d.JobsDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gpunex-jobs-"); err != nil {
			return err
		}
		n.tempJobsDir = dir
	}
	var err error
	if n.jobs, err = newJobRunner(n, rt, rtErr, dir); err != nil {
		return err
	}
	if err := n.jobs.reconcile(ctx); err != nil {
		n.log.Warn("reconciling jobs after restart failed", "err", err)
	}
	n.host.SetStreamHandler(protocol.JobProtocol, n.jobs.handleJob)
	n.host.SetStreamHandler(protocol.JobControlProtocol, n.jobs.handleControl)
	n.host.SetStreamHandler(protocol.HoldReleaseProtocol, n.jobs.handleHoldRelease)
	return nil
}

func (n *Node) goLoop(f func()) {
	n.wg.Add(1)
	go func() { defer n.wg.Done(); f() }()
}

// ID returns the node's peer ID.
func (n *Node) ID() peer.ID { return n.id }

// Host returns the libp2p host.
func (n *Node) Host() host.Host { return n.host }

// Metrics returns the node's metrics.
func (n *Node) Metrics() *Metrics { return n.metrics }

// Role returns the node's role.
func (n *Node) Role() string { return n.cfg.Role }

// Addrs returns the node's full multiaddrs (with /p2p/<id>).
func (n *Node) Addrs() []string {
	var out []string
	for _, a := range n.host.Addrs() {
		out = append(out, a.String()+"/p2p/"+n.id.String())
	}
	return out
}

// Close withdraws a provider's offer, then stops every loop and closes the DHT, gossip,
// host and ledger, within ctx's deadline.
func (n *Node) Close(ctx context.Context) error {
	var errs []error
	n.closeOnce.Do(func() {
		if n.prov != nil {
			n.prov.withdraw(ctx, "provider shutting down")
		}
		if n.jobs != nil && n.jobs.rt != nil {
			n.jobs.stopAll(ctx, "provider shutting down")
			if n.ownsSandbox {
				n.jobs.rt.Close()
			}
			// The jobs just stopped are reported now, while the host is up (else at
			// the next start), within a few seconds of the shutdown's time.
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			n.deliverReports(rctx)
			cancel()
		}
		if n.cancel != nil {
			n.cancel()
		}
		done := make(chan struct{})
		go func() { n.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("node loops did not stop in time: %w", ctx.Err()))
		}
		if n.book != nil && n.ledger != nil {
			errs = append(errs, n.book.flush())
		}
		for _, sub := range []*pubsub.Subscription{n.sub, n.revSub, n.scoreSub} {
			if sub != nil {
				sub.Cancel()
			}
		}
		for _, t := range []*pubsub.Topic{n.topic, n.revTopic, n.scoreTopic} {
			if t != nil {
				t.Close()
			}
		}
		if n.dht != nil {
			errs = append(errs, n.dht.Close())
		}
		if n.ownsHost && n.host != nil {
			errs = append(errs, n.host.Close())
		}
		if n.ownsLedger && n.ledger != nil {
			errs = append(errs, n.ledger.Close())
		}
		if n.tempJobsDir != "" {
			os.RemoveAll(n.tempJobsDir)
		}
	})
	return errors.Join(errs...)
}

// validateGossip is the offers topic validator: replays and expired records are ignored,
// anything else that fails is rejected, which lowers the sender's gossip score
// (gossipscore.go).
func (n *Node) validateGossip(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	_, _, err := n.book.accept(msg.Data, "gossip")
	switch {
	case err == nil:
		return pubsub.ValidationAccept
	case errors.Is(err, protocol.ErrReplay), errors.Is(err, protocol.ErrExpired), errors.Is(err, protocol.ErrFuture),
		errors.Is(err, protocol.ErrRevoked), errors.Is(err, protocol.ErrUntrusted):
		// Stale, early (clock skew), revoked since it was sent, or certified by a
		// coordinator another node trusts: an honest relay can forward these, so they
		// cost it nothing.
		return pubsub.ValidationIgnore
	default:
		return pubsub.ValidationReject
	}
}

// drain reads a subscription; the topic's validator has already taken each message in.
func drain(ctx context.Context, sub *pubsub.Subscription) {
	for {
		if _, err := sub.Next(ctx); err != nil {
			return
		}
	}
}

// bootstrapLoop connects to the bootstrap peers until connected, and again whenever the
// node finds itself alone; it refreshes the DHT routing table after each reconnection.
func (n *Node) bootstrapLoop(ctx context.Context, boot []peer.AddrInfo) {
	if len(boot) == 0 {
		return
	}
	// alone is true at start and whenever every peer is gone. The DHT may connect to the
	// bootstrap peers by itself, so joining is noticed by having peers, not by connecting.
	alone := true
	for {
		if len(n.host.Network().Peers()) == 0 {
			alone = true
			for _, ai := range boot {
				if ai.ID == n.id {
					continue
				}
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := n.host.Connect(cctx, ai)
				cancel()
				if err != nil {
					n.log.Debug("bootstrap peer unreachable", "peer", ai.ID, "err", err)
				}
			}
		}
		if peers := len(n.host.Network().Peers()); alone && peers > 0 {
			alone = false
			n.log.Info("joined the network", "peers", peers)
			n.syncOffers(ctx)
			select {
			case <-n.dht.RefreshRoutingTable():
			case <-ctx.Done():
				return
			}
			if n.prov != nil {
				// Announce to the network just joined, and once more when the gossip
				// mesh has formed (its heartbeat is one second).
				n.prov.poke()
				time.AfterFunc(3*time.Second, n.prov.poke)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// flushLoop writes the offers seen to the ledger every few seconds.
func (n *Node) flushLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
			if err := n.book.flush(); err != nil {
				n.log.Warn("saving offers seen failed", "err", err)
			}
		}
	}
}

// ErrNotFound is returned when something asked for does not exist.
var ErrNotFound = errors.New("not found")
