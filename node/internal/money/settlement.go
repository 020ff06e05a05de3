package money

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/protocol"
)

// The coordinator's settlement: deposits credited from the chain, escrow holds, charges
// from the providers' final receipts, payouts and market statistics. docs/settlement.md.

// Deps are what every part of money needs.
type Deps struct {
	Peer    *p2p.Peer
	Ledger  Stores
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Config: money reads the settlement, wallet, payout, provider and coordinator
	// sections, the role and the trusted coordinators.
	Config config.Config
	// Home is the home folder: relative key file paths are under it.
	Home string
}

// Stores are the ledger's stores money keeps its records in: every node's jobs (the
// receipts it reports, the earnings it counts), its wallet (its deposits and payout
// settings) and its own prices (the market's recommendation); a coordinator's escrow book,
// payouts and providers' reliability (its settlement's).
type Stores struct {
	Jobs        *ledger.JobStore
	Wallet      *ledger.WalletStore
	Own         *ledger.ProviderStore
	Escrow      *ledger.EscrowStore
	Payouts     *ledger.PayoutStore
	Reliability *ledger.ReliabilityStore
}

// SettlementDeps are what a coordinator's settlement needs besides Deps.
type SettlementDeps struct {
	Deps
	Offers Offers
	// Market is the node's market book; MarketTopic where statistics are published.
	Market      *Market
	MarketTopic Publisher
	// Chain is the Solana client payouts and deposits use; when nil, one is dialled at
	// settlement.rpc (none when that is not set).
	Chain ChainClient
	// Providers are asked whether a job ran before its hold is released (Peer when nil).
	Providers Asker
	// PayoutSteps, tests only, is told each step of the payout state machine (StepPlanned,
	// StepSigned, StepSent, StepConfirmed); an error it returns stops the run there, as a
	// crash would. Production never sets it.
	PayoutSteps func(step string) error
	// Alert, when set, tells the coordinator's operator of an event that needs them (a
	// provider caught signing two receipts for one job).
	Alert func(key, subject, body string)
}

// Settlement is a coordinator's money desk: the parts below, each in its own file, and
// the loop that runs their chores (Run). Their exported methods are the settlement's.
type Settlement struct {
	*walletServer                 // the wallet stream: walletserver.go
	*deposits                     // deposits credited from the chain: deposits.go
	*holds                        // escrow holds, their release and expiry, abandoned jobs: holds.go, abandoned.go
	*charges                      // job reports turned into charges: charges.go
	*disputes                     // renters' disputes and their decisions: disputes.go
	*payouts                      // payout batches: payouts.go, schedule.go, payoutmachine.go
	*bankFiles                    // bank-transfer files: bank.go
	*auditBundles                 // audit bundles: audit.go
	*earningsAnswers              // providers' earnings: earnings.go
	market           *marketStats // market statistics: market.go

	treasury *treasury
	log      *slog.Logger
	clock    clock.Clock
	cfg      config.SettlementConfig
}

// NewSettlement returns a coordinator's settlement; Run starts its loops.
func NewSettlement(d SettlementDeps) (*Settlement, error) {
	st := d.Config.Settlement
	t := &treasury{cluster: st.Cluster, rpc: st.RPC, keypair: keyPath(d.Home, st.TreasuryKeypair), client: d.Chain}
	if t.client == nil && st.RPC != "" {
		t.client = chain.Dial(st.RPC)
	}
	if st.Mint != "" {
		m, err := chain.ParsePublicKey(st.Mint)
		if err != nil {
			return nil, fmt.Errorf("settlement.mint: %w", err)
		}
		t.mint = m
	}
	var providers Asker = d.Peer
	if d.Providers != nil {
		providers = d.Providers
	}
	id, key, l, clk, log, m := d.Peer.ID, d.Peer.Key, d.Ledger, d.Clock, d.Log, d.Metrics
	halfLife := d.Config.Coordinator.HalfLife.Duration
	eq := &equivocations{ledger: l, clock: clk, log: log, alert: d.Alert, halfLife: halfLife}
	s := &Settlement{treasury: t, log: log, clock: clk, cfg: st,
		deposits: &deposits{ledger: l, clock: clk, log: log, treasury: t},
		holds: &holds{id: id, key: key, ledger: l, clock: clk, log: log, metrics: m, offers: d.Offers, providers: providers,
			commissionBPS: st.CommissionBPS, halfLife: halfLife},
		charges: &charges{ledger: l, clock: clk, log: log, metrics: m, offers: d.Offers, peers: d.Peer, halfLife: halfLife,
			disputeWindow: st.DisputeWindow.Duration, queue: make(chan chargeRequest, 4096), reportRate: p2p.NewPeerRate(reportsPerMinute),
			equivocations: eq},
		disputes: &disputes{id: id, key: key, ledger: l, clock: clk, log: log, metrics: m, equivocations: eq},
		payouts: &payouts{id: id, ledger: l, clock: clk, log: log, cfg: st, treasury: t,
			machine: &payoutMachine{key: key, ledger: l, clock: clk, log: log, treasury: t, observe: d.PayoutSteps}},
		bankFiles:       &bankFiles{ledger: l, clock: clk, cfg: st},
		auditBundles:    &auditBundles{ledger: l},
		earningsAnswers: &earningsAnswers{ledger: l},
		market: &marketStats{id: id, key: key, ledger: l, clock: clk, log: log, offers: d.Offers, cfg: st,
			market: d.Market, topic: d.MarketTopic},
	}
	minPayout, _ := protocol.ParseUSDC(st.MinPayoutUSDC)
	s.walletServer = newWalletServer(&walletServer{id: id, ledger: l, clock: clk, metrics: m, peers: d.Peer, treasury: t,
		commissionBPS: st.CommissionBPS, minPayout: minPayout, deposits: s.deposits, holds: s.holds, disputes: s.disputes,
		payouts: s.payouts, earnings: s.earningsAnswers, bundles: s.auditBundles})
	return s, nil
}

// Chain is the chain a settlement pays on: its RPC client (nil when settlement.rpc is not
// set), the USDC mint and the cluster's genesis hash.
type Chain struct {
	Client  ChainClient
	Mint    chain.PublicKey
	Cluster string
}

// Chain returns the chain the settlement pays on.
func (s *Settlement) Chain() Chain {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return Chain{Client: s.treasury.client, Mint: s.treasury.mint, Cluster: s.treasury.cluster}
}

// UseChain replaces the chain the settlement pays on, between payout runs (tests: an RPC
// whose answers are lost, a wrong mint or cluster).
func (s *Settlement) UseChain(c Chain) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.treasury.client, s.treasury.mint, s.treasury.cluster = c.Client, c.Mint, c.Cluster
}

// SetStepHook sets a function run at each step of the payout state machine: an error it
// returns stops the run there, as a crash would (tests of the state machine). nil removes it.
func (s *Settlement) SetStepHook(hook func(step string) error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.machine.observe = hook
}

// Run runs the coordinator's money chores: the group commit, releasing expired holds,
// resuming unfinished payout batches, scheduled payouts and market statistics.
func (s *Settlement) Run(ctx context.Context) {
	go s.commitLoop(ctx)
	s.treasury.ensureAccount(ctx, s.log)
	if err := s.resume(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("payout batches not resumed", "err", err)
	}
	st := s.cfg
	payouts := s.clock.After(st.PayoutCheck.Duration)
	market := s.clock.After(st.MarketInterval.Duration)
	due := s.clock.After(dueCheck(st.DisputeWindow.Duration))
	s.market.publish(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-due:
			due = s.clock.After(dueCheck(st.DisputeWindow.Duration))
			s.chargeDue()
		case <-payouts:
			payouts = s.clock.After(st.PayoutCheck.Duration)
			if n, err := s.ReleaseExpired(); err != nil {
				s.log.Warn("release expired holds", "err", err)
			} else if n > 0 {
				s.log.Info("expired holds returned to renters", "holds", n)
			}
			s.ScheduledPayouts(ctx)
		case <-market:
			market = s.clock.After(st.MarketInterval.Duration)
			s.market.publish(ctx)
		}
	}
}
