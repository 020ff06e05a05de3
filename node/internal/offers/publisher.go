package offers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"

	"github.com/ipfs/go-cid"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Attestations are the provider's benchmark results as its offer shows them.
type Attestations interface {
	// Latest is the latest benchmark attestation (nil when none).
	Latest() *protocol.SignedAttestation
	// Delisted counts, per model, the GPUs under a benchmark threshold.
	Delisted() map[string]int
}

// PublisherDeps are what a provider's publisher needs.
type PublisherDeps struct {
	subsystem.Base // the peer, clock, logger and metrics of the node
	// Own keeps the provider's prices, offer sequence, availability and maintenance;
	// Applicant its certificate, which every offer carries.
	Own       *ledger.ProviderStore
	Applicant *ledger.ApplicantStore
	Catalogue *Catalogue
	Provider  config.ProviderConfig
	Offers    config.OffersConfig
}

// Publisher announces this node's offer: on start, on every price change, at every
// availability-window boundary, every republish interval, and (withdrawn) at shutdown.
type Publisher struct {
	peer      *p2p.Peer
	id        peer.ID
	own       *ledger.ProviderStore
	applicant *ledger.ApplicantStore
	catalogue *Catalogue
	// topics are the offer topics the offer is published on, without subscribing: each
	// declared model's and the previous release's (topics.go).
	topics  []*p2p.Topic
	metrics *metrics.Metrics
	log     *slog.Logger
	clock   clock.Clock
	cfg     config.OffersConfig

	region string
	base   []protocol.OfferGPUs // declared in config, with configured prices

	wake       chan struct{}
	followWake chan struct{} // a new availability was set: FollowLoop reads its deadline again
	announce   chan []byte   // latest record for the DHT announcer; holds at most one

	mu sync.Mutex
	// bench is the benchmark runner (nil before UseAttestations): the offer then carries
	// no attestation.
	bench   Attestations
	current *protocol.SignedOffer
	// egress and egressMbps are what jobs with egress get here (SetEgress); "" or
	// EgressDeny: no network.
	egress     string
	egressMbps int64
	// maxInput is the largest input a job may bring (SetMaxInput); 0: none.
	maxInput int64
	closed   bool
	// sched is the availability in force: set while running (ledger) or else configSched.
	sched       protocol.Schedule
	configSched protocol.Schedule
}

// ErrUnknownModel is returned when a price is set for a model the provider does not declare.
var ErrUnknownModel = errors.New("model not declared in [[provider.gpus]]")

// ErrBadPrice is returned for a price out of range.
var ErrBadPrice = errors.New("price out of range")

// NewPublisher returns the publisher of a provider's offer; Run starts it.
func NewPublisher(d PublisherDeps) (*Publisher, error) {
	sched, err := d.Provider.Schedule()
	if err != nil {
		return nil, err
	}
	items, err := d.Provider.Items()
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		peer: d.Peer, id: d.Peer.ID, own: d.Own, applicant: d.Applicant, catalogue: d.Catalogue,
		metrics: d.Metrics, log: d.Log, clock: d.Clock, cfg: d.Offers,
		sched: sched, configSched: sched, base: items,
		region:     protocol.NormalizeRegion(d.Provider.Region),
		wake:       make(chan struct{}, 1),
		followWake: make(chan struct{}, 1),
		announce:   make(chan []byte, 1),
	}
	var models []string
	for _, g := range items {
		models = append(models, g.Model)
	}
	for _, name := range topicsOf(models) {
		t, err := d.Peer.JoinToPublish(name)
		if err != nil {
			return nil, err
		}
		p.topics = append(p.topics, t)
	}
	set, err := d.Own.Availability()
	if err != nil {
		return nil, err
	}
	if set != nil {
		if p.sched, err = protocol.ParseSchedule(set.Timezone, set.Windows); err != nil {
			p.sched = sched
			p.log.Warn("the availability set while running is unreadable; using the config's", "err", err)
		}
	}
	return p, nil
}

// Poke asks the loop to publish now.
func (p *Publisher) Poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run publishes until ctx ends, and returns once its helper loops (DHT announcements, the
// gossip-peer watcher) have ended too: the node closes its peer after Run returns.
func (p *Publisher) Run(ctx context.Context) {
	var helpers sync.WaitGroup
	defer helpers.Wait()
	helpers.Go(func() { p.announceLoop(ctx) })
	helpers.Go(func() { p.gossipPeersLoop(ctx) })
	lastErr := ""
	for {
		if err := p.publish(ctx); err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			if errors.Is(err, errNotCertified) {
				p.log.Info("offer not published", "why", err)
			} else {
				p.log.Warn("publishing offer failed", "err", err)
			}
		} else if err == nil {
			lastErr = ""
		}
		// Up to a tenth early, at random: providers that started together (a farm after a
		// power cut, a network's first day) drift apart instead of republishing in bursts.
		wait := p.cfg.Republish.Duration
		wait -= time.Duration(rand.Int64N(int64(wait/10) + 1))
		now := p.clock.Now()
		if next, ok := p.Schedule().NextChange(now); ok && next.Sub(now) < wait {
			wait = next.Sub(now)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-p.clock.After(wait):
		}
	}
}

// gossipPeersLoop publishes again whenever the node goes from no gossip peer on one of its
// offer topics to one: a record published while alone (at start, or after losing every peer)
// reached nobody, and waiting for the republish interval would keep the offer out of other
// nodes' books for that long. It also publishes when a bootstrap peer (a coordinator, which
// probes and scores by the offer) joins again: gossip with it may have been cut (p2p's
// repairGossip), and what was published meanwhile did not reach it.
func (p *Publisher) gossipPeersLoop(ctx context.Context) {
	boot := map[peer.ID]bool{}
	for _, ai := range p.catalogue.boot {
		boot[ai.ID] = true
	}
	var watchers sync.WaitGroup
	for _, t := range p.topics {
		watchers.Go(func() {
			err := t.WhenPeerJoins(ctx, func(id peer.ID, first bool) {
				if first || boot[id] {
					p.Poke()
				}
			})
			if err != nil {
				p.log.Warn("watching gossip peers failed", "err", err)
			}
		})
	}
	watchers.Wait()
}

// Unheard says whether one of the topics the current offer travels on has no coordinator
// (bootstrap peer) among its gossip peers: a publication there reaches at most renters, or
// nobody, and the coordinator, which probes and scores by the offer, lacks it
// (p2p.Joined.Unheard). Other subscribers do not count: a stranger subscribing to the topic
// would otherwise keep the provider from dialling its coordinator while it swallowed the
// offer.
func (p *Publisher) Unheard() bool {
	cur := p.Current()
	if cur == nil {
		return false
	}
	for _, t := range p.topics {
		if carries(cur, t.Name()) && !t.HasPeerAmong(p.catalogue.boot) {
			return true
		}
	}
	return false
}

// build makes the offer as it stands at now: declared GPUs with current prices, or a
// withdrawal outside the availability windows.
func (p *Publisher) build(now time.Time, withdrawn string) (protocol.Offer, error) {
	cert, err := p.certificate(now)
	if err != nil {
		return protocol.Offer{}, err
	}
	o := protocol.Offer{
		Certificate:  cert.Raw,
		Version:      protocol.OfferVersion,
		Provider:     p.id.String(),
		IssuedAt:     now.UTC().Truncate(time.Millisecond),
		Region:       p.region,
		Availability: p.sched.String(),
		Addrs:        p.peer.Addrs(),
	}
	o.ExpiresAt = o.IssuedAt.Add(p.cfg.TTL.Duration)
	if p.egress != "" && p.egress != protocol.EgressDeny { // (p.mu is held)
		o.Egress, o.EgressMbps = p.egress, p.egressMbps
	}
	o.MaxInputBytes = p.maxInput
	o.Maintenance = p.MaintenanceWindows(now)
	if len(o.Addrs) > 16 {
		o.Addrs = o.Addrs[:16]
	}
	if withdrawn == "" && !p.sched.Open(now) {
		withdrawn = "outside availability window"
		if next, ok := p.sched.NextChange(now); ok {
			withdrawn += "; back at " + next.UTC().Format(time.RFC3339)
		}
	}
	if withdrawn != "" {
		o.Withdrawn = withdrawn
		return o, nil
	}
	prices, err := p.own.Prices()
	if err != nil {
		return o, err
	}
	var delisted map[string]int
	if p.bench != nil {
		a := p.bench.Latest()
		if a != nil && now.Sub(a.Challenge.IssuedAt) < protocol.MaxAttestationAge {
			o.Attestation = a.Raw
		}
		if a != nil && a.HostBelow != "" {
			o.Withdrawn = "delisted: " + a.HostBelow
			if len(o.Withdrawn) > 256 {
				o.Withdrawn = o.Withdrawn[:253] + "..."
			}
			return o, nil
		}
		// GPUs under a threshold stay out until a run passes, even once the attestation is
		// too old to attach (jobs refuse them the same way).
		delisted = p.bench.Delisted()
	}
	for _, g := range p.base {
		if v, ok := prices[g.Model]; ok {
			g.PricePerGPUHour = v
		}
		// Offer only what the certificate approves.
		approved := 0
		for _, a := range cert.GPUs {
			if a.Model == g.Model {
				approved = a.Count
			}
		}
		if g.Count > approved {
			p.log.Warn("declared GPUs exceed the certificate; offering the approved count", "model", g.Model, "declared", g.Count, "approved", approved)
			g.Count = approved
		}
		g.Count -= delisted[g.Model] // under a benchmark threshold: see gpunex notifications
		if g.Count > 0 {
			o.GPUs = append(o.GPUs, g)
		}
	}
	if len(o.GPUs) == 0 {
		o.Withdrawn = "no GPU approved by the certificate and passing the benchmarks"
	}
	return o, nil
}

// errNotCertified means the provider holds no usable certificate: it publishes nothing.
var errNotCertified = errors.New("not certified")

// errShuttingDown answers a change asked of a publisher that has withdrawn its offer.
var errShuttingDown = errors.New("the provider is shutting down: try again once it has restarted")

// certificate returns the provider's certificate if it is valid now: issued by a trusted
// coordinator, unexpired, unrevoked.
func (p *Publisher) certificate(now time.Time) (*protocol.SignedCertificate, error) {
	raw, err := p.applicant.OwnCertificate()
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("%w: no certificate yet (apply with `gpunex apply`; offers are published once a coordinator approves)", errNotCertified)
	}
	if err != nil {
		return nil, err
	}
	c, err := protocol.CheckCertificate(raw, now, p.catalogue.trust.trust)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotCertified, err)
	}
	if c.Provider != p.id.String() {
		return nil, fmt.Errorf("%w: the stored certificate is for %s", errNotCertified, c.Provider)
	}
	if r := p.catalogue.trust.RevocationOf(c); r != nil {
		return nil, fmt.Errorf("%w: certificate revoked at %s: %s", errNotCertified, r.IssuedAt.UTC().Format(time.RFC3339), r.Reason)
	}
	return c, nil
}

// publish signs the current offer and announces it over gossip at once and over the DHT in
// the background.
func (p *Publisher) publish(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	return p.publishLocked(ctx, "")
}

func (p *Publisher) publishLocked(ctx context.Context, withdrawn string) error {
	now := p.clock.Now()
	o, err := p.build(now, withdrawn)
	if err != nil {
		return err
	}
	if o.Seq, err = p.own.NextOfferSeq(now); err != nil {
		return err
	}
	raw, err := protocol.Seal(protocol.KindOffer, o, p.peer.Key)
	if err != nil {
		return err
	}
	so, _, err := p.catalogue.book.Accept(raw, "self")
	if err != nil {
		return fmt.Errorf("own offer rejected: %w", err)
	}
	p.current = so
	p.metrics.OfferPublishes.Inc()
	select { // replace any announce still pending: only the newest matters
	case <-p.announce:
	default:
	}
	p.announce <- raw
	for _, t := range p.topics {
		if !carries(so, t.Name()) {
			continue // a declared model it neither offers nor is certified for: refused there
		}
		if err := t.Publish(ctx, raw); err != nil {
			// The offer is signed, current and queued for the DHT: searches still find it.
			p.log.Warn("gossiping the offer failed; it reaches renters through the DHT", "seq", o.Seq, "topic", t, "err", err)
		}
	}
	p.log.Debug("offer published", "seq", o.Seq, "gpus", len(o.GPUs), "withdrawn", o.Withdrawn)
	return nil
}

// announceLoop stores the newest offer in the DHT under the provider's key, at each
// publication, and announces the provider under its models' and its region's keys (no
// longer under the "all offers" key: a search without a model walks the model keys) when
// it starts, then every ReprovideEvery.
//
// The closest peers to a key change as the network grows: when the routing table has grown
// by a quarter since the last announcement, the loop announces again, under every key, so
// that records sit with the peers that searches will ask.
func (p *Publisher) announceLoop(ctx context.Context) {
	var last []byte
	lastSize := 0
	var provided time.Time // when every key was last announced
	for {
		var raw []byte
		grew := false
		select {
		case <-ctx.Done():
			return
		case raw = <-p.announce:
		case <-p.clock.After(10 * time.Second):
			if size := p.peer.RoutingTableSize(); last == nil || size < lastSize+lastSize/4+1 {
				continue
			}
			grew = true
			if cur := p.Current(); cur != nil {
				raw = cur.Raw
			}
		}
		lastSize = p.peer.RoutingTableSize()
		provide := grew || provided.IsZero() || p.clock.Now().Sub(provided) >= ReprovideEvery
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if p.announceDHT(actx, raw, provide) {
			provided = p.clock.Now()
		}
		cancel()
		last = raw
	}
}

// ReprovideEvery is how often a provider announces itself again under its region's and
// models' keys when nothing else made it. Provider records last 48 hours in the DHT, and
// each announcement walks the DHT to the nodes closest to each key, opening connections on
// the way: made at every publication (every 3 minutes), they were a tenth of the
// connections a provider opened at 300 providers (docs/performance.md, "Connections held
// to max_peers").
const ReprovideEvery = 6 * time.Hour

// announceDHT stores raw under the provider's key and, when provide says so, announces the
// provider under its region's and models' keys; it says whether it announced under every
// key (the next publication stores the offer again anyway).
func (p *Publisher) announceDHT(ctx context.Context, raw []byte, provide bool) bool {
	// A node that just started may not have DHT peers yet: wait for them (within ctx).
	for p.peer.RoutingTableSize() == 0 {
		select {
		case <-ctx.Done():
			return false
		case <-p.clock.After(200 * time.Millisecond):
		}
	}
	if err := p.peer.PutValue(ctx, protocol.OfferKey(p.id), raw); err != nil {
		p.log.Debug("DHT put of offer failed", "err", err)
	} else {
		p.metrics.DHTAnnouncements.WithLabelValues("offer").Inc()
	}
	if !provide {
		return false
	}
	ok := true
	keys := []cid.Cid{protocol.RegionKey(p.region)}
	for _, g := range p.base {
		keys = append(keys, protocol.ModelKey(g.Model))
	}
	for _, k := range keys {
		if err := p.peer.Provide(ctx, k); err != nil {
			p.log.Debug("DHT provide failed", "key", k, "err", err)
			ok = false
		} else {
			p.metrics.DHTAnnouncements.WithLabelValues("provider").Inc()
		}
	}
	return ok
}

// SetPrice changes the price of one declared model and announces the new offer at once.
func (p *Publisher) SetPrice(ctx context.Context, model string, price protocol.MicroUSDC) (*protocol.SignedOffer, error) {
	model = protocol.NormalizeModel(model)
	known := false
	for _, g := range p.base {
		known = known || g.Model == model
	}
	if !known {
		return nil, fmt.Errorf("%w: %s", ErrUnknownModel, model)
	}
	if price <= 0 || price > protocol.MaxPricePerGPUHour {
		return nil, fmt.Errorf("%w: %s USDC per GPU-hour; it must be above 0 and at most %s", ErrBadPrice, price, protocol.MaxPricePerGPUHour)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errShuttingDown
	}
	if err := p.own.SetPrice(model, price); err != nil {
		return nil, err
	}
	if err := p.publishLocked(ctx, ""); err != nil {
		return nil, err
	}
	return p.current, nil
}

// UseAttestations sets the benchmark runner whose attestation the offer carries (it is built
// after the publisher, which it wakes).
func (p *Publisher) UseAttestations(a Attestations) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bench = a
}

// Open says whether the availability schedule is open at now.
func (p *Publisher) Open(now time.Time) bool { return p.Schedule().Open(now) }

// Schedule returns the availability in force.
func (p *Publisher) Schedule() protocol.Schedule {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sched
}

// GossipPeers says, for each topic the offer is published on, how many gossip peers the
// node knows there (the peers a publish reaches).
func (p *Publisher) GossipPeers() map[string]int {
	out := map[string]int{}
	for _, t := range p.topics {
		out[t.Name()] = t.Peers()
	}
	return out
}

// Current returns the offer last published.
func (p *Publisher) Current() *protocol.SignedOffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current
}

// Withdraw publishes a withdrawn offer and stops further publishing. It waits (within ctx)
// for the DHT to hold the withdrawal so that searches stop finding the old offer.
func (p *Publisher) Withdraw(ctx context.Context, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if err := p.publishLocked(ctx, reason); err != nil {
		p.log.Warn("withdrawing offer failed", "err", err)
		return
	}
	// Store the withdrawal in the DHT ourselves, now: the announce loop is about to stop.
	// The round trips this takes also give gossip the time to send it out.
	if p.peer.RoutingTableSize() > 0 {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := p.peer.PutValue(dctx, protocol.OfferKey(p.id), p.current.Raw); err != nil {
			p.log.Debug("DHT put of withdrawal failed", "err", err)
		}
		cancel()
	}
	p.log.Info("offer withdrawn", "reason", reason)
}

// HandleOfferStream answers with the provider's current offer record.
func (p *Publisher) HandleOfferStream(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(offerStreamTimeout))
	so := p.Current()
	if so == nil {
		s.Reset()
		return
	}
	if _, err := s.Write(so.Raw); err != nil {
		s.Reset()
	}
}

// SetMaxInput says the largest input (bytes of files) this provider's jobs may bring, for
// its offer from the next publication on; 0 offers none (and leaves the field out).
func (p *Publisher) SetMaxInput(bytes int64) {
	p.mu.Lock()
	p.maxInput = bytes
	p.mu.Unlock()
	p.Poke()
}

// SetEgress says what this provider's jobs with egress get (the sandbox's effective
// policy and cap), for its offer from the next publication on.
func (p *Publisher) SetEgress(policy string, mbps int64) {
	p.mu.Lock()
	p.egress, p.egressMbps = policy, mbps
	p.mu.Unlock()
	p.Poke()
}
