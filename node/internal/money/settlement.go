package money

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// The coordinator's settlement: deposits credited from the chain, escrow holds, charges
// from the providers' final receipts, payouts and market statistics. docs/settlement.md.

// Deps are what every part of money needs.
type Deps struct {
	Peer    *p2p.Peer
	Ledger  *ledger.Ledger
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Config: money reads the settlement, wallet, payout, provider and coordinator
	// sections, the role and the trusted coordinators.
	Config config.Config
	// Home is the home folder: relative key file paths are under it.
	Home string
}

// Offers are the live offers this node holds (market statistics count them).
type Offers interface {
	Live(now time.Time) []*protocol.SignedOffer
	// Get returns the offer held from a provider (nil when none).
	Get(p peer.ID) (*protocol.SignedOffer, time.Time)
}

// certifiedHere says whether a provider is certified as this coordinator sees it: its offer
// in the coordinator's book carries a certificate of a coordinator this one trusts (itself
// among them; the book takes no other, and drops offers whose certificate was revoked).
// Holds are placed, and job reports heard, only for such providers.
func (s *Settlement) certifiedHere(p peer.ID) bool {
	so, _ := s.offers.Get(p)
	return so != nil && so.Cert != nil
}

// Publisher sends a record to a gossip topic's peers (a *p2p.Topic).
type Publisher interface {
	Publish(ctx context.Context, data []byte) error
}

// SettlementDeps are what a coordinator's settlement needs besides Deps.
type SettlementDeps struct {
	Deps
	Offers Offers
	// Market is the node's market book; MarketTopic where statistics are published.
	Market      *Market
	MarketTopic Publisher
}

// Settlement is a coordinator's money desk.
type Settlement struct {
	peer        *p2p.Peer
	id          peer.ID
	ledger      *ledger.Ledger
	clock       clock.Clock
	log         *slog.Logger
	metrics     *metrics.Metrics
	cfg         config.Config
	home        string
	offers      Offers
	market      *Market
	marketTopic Publisher

	client *chain.Client // nil when settlement.rpc is not set
	mint   chain.PublicKey
	// charges feeds the group-commit loop that records job reports in batches.
	charges chan chargeRequest
	// runMu lets one payout run (or resumption) go at a time.
	runMu sync.Mutex
	// hook, when set (tests), runs at each step of the payout state machine; an error
	// stops the run there, as a crash would.
	hook func(step string) error
	// crashAt names a step at which the process kills itself (GPUNEX_TEST_CRASH_AT; the
	// kill -9 tests of the payout state machine).
	crashAt string
	// rate limits wallet requests per peer and network; claims the deposit claims (each
	// costs Solana RPC calls); reportRate job reports per provider.
	rate, claims *p2p.Sources
	reportRate   *p2p.PeerRate
}

// NewSettlement returns a coordinator's settlement; Run starts its loops.
func NewSettlement(d SettlementDeps) (*Settlement, error) {
	s := &Settlement{peer: d.Peer, id: d.Peer.ID, ledger: d.Ledger, clock: d.Clock, log: d.Log, metrics: d.Metrics,
		cfg: d.Config, home: d.Home, offers: d.Offers, market: d.Market, marketTopic: d.MarketTopic,
		charges: make(chan chargeRequest, 4096), crashAt: os.Getenv("GPUNEX_TEST_CRASH_AT"),
		rate:   p2p.NewSources(walletRequestsPerMinute, walletRequestsPerMinute, 4),
		claims: p2p.NewSources(claimsPerMinute, 2*claimsPerMinute, 4), reportRate: p2p.NewPeerRate(reportsPerMinute)}
	st := d.Config.Settlement
	if st.RPC != "" {
		s.client = chain.Dial(st.RPC)
	}
	if st.Mint != "" {
		m, err := chain.ParsePublicKey(st.Mint)
		if err != nil {
			return nil, fmt.Errorf("settlement.mint: %w", err)
		}
		s.mint = m
	}
	return s, nil
}

// keyPath resolves a key file setting against the home folder.
func keyPath(home, p string) string {
	if p == "" || filepath.IsAbs(p) || home == "" {
		return p
	}
	return filepath.Join(home, p)
}

// Chain is the chain a settlement pays on: its RPC client (nil when settlement.rpc is not
// set), the USDC mint and the cluster's genesis hash.
type Chain struct {
	Client  *chain.Client
	Mint    chain.PublicKey
	Cluster string
}

// Chain returns the chain the settlement pays on.
func (s *Settlement) Chain() Chain {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return Chain{Client: s.client, Mint: s.mint, Cluster: s.cfg.Settlement.Cluster}
}

// UseChain replaces the chain the settlement pays on, between payout runs (tests: an RPC
// whose answers are lost, a wrong mint or cluster).
func (s *Settlement) UseChain(c Chain) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.client, s.mint, s.cfg.Settlement.Cluster = c.Client, c.Mint, c.Cluster
}

// SetStepHook sets a function run at each step of the payout state machine: an error it
// returns stops the run there, as a crash would (tests of the state machine). nil removes it.
func (s *Settlement) SetStepHook(hook func(step string) error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.hook = hook
}

// treasury loads the treasury keypair (mode 0600 enforced, never logged).
func (s *Settlement) treasury() (chain.PrivateKey, error) {
	path := keyPath(s.home, s.cfg.Settlement.TreasuryKeypair)
	k, err := chain.LoadKeypair(path)
	if err != nil {
		return nil, fmt.Errorf("settlement.treasury_keypair: %w", err)
	}
	return k, nil
}

// ready says why USDC settlement cannot run, or nil.
func (s *Settlement) ready() error {
	switch {
	case s.client == nil:
		return errors.New("settlement.rpc is not set in the coordinator's config")
	case s.mint.IsZero():
		return errors.New("settlement.mint is not set in the coordinator's config")
	}
	return nil
}

const (
	// walletRequestsPerMinute is the most wallet requests served to one peer a minute (its
	// network four times that).
	walletRequestsPerMinute = 120
	// MaxBalanceRows is how many of a renter's latest holds and deposits a balance answer
	// lists (the account's sums cover all of them).
	MaxBalanceRows = 500
	// claimsPerMinute is the most deposit claims one peer may make a minute (its network
	// four times that): each asks the Solana RPC about a transaction.
	claimsPerMinute = 10
	// reportsPerMinute is the most job reports taken from one provider a minute (each job
	// ends once; retries come every 15 s).
	reportsPerMinute = 600
)

func (s *Settlement) info() api.WalletInfo {
	st := s.cfg.Settlement
	min, _ := protocol.ParseUSDC(st.MinPayoutUSDC)
	wi := api.WalletInfo{Coordinator: s.id.String(), Cluster: st.Cluster, CommissionBPS: st.CommissionBPS, MinPayout: min}
	if !s.mint.IsZero() {
		wi.Mint = s.mint.String()
	}
	if k, err := s.treasury(); err == nil {
		wi.Treasury = k.PublicKey().String()
	}
	return wi
}

// HandleWallet serves the wallet stream: one request, one answer.
func (s *Settlement) HandleWallet(st network.Stream) {
	defer st.Close()
	st.SetDeadline(time.Now().Add(60 * time.Second))
	remote := st.Conn().RemotePeer()
	if !s.rate.Take(st.Conn(), time.Now(), 1) {
		s.metrics.RecordsRejected.WithLabelValues("wallet-request", "stream", "rate_limited").Inc()
		s.peer.Misbehaved(remote)
		s.answer(st, protocol.WalletResponse{Error: fmt.Sprintf("more than %d wallet requests in a minute: slow down", walletRequestsPerMinute)})
		return
	}
	var req protocol.WalletRequest
	if err := protocol.ReadJSONFrame(bufio.NewReader(st), protocol.MaxWalletRequest, &req); err != nil {
		s.answer(st, protocol.WalletResponse{Error: "bad request: " + err.Error()})
		return
	}
	if req.Op == "claim" && !s.claims.Take(st.Conn(), time.Now(), 1) {
		s.metrics.RecordsRejected.WithLabelValues("wallet-request", "stream", "rate_limited").Inc()
		s.peer.Misbehaved(remote)
		s.answer(st, protocol.WalletResponse{Error: fmt.Sprintf("more than %d deposit claims a minute: slow down", claimsPerMinute)})
		return
	}
	resp, err := s.Serve(context.Background(), remote, req)
	if err != nil {
		resp = protocol.WalletResponse{Error: err.Error()}
	}
	s.answer(st, resp)
}

// answer writes a wallet answer with the coordinator's time in it.
func (s *Settlement) answer(st network.Stream, resp protocol.WalletResponse) {
	resp.Now = s.clock.Now().UTC()
	protocol.WriteJSONFrame(st, resp)
}

// Serve answers one wallet request from remote: HandleWallet for a peer's stream, and the
// coordinator's own wallet calls directly (Wallet.walletCall).
func (s *Settlement) Serve(ctx context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	l := s.ledger
	switch req.Op {
	case "info":
		wi := s.info()
		wi.DepositMemo = protocol.DepositMemo(remote)
		return protocol.WalletResponse{Info: &wi}, nil
	case "claim":
		d, credited, err := s.claimDeposit(ctx, req.Signature)
		if err != nil {
			return protocol.WalletResponse{}, err
		}
		a, err := l.GetAccount(d.Renter)
		return protocol.WalletResponse{Deposit: &d, Credited: credited, Account: &a}, err
	case "balance":
		a, err := l.GetAccount(remote.String())
		if err != nil {
			return protocol.WalletResponse{}, err
		}
		holds, err := l.RenterHolds(remote.String(), MaxBalanceRows)
		if err != nil {
			return protocol.WalletResponse{}, err
		}
		deps, err := l.RenterDeposits(remote.String(), MaxBalanceRows)
		return protocol.WalletResponse{Account: &a, Holds: holds, Deposits: deps}, err
	case "hold":
		raw, err := s.placeHold(remote, req)
		return protocol.WalletResponse{Hold: raw}, err
	case "release":
		h, err := s.release(ctx, remote, req.Job)
		if err != nil {
			return protocol.WalletResponse{}, err
		}
		a, err := l.GetAccount(h.Renter)
		return protocol.WalletResponse{Account: &a}, err
	case "settings":
		ps, signer, err := protocol.CheckPayoutSettings(req.Settings, s.clock.Now())
		if err != nil {
			return protocol.WalletResponse{}, err
		}
		if signer != remote {
			return protocol.WalletResponse{}, fmt.Errorf("payout settings signed by %s, sent by %s", signer, remote)
		}
		_, err = l.PutPayoutSettings(ledger.PayoutSettings{PayoutSettings: *ps, Raw: req.Settings})
		return protocol.WalletResponse{}, err
	case "earnings":
		a, err := s.EarningsOf(remote.String(), req.From, req.To)
		return protocol.WalletResponse{Earnings: a}, err
	case "batches":
		batches, more, err := s.batchPage(req.After, WalletPageBytes)
		return protocol.WalletResponse{Batches: batches, More: more}, err
	case "dispute":
		return protocol.WalletResponse{}, s.openDispute(remote, req)
	case "abandoned":
		return protocol.WalletResponse{}, s.takeAbandoned(remote, req)
	case "bundle":
		b, more, err := s.BundlePage(req.Batch, req.Offset, WalletPageBytes)
		if err != nil {
			return protocol.WalletResponse{}, err
		}
		return protocol.WalletResponse{Bundle: b, More: more}, nil
	}
	return protocol.WalletResponse{}, fmt.Errorf("unknown wallet request %q", req.Op)
}

// claimDeposit credits a deposit transaction once: confirmed on the configured cluster,
// a TransferChecked of the USDC mint into the treasury's token account, with the memo
// naming the renter credited.
func (s *Settlement) claimDeposit(ctx context.Context, signature string) (ledger.Deposit, bool, error) {
	if err := s.ready(); err != nil {
		return ledger.Deposit{}, false, err
	}
	sig, err := chain.ParseSignature(signature)
	if err != nil {
		return ledger.Deposit{}, false, fmt.Errorf("deposit signature %q: %w", signature, err)
	}
	if d, err := s.ledger.GetDeposit(signature); err == nil {
		return d, false, nil // credited already: no RPC call
	}
	treasury, err := s.treasury()
	if err != nil {
		return ledger.Deposit{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if want := s.cfg.Settlement.Cluster; want != "" {
		if got, err := s.client.GenesisHash(ctx); err != nil || got != want {
			return ledger.Deposit{}, false, fmt.Errorf("%w: settlement.rpc answers cluster %q, expected %s (%v)", chain.ErrWrongCluster, got, want, err)
		}
	}
	st, err := s.client.Status(ctx, sig)
	if err != nil {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s: %w", signature, err)
	}
	// Money is credited on finalized transactions only: a confirmed one could still be
	// rolled back, and the credit with it spent.
	if !st.Found || !st.Finalized {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s is not finalized yet: try again in a few seconds", signature)
	}
	tx, err := s.client.FinalizedTransaction(ctx, sig)
	if err != nil {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s: %w", signature, err)
	}
	if tx.Failed != "" {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s failed on chain: %s", signature, tx.Failed)
	}
	var renter peer.ID
	for _, m := range tx.Memos {
		if rest, ok := strings.CutPrefix(m, "gpunex deposit "); ok {
			if renter, err = peer.Decode(strings.TrimSpace(rest)); err != nil {
				return ledger.Deposit{}, false, fmt.Errorf("deposit %s: memo %q does not name a peer ID", signature, m)
			}
		}
	}
	if renter == "" {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s carries no memo \"gpunex deposit <peer ID>\"", signature)
	}
	into := chain.ATA(treasury.PublicKey(), s.mint)
	var amount uint64
	for _, t := range tx.Transfers {
		if t.Destination == into && t.Checked && t.Mint == s.mint && t.Decimals == protocol.USDCDecimals {
			amount += t.Amount
		}
	}
	if amount == 0 {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s moves no USDC (mint %s) into the treasury's account %s", signature, s.mint, into)
	}
	d := ledger.Deposit{Signature: signature, Renter: renter.String(), Amount: protocol.MicroUSDC(amount), CreditedAt: s.clock.Now()}
	credited, _, err := s.ledger.CreditDeposit(d)
	if err == nil && credited {
		s.log.Info("deposit credited", "renter", renter, "usdc", d.Amount.String(), "signature", signature)
	}
	if !credited {
		if prev, err := s.ledger.GetDeposit(signature); err == nil {
			d = prev
		}
	}
	return d, credited, err
}

// maxHoldPeriod bounds a hold's life: the longest job, the proposal's life and the grace.
const maxHoldPeriod = protocol.MaxJobDuration + protocol.ProposalTTL + protocol.HoldGrace + time.Hour

// placeHold sets aside a renter's funds for a job and signs the hold.
func (s *Settlement) placeHold(renter peer.ID, req protocol.WalletRequest) ([]byte, error) {
	now := s.clock.Now()
	prov, err := peer.Decode(req.Provider)
	switch {
	case err != nil:
		return nil, fmt.Errorf("provider %q is not a peer ID", req.Provider)
	case !protocol.ValidJobID(req.Job):
		return nil, fmt.Errorf("job %q is not 16 lower-case hex digits", req.Job)
	case !s.certifiedHere(prov):
		return nil, fmt.Errorf("provider %s has no certified offer at this coordinator (not certified by a coordinator it trusts, or its offer has not reached it yet): no hold for it", prov)
	case req.Amount <= 0 || req.Amount > protocol.MicroUSDC(1<<53):
		return nil, fmt.Errorf("hold amount %d out of range", req.Amount)
	case !req.ExpiresAt.After(now) || req.ExpiresAt.After(now.Add(maxHoldPeriod)):
		return nil, fmt.Errorf("hold expiry %s out of range (at most %s ahead)", req.ExpiresAt.UTC().Format(time.RFC3339), maxHoldPeriod)
	}
	h := protocol.EscrowHold{Version: protocol.SettlementVersion, Coordinator: s.id.String(), Renter: renter.String(),
		Provider: prov.String(), Job: req.Job, Amount: req.Amount, CommissionBPS: s.cfg.Settlement.CommissionBPS,
		IssuedAt: now.UTC(), ExpiresAt: req.ExpiresAt.UTC()}
	if prev, err := s.ledger.GetHold(req.Job); err == nil {
		return prev.Raw, checkSameHold(prev, h)
	}
	raw, err := protocol.Seal(protocol.KindEscrowHold, h, s.peer.Key)
	if err != nil {
		return nil, err
	}
	stored, err := s.ledger.PlaceHold(ledger.Hold{Job: h.Job, Renter: h.Renter, Provider: h.Provider, Amount: h.Amount,
		CommissionBPS: h.CommissionBPS, IssuedAt: h.IssuedAt, ExpiresAt: h.ExpiresAt, Raw: raw})
	if err != nil {
		return nil, err
	}
	return stored.Raw, nil
}

func checkSameHold(prev ledger.Hold, h protocol.EscrowHold) error {
	if prev.Renter != h.Renter || prev.Provider != h.Provider || prev.Amount != h.Amount || prev.State != ledger.HoldHeld {
		return fmt.Errorf("job %s already has a %s hold of %s USDC", h.Job, prev.State, prev.Amount)
	}
	return nil
}

// chargeRequest is a checked job report waiting for the group commit.
type chargeRequest struct {
	item ledger.ReportCharge
	done chan chargeResult
}

type chargeResult struct {
	out ledger.ReportOutcome
	err error
}

// charge records a job report and charges its hold, through the group commit: reports
// arriving together share one ledger transaction.
func (s *Settlement) charge(ctx context.Context, it ledger.ReportCharge) (ledger.ReportOutcome, error) {
	req := chargeRequest{item: it, done: make(chan chargeResult, 1)}
	select {
	case s.charges <- req:
	case <-ctx.Done():
		return ledger.ReportOutcome{}, ctx.Err()
	}
	select {
	case r := <-req.done:
		return r.out, r.err
	case <-ctx.Done():
		return ledger.ReportOutcome{}, ctx.Err()
	}
}

// commitLoop drains the charges channel, up to 1,000 reports per ledger transaction.
func (s *Settlement) commitLoop(ctx context.Context) {
	for {
		var batch []chargeRequest
		select {
		case <-ctx.Done():
			return
		case r := <-s.charges:
			batch = append(batch, r)
		}
	fill:
		for len(batch) < 1000 {
			select {
			case r := <-s.charges:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		items := make([]ledger.ReportCharge, len(batch))
		for i, r := range batch {
			items[i] = r.item
		}
		outs, err := s.ledger.ChargeReports(items)
		for i, r := range batch {
			if i < len(outs) {
				r.done <- chargeResult{out: outs[i]}
			} else {
				r.done <- chargeResult{err: err}
			}
		}
	}
}

// Run runs the coordinator's money chores: the group commit, releasing expired holds,
// resuming unfinished payout batches, scheduled payouts and market statistics.
func (s *Settlement) Run(ctx context.Context) {
	go s.commitLoop(ctx)
	s.ensureTreasuryAccount(ctx)
	if err := s.resume(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("payout batches not resumed", "err", err)
	}
	st := s.cfg.Settlement
	payouts := s.clock.After(st.PayoutCheck.Duration)
	market := s.clock.After(st.MarketInterval.Duration)
	due := s.clock.After(dueCheck(st.DisputeWindow.Duration))
	s.publishMarket(ctx)
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
			s.publishMarket(ctx)
		}
	}
}

// ensureTreasuryAccount creates the treasury's USDC token account when it is missing:
// deposits are sent to it.
func (s *Settlement) ensureTreasuryAccount(ctx context.Context) {
	if s.ready() != nil {
		return
	}
	k, err := s.treasury()
	if err != nil {
		s.log.Warn("treasury keypair not loaded: deposits and USDC payouts are off", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if ok, err := s.client.AccountExists(ctx, chain.ATA(k.PublicKey(), s.mint)); err == nil && !ok {
		if err := s.client.CreateATA(ctx, k, k.PublicKey(), s.mint); err != nil {
			s.log.Warn("treasury token account not created", "err", err)
		}
	}
}

// release returns a renter's hold for a job the provider confirms never ran.
func (s *Settlement) release(ctx context.Context, renter peer.ID, job string) (ledger.Hold, error) {
	h, err := s.ledger.GetHold(job)
	switch {
	case err != nil:
		return h, fmt.Errorf("job %s: no hold: %w", job, err)
	case h.Renter != renter.String():
		return h, fmt.Errorf("job %s: the hold is not yours", job)
	case h.State != ledger.HoldHeld:
		return h, fmt.Errorf("job %s: the hold is already %s", job, h.State)
	}
	prov, err := peer.Decode(h.Provider)
	if err != nil {
		return h, err
	}
	var a protocol.HoldRelease
	if err := s.peer.Exchange(ctx, prov, protocol.HoldReleaseProtocol, 15*time.Second, protocol.HoldRelease{Job: job}, 1024, &a); err != nil {
		return h, fmt.Errorf("the provider cannot be asked whether job %s ran (%v): the hold returns at %s", job, err, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if !a.Release || a.Job != job {
		return h, fmt.Errorf("the provider does not release job %s: %s", job, a.Reason)
	}
	h, err = s.ledger.ReleaseHold(job)
	if err == nil {
		s.log.Info("hold released: the job never ran", "job", job, "renter", renter, "usdc", h.Amount.String())
	}
	return h, err
}
