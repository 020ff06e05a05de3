// Package node is the gpunex daemon: it assembles the subsystems of node/internal for the
// node's role (provider, renter or coordinator), registers their stream handlers, starts their
// loops, serves the local API and shuts everything down in reverse order.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpunex/gpunex/bench"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/alerts"
	"github.com/gpunex/gpunex/node/internal/benchmarks"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/jobs"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/models"
	"github.com/gpunex/gpunex/node/internal/money"
	"github.com/gpunex/gpunex/node/internal/offers"
	"github.com/gpunex/gpunex/node/internal/onboarding"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/reliability"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// Deps are the node's outside parts. Every field is optional: New builds the real thing
// from the configuration for each one left empty.
type Deps struct {
	Host   host.Host      // the libp2p host; built from cfg.P2P when nil
	Ledger *ledger.Ledger // opened in DataDir when nil
	// DataDir is where the ledger lives when Ledger is nil.
	DataDir string
	Clock   clock.Clock
	Logger  *slog.Logger
	// Sandbox runs a provider's jobs; when nil, a provider connects to containerd at
	// jobs.containerd_address.
	Sandbox sandbox.Runtime
	// JobsDir holds each job's folder (image archive, log, output); a temporary folder
	// when empty.
	JobsDir string
	// Home is the home folder; relative key file paths in the config are under it.
	Home string
	// PayoutSteps, tests only, is told each step of a coordinator's payout state machine
	// (money.SettlementDeps.PayoutSteps): the kill -9 tests kill the process at one.
	PayoutSteps func(step string) error
}

// Node is a running gpunex daemon.
type Node struct {
	// gpus reads a provider's GPUs for its metrics and dashboard (nil on other roles).
	gpus *gpuCollector
	// home is the node's home folder ("" for a node built without one, in tests).
	home    string
	cfg     config.Config
	log     *slog.Logger
	clock   clock.Clock
	peer    *p2p.Peer
	ledger  *ledger.Ledger
	metrics *metrics.Metrics
	// syncRetrying is set while a join's catalogue sync is retried in the background;
	// joinOffersCame once the offers of the latest join came (a retry asks for the rest).
	syncRetrying, joinOffersCame atomic.Bool
	// joinedAt and modelsSyncedAt are when the node last joined the network and when its
	// model catalogues' sync then ended (unix nanoseconds; the scale harness's account of a
	// join).
	joinedAt, modelsSyncedAt atomic.Int64

	// Every node.
	trust     *offers.Trust
	book      *offers.Book
	catalogue *offers.Catalogue
	scores    *reliability.Book
	market    *money.Market
	models    *models.Book
	alerts    *alerts.Alerter
	// earningsPending is what the coordinators owe this provider (micro-USDC), as they last
	// told it at earningsChecked (Unix seconds; 0 before the first answer): the hourly
	// payouts check asks them.
	earningsPending, earningsChecked atomic.Int64
	wallet                           *money.Wallet
	renter                           *jobs.Renter

	// Provider only (nil otherwise).
	publisher *offers.Publisher
	applicant *onboarding.Applicant
	jobs      *jobs.Runner
	bench     *benchmarks.Runner

	// Coordinator only (nil otherwise).
	coord *onboarding.Coordinator
	// relayDesk is coord for the relay's admission, which libp2p asks from its own
	// goroutines, from before the coordinator is built.
	relayDesk  atomic.Pointer[onboarding.Coordinator]
	settlement *money.Settlement
	benchCoord *benchmarks.Coordinator

	ownsLedger, ownsSandbox bool
	runtime                 sandbox.Runtime
	sandboxStatus           *api.SandboxStatus // a provider's, for its status
	tempJobsDir             string             // removed at Close
	cancel                  context.CancelFunc
	wg                      sync.WaitGroup
	closeOnce               sync.Once
}

// New starts a node: host, DHT, gossip, and the role's subsystems. The caller must Close it.
// It assembles the node in the steps of docs/architecture.md ("Inside a node"): storage
// and trust, network, money, the role's subsystems, then the loops.
func New(ctx context.Context, cfg config.Config, key crypto.PrivKey, d Deps) (_ *Node, err error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	// n, not the named result (which every `return nil, err` sets to nil), is what the
	// deferred Close takes down when a step fails.
	n := &Node{cfg: cfg, log: d.Logger, clock: d.Clock, ledger: d.Ledger}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.clock == nil {
		n.clock = clock.System()
	}
	if off := cfg.Debug.ClockOffset.Duration; off != 0 {
		n.clock = clock.Offset(n.clock, off)
		n.log.Warn("the node's clock is skewed on purpose (debug.clock_offset; tests only)", "offset", off)
	}
	self, err := peer.IDFromPrivateKey(key)
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
	as := &assembly{self: self, run: runCtx}
	if err := n.openStorage(d, as); err != nil {
		return nil, err
	}
	if err := n.joinNetwork(key, d, as); err != nil {
		return nil, err
	}
	if err := n.startMoney(d, as); err != nil {
		return nil, err
	}
	switch cfg.Role {
	case config.RoleProvider:
		err = n.startProvider(ctx, runCtx, d, as.trusted)
	case config.RoleCoordinator:
		err = n.startCoordinator(runCtx, as.trust, as.revocations, as.scores)
	}
	if err != nil {
		return nil, err
	}
	n.startLoops(d, as)
	n.log.Info("node started", "peer_id", self, "role", cfg.Role, "addrs", n.peer.Host.Addrs())
	return n, nil
}

// assembly is what New's steps hand to each other.
type assembly struct {
	self    peer.ID
	run     context.Context // the loops' context, ended by Close
	trusted []peer.ID       // the trusted coordinators; a coordinator trusts itself
	trust   protocol.Trust  // trusted, for the records checked against it
	boot    []peer.AddrInfo
	money   money.Deps
	// The gossip topics the role's subsystems publish on.
	revocations, scores, market *p2p.Topic
}

// openStorage is New's first step: the ledger, the metrics, the model catalogues, the
// trust store and the offer book (loaded from the ledger).
func (n *Node) openStorage(d Deps, as *assembly) (err error) {
	if n.ledger == nil {
		if n.ledger, err = ledger.Open(ledger.Options{Dir: filepath.Clean(d.DataDir), Logger: n.log}); err != nil {
			return err
		}
		n.ownsLedger = true
	}
	if as.trusted, err = n.cfg.TrustedCoordinators(); err != nil {
		return err
	}
	if n.cfg.Role == config.RoleCoordinator {
		as.trusted = append(as.trusted, as.self)
	}
	as.trust = protocol.NewTrust(as.trusted...)
	n.metrics = metrics.New(n.connectedPeers, n.penalisedPeers)
	// The model catalogues come before the trust store, which checks attestations with
	// them; the book gets its peer once the peer exists.
	n.models = models.New(models.Deps{Models: n.ledger.Models, Serials: n.ledger.Serials, Base: n.base(n.log.With("subsystem", "models")),
		Trusted: as.trusted})
	if n.trust, err = offers.NewTrust(n.ledger.Offers, as.trusted, n.models.Lookup); err != nil {
		return err
	}
	n.book = offers.NewBook(n.ledger.Offers, n.trust, n.metrics, n.log.With("subsystem", "offers"), n.clock)
	if err := n.book.Load(); err != nil {
		return fmt.Errorf("load offers seen: %w", err)
	}
	return nil
}

// joinNetwork is New's second step, the parts every node has on the network: the peer
// (host, DHT, gossipsub), the alerter, the score book, the offer catalogue and the market
// book, the gossip topics joined with their validators, and the sync handlers.
func (n *Node) joinNetwork(key crypto.PrivKey, d Deps, as *assembly) (err error) {
	cfg := n.cfg
	if as.boot, err = cfg.BootstrapPeers(); err != nil {
		return err
	}
	if n.peer, err = p2p.New(p2p.Options{Host: d.Host, Key: key, Listen: cfg.P2P.Listen,
		UserAgent: "gpunex/" + api.Version, Bootstrap: as.boot, OfferValidator: n.book.DHTValidator(),
		Reachability: cfg.NodeReachability(), TakeRelaySlots: cfg.Role == config.RoleProvider, MaxPeers: cfg.P2P.MaxPeers, Relay: p2p.Relay{Reservations: cfg.P2P.Relay.Reservations, CircuitsPerPeer: cfg.P2P.Relay.CircuitsPerPeer,
			CircuitDuration: cfg.P2P.Relay.CircuitDuration.Duration, CircuitData: cfg.P2P.Relay.CircuitDataMB << 20,
			MayReserve: n.mayReserveRelay}}); err != nil {
		return err
	}
	for _, c := range n.peer.Counters() {
		n.metrics.CountFrom(c.Name, c.Help, func() float64 { return float64(c.Value()) })
	}
	n.models.UsePeer(n.peer)
	if n.alerts, err = alerts.New(alerts.Deps{Alerts: n.ledger.Alerts, Clock: n.clock, Log: n.log,
		Config: func() config.AlertsConfig { return n.cfg.Alerts }, Node: cfg.Role + " " + as.self.String()}); err != nil {
		return err
	}
	n.scores = reliability.NewBook(n.clock, n.metrics, as.trust)
	if cfg.Role == config.RoleProvider {
		n.scores.KeepOnly(as.self) // a provider keeps its own score, not the network's
		n.keepHistory()
	}
	offersCfg := cfg.Offers
	if cfg.Role != config.RoleRenter {
		offersCfg.Models = nil // providers follow no model, coordinators every one
	}
	n.catalogue = offers.New(offers.Deps{Base: n.base(n.log.With("subsystem", "offers")), Book: n.book, Trust: n.trust,
		Offers: offersCfg, Bootstrap: as.boot, Scores: n.scores, Models: func() []string { return n.models.Names(as.trusted) }})
	stores := money.Stores{Jobs: n.ledger.Jobs, Wallet: n.ledger.Wallet, Own: n.ledger.Provider,
		Escrow: n.ledger.Escrow, Payouts: n.ledger.Payouts, Reliability: n.ledger.Reliability}
	as.money = money.Deps{Base: n.base(n.log.With("subsystem", "money")), Ledger: stores,
		Config: cfg, Home: d.Home}
	n.market = money.NewMarket(as.money, as.trusted)
	if err := n.followOffers(as.trusted); err != nil {
		return err
	}
	if as.revocations, err = n.peer.Join(protocol.RevocationsTopic, n.catalogue.ValidateRevocation); err != nil {
		return err
	}
	if as.scores, err = n.peer.Join(protocol.ScoresTopic, n.scores.Validate); err != nil {
		return err
	}
	if as.market, err = n.peer.Join(protocol.MarketTopic, n.market.Validate); err != nil {
		return err
	}
	modelsTopic, err := n.peer.Join(protocol.ModelsTopic, n.models.Validate)
	if err != nil {
		return err
	}
	n.models.Publish(modelsTopic)
	n.peer.Handle(protocol.OfferSyncProtocol, n.catalogue.HandleSyncStream)
	n.peer.Handle(protocol.ModelsSyncProtocol, n.models.HandleSync)
	n.peer.Handle(protocol.RevocationSyncProtocol, n.catalogue.HandleRevocationSync)
	n.peer.Handle(protocol.ScoreSyncProtocol, n.catalogue.HandleScoreSync)
	return nil
}

// followOffers subscribes a renter to the offer topics of the models it rents
// (offers.models, or every model of its coordinators' catalogues, followed as they grow),
// and a coordinator to every model's and the previous release's. A provider follows none:
// it publishes its own offer and holds no one else's.
func (n *Node) followOffers(trusted []peer.ID) error {
	switch {
	case n.cfg.Role == config.RoleProvider:
		return nil
	case n.cfg.Role == config.RoleCoordinator:
		if err := n.catalogue.FollowPrevious(); err != nil {
			return err
		}
	case len(n.cfg.Offers.Models) > 0:
		return n.catalogue.Follow(n.cfg.Offers.Models)
	}
	n.models.OnChange(func(peer.ID, *protocol.ModelCatalogue, *protocol.ModelCatalogue) {
		if err := n.catalogue.Follow(n.models.Names(trusted)); err != nil {
			n.log.Warn("following the offers of a new model failed", "err", err)
		}
	})
	return n.catalogue.Follow(n.models.Names(trusted))
}

// startMoney is New's third step: a coordinator's settlement, every node's wallet (its own
// settlement on a coordinator) and the renter's side of jobs, which meters as it goes.
func (n *Node) startMoney(d Deps, as *assembly) (err error) {
	if n.cfg.Role == config.RoleCoordinator {
		if n.settlement, err = money.NewSettlement(money.SettlementDeps{Deps: as.money, Offers: n.book,
			Market: n.market, MarketTopic: as.market, PayoutSteps: d.PayoutSteps, Alert: n.alerts.Event}); err != nil {
			return err
		}
	}
	n.wallet = money.NewWallet(as.money, n.settlement)
	n.wallet.SetAlert(n.alerts.Event)
	n.renter = jobs.NewRenter(jobs.RenterDeps{Base: n.base(n.log.With("subsystem", "jobs")), Ledger: n.ledger.Jobs,
		Offers: n.catalogue, Escrow: n.wallet, CheckpointInterval: n.cfg.Jobs.CheckpointInterval.Duration})
	n.goLoop(func() { n.renter.Meter(as.run) })
	return nil
}

// startLoops is New's last step: the deposit claims (providers and renters), the bootstrap
// loop, the book flush and the alerts.
func (n *Node) startLoops(d Deps, as *assembly) {
	if n.cfg.Role != config.RoleCoordinator {
		n.goLoop(func() { n.wallet.ClaimLoop(as.run) })
	}
	n.goLoop(func() {
		joined := p2p.Joined{Sync: n.syncJoined, Announce: n.announce}
		if n.publisher != nil {
			joined.Unheard = n.publisher.Unheard
		}
		n.peer.KeepJoined(as.run, as.boot, n.clock, n.log, joined)
	})
	n.goLoop(func() { n.flushLoop(as.run) })
	if n.cfg.Role != config.RoleProvider { // providers follow no offer topic
		n.goLoop(func() { n.catalogue.WatchGossip(as.run) })
	}
	n.home = d.Home
	alertsDir := d.DataDir
	if alertsDir == "" {
		alertsDir = d.Home
	}
	n.watchAlerts(alertsDir)
	n.goLoop(func() { n.alerts.Loop(as.run) })
}

// startProvider builds a provider's publisher, applicant, job runner and benchmark runner,
// registers their stream handlers and starts their loops.
func (n *Node) startProvider(ctx, runCtx context.Context, d Deps, trusted []peer.ID) (err error) {
	log := n.log.With("subsystem", "provider")
	if n.publisher, err = offers.NewPublisher(offers.PublisherDeps{Base: n.base(log), Own: n.ledger.Provider, Applicant: n.ledger.Applicant, Catalogue: n.catalogue,
		Provider: n.cfg.Provider, Offers: n.cfg.Offers}); err != nil {
		return err
	}
	n.catalogue.OnOwnRevocation(n.publisher.Poke)
	rt, rtErr, dir, err := n.openSandbox(ctx, d)
	if err != nil {
		return err
	}
	// GPUs are named by the model catalogue of the coordinator the benchmarks run against.
	current := func() *protocol.ModelCatalogue {
		if len(trusted) == 0 {
			return protocol.FirstModels()
		}
		return n.models.Current(trusted[0])
	}
	probe := func() (bench.Probe, error) {
		p, err := OpenProbe(n.cfg, n.peer.ID)
		if err != nil {
			return nil, err
		}
		return bench.Named(p, current), nil
	}
	if n.jobs, err = jobs.NewRunner(jobs.Deps{Base: n.base(n.log), Ledger: n.ledger.Jobs,
		Jobs: n.cfg.Jobs, Trusted: trusted, Runtime: rt, RuntimeErr: rtErr, Dir: dir, Probe: probe,
		Publisher: n.publisher, Reports: n.wallet, RuntimeClockOffset: n.cfg.Debug.ClockOffset.Duration}); err != nil {
		return err
	}
	if err := n.jobs.Reconcile(ctx); err != nil {
		n.log.Warn("reconciling jobs after restart failed", "err", err)
	}
	n.bench = benchmarks.NewRunner(benchmarks.Deps{Base: n.base(n.log), Own: n.ledger.Provider, History: n.ledger.History,
		Notifications: n.ledger.Notifications, Serials: n.ledger.Serials, Applicant: n.ledger.Applicant,
		Trusted: trusted, Bench: n.cfg.Bench, Provider: n.cfg.Provider, Probe: probe, Dir: dir,
		Jobs: n.jobs, Publisher: n.publisher, Models: n.models, Alert: n.alerts.Event})
	n.models.OnChange(n.bench.CatalogueChanged)
	n.publisher.UseAttestations(n.bench)
	n.jobs.UseAttestations(n.bench)
	n.jobs.UseHealthCheck(n.bench.CheckGPUs)
	n.applicant = onboarding.NewApplicant(onboarding.ApplicantDeps{Base: n.base(n.log.With("subsystem", "onboarding")), Applicant: n.ledger.Applicant,
		Notifications: n.ledger.Notifications, Serials: n.ledger.Serials,
		Trusted: trusted, Revocations: n.trust,
		Publisher: standingChange{n.publisher, n.bench}, Alert: n.alerts.Event, Detect: func() ([]bench.GPUInfo, error) {
			gpus, err := DetectGPUs(n.cfg, n.peer.ID)
			bench.NameGPUs(gpus, current())
			return gpus, err
		}})

	n.registerProviderTelemetry()
	n.peer.Handle(protocol.JobProtocol, n.jobs.HandleJob)
	n.peer.Handle(protocol.JobControlProtocol, n.jobs.HandleControl)
	n.peer.Handle(protocol.JobInputProtocol, n.jobs.HandleInput)
	n.peer.Handle(protocol.JobTunnelProtocol, n.jobs.HandleTunnel)
	n.publisher.SetMaxInput(n.cfg.Jobs.MaxInputMB << 20) // data in: the largest input, in the offer
	n.peer.Handle(protocol.HoldReleaseProtocol, n.jobs.HandleHoldRelease)
	n.peer.Handle(protocol.JobExecProtocol, n.jobs.HandleExec)
	n.peer.Handle(protocol.OfferProtocol, n.publisher.HandleOfferStream)
	n.peer.Handle(protocol.NotifyProtocol, n.applicant.HandleNotify)
	n.peer.Handle(protocol.BenchChallengeProtocol, n.bench.HandleBenchChallenge)
	n.peer.Handle(protocol.UptimeProtocol, reliability.UptimeHandler(n.peer, n.clock, protocol.NewTrust(trusted...), n.probeAnswered))
	n.goLoop(func() { n.publisher.Run(runCtx) })
	n.goLoop(func() { n.publisher.FollowLoop(runCtx) })
	// New addresses (a relay reservation behind NAT) go into the offer at once.
	n.peer.OnAddrsChanged(runCtx, n.publisher.Poke)
	n.goLoop(func() { n.applicant.Run(runCtx) })
	n.goLoop(func() { n.bench.Loop(runCtx) })
	n.goLoop(func() { n.jobs.CleanupLoop(runCtx) })
	n.goLoop(func() { n.jobs.WatchXIDs(runCtx) })
	n.goLoop(func() { n.wallet.ReportLoop(runCtx) })
	n.goLoop(func() { n.wallet.PayoutSettingsLoop(runCtx) })
	return nil
}

// openSandbox returns the runtime a provider's jobs run in (containerd unless one is given:
// when containerd cannot be reached, rt is nil and rtErr says why, and proposals are refused
// until it is fixed) and the jobs folder.
func (n *Node) openSandbox(ctx context.Context, d Deps) (rt sandbox.Runtime, rtErr error, dir string, err error) {
	rt = d.Sandbox
	if rt == nil {
		j := n.cfg.Jobs
		o := sandbox.ContainerdOptions{Address: j.ContainerdAddress, Namespace: j.Namespace, Owner: n.peer.ID.String(), NoUserNamespaces: !j.UserNamespaces,
			MaxUnpackedBytes: j.MaxImageUnpackedMB << 20, MaxPullBytes: j.MaxImageMB << 20, Registries: j.Registries, PrivateRegistries: j.PrivateRegistries,
			Network: sandbox.NetworkOptions{Policy: j.Egress, Subnet: j.NetworkSubnet, EgressMbps: j.EgressMbps, DNS: j.DNS, Blocked: j.EgressBlocked}}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st := &api.SandboxStatus{}
		n.sandboxStatus = st
		c, err := sandbox.NewContainerd(cctx, o)
		if errors.Is(err, sandbox.ErrNetwork) {
			st.EgressOff = err.Error()
			// Jobs without a network can still run: say why egress is off, and offer none.
			n.log.Warn("jobs get no network: proposals asking for egress will be refused until this is fixed", "jobs.egress", j.Egress, "err", err)
			o.Network = sandbox.NetworkOptions{Policy: protocol.EgressDeny}
			c, err = sandbox.NewContainerd(cctx, o)
		}
		cancel()
		if err != nil {
			rtErr = err
			st.Error, st.Egress = err.Error(), protocol.EgressDeny
			n.log.Warn("jobs cannot run: proposals will be refused until this is fixed", "err", err)
		} else {
			rt, n.ownsSandbox = c, true
		}
	}
	if c, ok := rt.(*sandbox.Containerd); ok {
		policy, mbps := c.Egress()
		if n.sandboxStatus == nil {
			n.sandboxStatus = &api.SandboxStatus{}
		}
		st := n.sandboxStatus
		st.Egress, st.EgressMbps = policy, mbps
		st.UserNamespaces, st.UserNamespacesOff = c.UserNamespaces()
		n.publisher.SetEgress(policy, mbps)
		if policy != protocol.EgressDeny {
			n.log.Info("jobs with egress get their own network", "policy", policy, "mbps_cap", mbps, "subnet", n.cfg.Jobs.NetworkSubnet)
		}
		if ok, _ := c.UserNamespaces(); ok {
			n.log.Info("jobs run in user namespaces of their own")
		}
	}
	n.runtime = rt
	dir = d.JobsDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gpunex-jobs-"); err != nil {
			return nil, nil, "", err
		}
		n.tempJobsDir = dir
	}
	return rt, rtErr, dir, nil
}

// startCoordinator builds a coordinator's review queue, benchmark service and scorer (its
// settlement is built before), registers their stream handlers and starts their loops.
func (n *Node) startCoordinator(runCtx context.Context, trust protocol.Trust, revocations, scores *p2p.Topic) (err error) {
	if n.coord, err = onboarding.NewCoordinator(onboarding.CoordinatorDeps{Base: n.base(n.log),
		Applications: n.ledger.Applications, Links: n.ledger.Links, Serials: n.ledger.Serials,
		Config: n.cfg.Coordinator, Trust: trust,
		Revocations: revocationDesk{n.trust, n.catalogue}, RevocationsTopic: revocations,
		Models: func() *protocol.ModelCatalogue { return n.models.Current(n.peer.ID) }}); err != nil {
		return err
	}
	n.relayDesk.Store(n.coord)
	n.benchCoord = benchmarks.NewCoordinator(benchmarks.CoordinatorDeps{Base: n.base(n.log.With("subsystem", "benchmarks")), Trust: trust,
		Minimum: n.cfg.Coordinator.HostMinimum.Protocol(), Links: n.ledger.Links, Models: n.models, Revocations: n.trust, Applications: n.ledger.Applications,
	})
	scorer := reliability.NewScorer(reliability.ScorerDeps{Base: n.base(n.log.With("subsystem", "reliability")), Reliability: n.ledger.Reliability, Applications: n.ledger.Applications, Serials: n.ledger.Serials,
		Coordinator: n.cfg.Coordinator, Offers: n.book, Topic: scores, CatchUp: n.catalogue.CatchUp})

	n.peer.Handle(protocol.ApplyProtocol, n.coord.HandleApply)
	n.peer.Handle(protocol.BenchNetProtocol, n.benchCoord.HandleBenchNet)
	n.peer.Handle(protocol.BenchNetProtocolV1, n.benchCoord.HandleBenchNetV1)
	n.peer.Handle(protocol.JobReportProtocol, n.settlement.HandleJobReport)
	n.peer.Handle(protocol.WalletProtocol, n.settlement.HandleWallet)
	n.goLoop(func() { n.coord.RenewLoop(runCtx) })
	n.goLoop(func() { n.coord.RemindLoop(runCtx) })
	n.goLoop(func() { n.settlement.Run(runCtx) })
	n.goLoop(func() { scorer.Run(runCtx) })
	n.goLoop(func() { n.models.RepublishLoop(runCtx) })
	return nil
}

// standingChange is what the applicant wakes when this provider's application or
// certificate changes: the publisher (the offer changes) and the benchmarks (a run the
// coordinator refused for want of them is tried again).
type standingChange struct {
	publisher *offers.Publisher
	bench     *benchmarks.Runner
}

func (s standingChange) Poke() {
	s.publisher.Poke()
	s.bench.StandingChanged()
}

// revocationDesk is how a coordinator's onboarding reaches the revocations: the trust store
// knows them, the catalogue takes a new one in.
type revocationDesk struct {
	*offers.Trust
	*offers.Catalogue
}

// syncJoined catches up on what the node missed while out of the network: the model
// catalogues, revocations, scores and offers, side by side, except that the offers wait for
// the catalogues (their attestations are checked with them). Scores waited for the
// catalogues too before: 0.2 to 7 s of a new renter's wait for its providers' scores at 300
// providers in the scale harness (docs/performance.md).
//
// A node that just joined may have one peer, its coordinator, busy serving other syncs:
// then it asks again in the background, 1 s later, then 2, 4, ... up to 64 s (two minutes
// in all), until a peer answers, for what has not come yet; by then it has found other
// peers through the DHT (the scale harness's renters, joining together, held no offer for
// minutes).
func (n *Node) syncJoined(ctx context.Context) {
	n.joinedAt.Store(time.Now().UnixNano())
	models := make(chan struct{})
	go func() {
		defer close(models)
		n.models.SyncTrusted(ctx)
		n.modelsSyncedAt.Store(time.Now().UnixNano())
	}()
	answered, offersCame := n.catalogue.SyncJoined(ctx, models, true)
	n.joinOffersCame.Store(offersCame) // a join while the retries run starts them over
	<-models
	if answered || !n.syncRetrying.CompareAndSwap(false, true) {
		return
	}
	n.goLoop(func() {
		defer n.syncRetrying.Store(false)
		for wait := time.Second; wait <= 64*time.Second; wait *= 2 {
			select {
			case <-ctx.Done():
				return
			case <-n.clock.After(wait):
			}
			// Offers that came are not asked for again (the largest answer by far).
			answered, got := n.catalogue.SyncJoined(ctx, nil, !n.joinOffersCame.Load())
			if answered {
				return
			}
			if got {
				n.joinOffersCame.Store(true)
			}
		}
	})
}

// announce makes a provider publish to the network it just joined, and once more when the
// gossip mesh has formed (its heartbeat is one second).
func (n *Node) announce() {
	if n.publisher == nil {
		return
	}
	n.publisher.Poke()
	go func() {
		<-n.clock.After(3 * time.Second)
		n.publisher.Poke()
	}()
}

func (n *Node) connectedPeers() float64 {
	if n.peer == nil {
		return 0
	}
	return float64(n.peer.Connected())
}

func (n *Node) penalisedPeers() float64 {
	if n.peer == nil {
		return 0
	}
	return n.peer.PenalisedPeers()
}

func (n *Node) goLoop(f func()) {
	n.wg.Add(1)
	go func() { defer n.wg.Done(); f() }()
}

// flushLoop writes the offers seen to the ledger every few seconds.
func (n *Node) flushLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.clock.After(5 * time.Second):
			if err := n.book.Flush(); err != nil {
				n.log.Warn("saving offers seen failed", "err", err)
			}
		}
	}
}

// ID returns the node's peer ID.
func (n *Node) ID() peer.ID { return n.peer.ID }

// Host returns the libp2p host.
func (n *Node) Host() host.Host { return n.peer.Host }

// Metrics returns the node's metrics.
func (n *Node) Metrics() *metrics.Metrics { return n.metrics }

// Role returns the node's role.
func (n *Node) Role() string { return n.cfg.Role }

// Addrs returns the node's full multiaddrs (with /p2p/<id>).
func (n *Node) Addrs() []string { return n.peer.Addrs() }

// Close withdraws a provider's offer, stops its jobs and reports them, then stops every
// loop and closes the gossip topics, the DHT, the host and the ledger, within ctx's
// deadline: the reverse of New.
func (n *Node) Close(ctx context.Context) error {
	var errs []error
	n.closeOnce.Do(func() {
		if n.publisher != nil {
			n.publisher.Withdraw(ctx, "provider shutting down")
		}
		if n.runtime != nil && n.jobs == nil && n.ownsSandbox {
			n.runtime.Close() // the job runner never started: the containerd client is closed all the same
		}
		if n.jobs != nil && n.runtime != nil {
			n.jobs.StopAll(ctx, "provider shutting down")
			if n.ownsSandbox {
				n.runtime.Close()
			}
			// The jobs just stopped are reported now, while the host is up (else at
			// the next start), within a few seconds of the shutdown's time.
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			n.wallet.DeliverReports(rctx)
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
			errs = append(errs, n.book.Flush())
		}
		if n.peer != nil {
			errs = append(errs, n.peer.Close())
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

// mayReserveRelay says whether a peer may hold a slot in this coordinator's relay: the
// providers it certified (docs/operations.md, "NAT traversal").
func (n *Node) mayReserveRelay(p peer.ID) bool {
	c := n.relayDesk.Load()
	return c != nil && c.Certified(p)
}

// base is what every subsystem is handed: the node's peer, clock and metrics, and log.
func (n *Node) base(log *slog.Logger) subsystem.Base {
	return subsystem.Base{Peer: n.peer, Clock: n.clock, Log: log, Metrics: n.metrics}
}
