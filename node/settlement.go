package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sol "github.com/gagliardetto/solana-go"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/protocol"
)

// The coordinator's settlement: deposits credited from the chain, escrow holds, charges
// from the providers' final receipts, payouts and market statistics. docs/settlement.md.

// USDCDecimals is the number of decimals of USDC: amounts are micro-USDC.
const USDCDecimals = 6

// settlement is a coordinator's money desk.
type settlement struct {
	n      *Node
	client *chain.Client // nil when settlement.rpc is not set
	mint   sol.PublicKey
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
	// rate limits wallet requests per peer.
	rate *peerRate
}

func newSettlement(n *Node) (*settlement, error) {
	s := &settlement{n: n, charges: make(chan chargeRequest, 4096), crashAt: os.Getenv("GPUNEX_TEST_CRASH_AT"),
		rate: newPeerRate(walletRequestsPerMinute)}
	st := n.cfg.Settlement
	if st.RPC != "" {
		s.client = chain.Dial(st.RPC)
	}
	if st.Mint != "" {
		m, err := sol.PublicKeyFromBase58(st.Mint)
		if err != nil {
			return nil, fmt.Errorf("settlement.mint: %w", err)
		}
		s.mint = m
	}
	return s, nil
}

// keyPath resolves a key file setting against the home folder.
func (n *Node) keyPath(p string) string {
	if p == "" || filepath.IsAbs(p) || n.home == "" {
		return p
	}
	return filepath.Join(n.home, p)
}

// treasury loads the treasury keypair (mode 0600 enforced, never logged).
func (s *settlement) treasury() (sol.PrivateKey, error) {
	path := s.n.keyPath(s.n.cfg.Settlement.TreasuryKeypair)
	k, err := chain.LoadKeypair(path)
	if err != nil {
		return nil, fmt.Errorf("settlement.treasury_keypair: %w", err)
	}
	return k, nil
}

// ready says why USDC settlement cannot run, or nil.
func (s *settlement) ready() error {
	switch {
	case s.client == nil:
		return errors.New("settlement.rpc is not set in the coordinator's config")
	case s.mint.IsZero():
		return errors.New("settlement.mint is not set in the coordinator's config")
	}
	return nil
}

// WalletInfo is what the coordinator tells renters and providers about its treasury.
type WalletInfo struct {
	Coordinator   string             `json:"coordinator"`
	Treasury      string             `json:"treasury,omitempty"`
	Mint          string             `json:"mint,omitempty"`
	Cluster       string             `json:"cluster,omitempty"`
	CommissionBPS int                `json:"commission_bps"`
	MinPayout     protocol.MicroUSDC `json:"min_payout_micro_usdc"`
	DepositMemo   string             `json:"deposit_memo"`
}

// walletRequest is one request on the wallet stream.
type walletRequest struct {
	Op        string             `json:"op"` // info, claim, balance, hold, settings, earnings, batches, bundle
	Signature string             `json:"signature,omitempty"`
	Job       string             `json:"job,omitempty"`
	Provider  string             `json:"provider,omitempty"`
	Amount    protocol.MicroUSDC `json:"amount,omitempty"`
	ExpiresAt time.Time          `json:"expires_at,omitzero"`
	Settings  []byte             `json:"settings,omitempty"`
	Batch     string             `json:"batch,omitempty"`
	// From and To bound the earnings an earnings request lists (by end of job).
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// After continues a batches listing after this batch ID (the last one of the previous
	// page); Offset continues a bundle's receipts from this index.
	After  string `json:"after,omitempty"`
	Offset int    `json:"offset,omitempty"`
}

// walletResponse answers it.
type walletResponse struct {
	Error    string          `json:"error,omitempty"`
	Info     *WalletInfo     `json:"info,omitempty"`
	Credited bool            `json:"credited,omitempty"`
	Deposit  *ledger.Deposit `json:"deposit,omitempty"`
	Account  *ledger.Account `json:"account,omitempty"`
	Holds    []ledger.Hold   `json:"holds,omitempty"`
	Hold     []byte          `json:"hold,omitempty"`
	Earnings *earningsAnswer `json:"earnings,omitempty"`
	Batches  [][]byte        `json:"batches,omitempty"`
	// More says a batches or bundle answer has another page: ask again with After set to
	// the last batch ID received, or Offset to the receipts received so far.
	More     bool              `json:"more,omitempty"`
	Bundle   *AuditBundle      `json:"bundle,omitempty"`
	Deposits []ledger.Deposit  `json:"deposits,omitempty"`
	Extra    map[string]string `json:"extra,omitempty"`
}

const (
	maxWalletRequest = 8 << 10
	// walletRequestsPerMinute is the most wallet requests served to one peer a minute.
	walletRequestsPerMinute = 120
	// applicationsPerMinute is the most apply-stream requests served to one peer a minute.
	applicationsPerMinute = 20
	// benchRunsPerMinute is the most network benchmark streams served to one peer a minute.
	benchRunsPerMinute = 6
	// reportsPerMinute is the most job reports taken from one provider a minute (each job
	// ends once; retries come every 15 s).
	reportsPerMinute = 600
)

func (s *settlement) info() WalletInfo {
	st := s.n.cfg.Settlement
	min, _ := protocol.ParseUSDC(st.MinPayoutUSDC)
	wi := WalletInfo{Coordinator: s.n.id.String(), Cluster: st.Cluster, CommissionBPS: st.CommissionBPS, MinPayout: min}
	if !s.mint.IsZero() {
		wi.Mint = s.mint.String()
	}
	if k, err := s.treasury(); err == nil {
		wi.Treasury = k.PublicKey().String()
	}
	return wi
}

// handleWallet serves the wallet stream: one request, one answer.
func (s *settlement) handleWallet(st network.Stream) {
	defer st.Close()
	st.SetDeadline(time.Now().Add(60 * time.Second))
	remote := st.Conn().RemotePeer()
	if !s.rate.allow(remote, time.Now()) {
		s.n.metrics.RecordsRejected.WithLabelValues("wallet-request", "stream", "rate_limited").Inc()
		writeJSONFrame(st, walletResponse{Error: fmt.Sprintf("more than %d wallet requests in a minute: slow down", walletRequestsPerMinute)})
		return
	}
	var req walletRequest
	if err := readJSONFrame(bufio.NewReader(st), maxWalletRequest, &req); err != nil {
		writeJSONFrame(st, walletResponse{Error: "bad request: " + err.Error()})
		return
	}
	resp, err := s.serve(context.Background(), remote, req)
	if err != nil {
		resp = walletResponse{Error: err.Error()}
	}
	writeJSONFrame(st, resp)
}

func (s *settlement) serve(ctx context.Context, remote peer.ID, req walletRequest) (walletResponse, error) {
	l := s.n.ledger
	switch req.Op {
	case "info":
		wi := s.info()
		wi.DepositMemo = protocol.DepositMemo(remote)
		return walletResponse{Info: &wi}, nil
	case "claim":
		d, credited, err := s.claimDeposit(ctx, req.Signature)
		if err != nil {
			return walletResponse{}, err
		}
		a, err := l.GetAccount(d.Renter)
		return walletResponse{Deposit: &d, Credited: credited, Account: &a}, err
	case "balance":
		a, err := l.GetAccount(remote.String())
		if err != nil {
			return walletResponse{}, err
		}
		holds, err := l.Holds(remote.String())
		if err != nil {
			return walletResponse{}, err
		}
		deps, err := l.Deposits(remote.String())
		return walletResponse{Account: &a, Holds: holds, Deposits: deps}, err
	case "hold":
		raw, err := s.placeHold(remote, req)
		return walletResponse{Hold: raw}, err
	case "release":
		h, err := s.release(ctx, remote, req.Job)
		if err != nil {
			return walletResponse{}, err
		}
		a, err := l.GetAccount(h.Renter)
		return walletResponse{Account: &a}, err
	case "settings":
		ps, signer, err := protocol.CheckPayoutSettings(req.Settings, s.n.clock.Now())
		if err != nil {
			return walletResponse{}, err
		}
		if signer != remote {
			return walletResponse{}, fmt.Errorf("payout settings signed by %s, sent by %s", signer, remote)
		}
		_, err = l.PutPayoutSettings(ledger.PayoutSettings{PayoutSettings: *ps, Raw: req.Settings})
		return walletResponse{}, err
	case "earnings":
		a, err := s.earningsOf(remote.String(), req.From, req.To)
		return walletResponse{Earnings: a}, err
	case "batches":
		batches, more, err := s.batchPage(req.After, walletPageBytes)
		return walletResponse{Batches: batches, More: more}, err
	case "bundle":
		b, more, err := s.bundlePage(req.Batch, req.Offset, walletPageBytes)
		if err != nil {
			return walletResponse{}, err
		}
		return walletResponse{Bundle: b, More: more}, nil
	}
	return walletResponse{}, fmt.Errorf("unknown wallet request %q", req.Op)
}

// claimDeposit credits a deposit transaction once: confirmed on the configured cluster,
// a TransferChecked of the USDC mint into the treasury's token account, with the memo
// naming the renter credited.
func (s *settlement) claimDeposit(ctx context.Context, signature string) (ledger.Deposit, bool, error) {
	if err := s.ready(); err != nil {
		return ledger.Deposit{}, false, err
	}
	sig, err := sol.SignatureFromBase58(signature)
	if err != nil {
		return ledger.Deposit{}, false, fmt.Errorf("deposit signature %q: %w", signature, err)
	}
	treasury, err := s.treasury()
	if err != nil {
		return ledger.Deposit{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if want := s.n.cfg.Settlement.Cluster; want != "" {
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
		if t.Destination == into && t.Checked && t.Mint == s.mint && t.Decimals == USDCDecimals {
			amount += t.Amount
		}
	}
	if amount == 0 {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s moves no USDC (mint %s) into the treasury's account %s", signature, s.mint, into)
	}
	d := ledger.Deposit{Signature: signature, Renter: renter.String(), Amount: protocol.MicroUSDC(amount), CreditedAt: s.n.clock.Now()}
	credited, _, err := s.n.ledger.CreditDeposit(d)
	if err == nil && credited {
		s.n.log.Info("deposit credited", "renter", renter, "usdc", d.Amount.String(), "signature", signature)
	}
	if !credited {
		if deps, _ := s.n.ledger.Deposits(""); deps != nil {
			for _, prev := range deps {
				if prev.Signature == signature {
					d = prev
				}
			}
		}
	}
	return d, credited, err
}

// maxHoldPeriod bounds a hold's life: the longest job, the proposal's life and the grace.
const maxHoldPeriod = protocol.MaxJobDuration + protocol.ProposalTTL + protocol.HoldGrace + time.Hour

// placeHold sets aside a renter's funds for a job and signs the hold.
func (s *settlement) placeHold(renter peer.ID, req walletRequest) ([]byte, error) {
	now := s.n.clock.Now()
	prov, err := peer.Decode(req.Provider)
	switch {
	case err != nil:
		return nil, fmt.Errorf("provider %q is not a peer ID", req.Provider)
	case !protocol.ValidJobID(req.Job):
		return nil, fmt.Errorf("job %q is not 16 lower-case hex digits", req.Job)
	case req.Amount <= 0 || req.Amount > protocol.MicroUSDC(1<<53):
		return nil, fmt.Errorf("hold amount %d out of range", req.Amount)
	case !req.ExpiresAt.After(now) || req.ExpiresAt.After(now.Add(maxHoldPeriod)):
		return nil, fmt.Errorf("hold expiry %s out of range (at most %s ahead)", req.ExpiresAt.UTC().Format(time.RFC3339), maxHoldPeriod)
	}
	h := protocol.EscrowHold{Version: protocol.SettlementVersion, Coordinator: s.n.id.String(), Renter: renter.String(),
		Provider: prov.String(), Job: req.Job, Amount: req.Amount, CommissionBPS: s.n.cfg.Settlement.CommissionBPS,
		IssuedAt: now.UTC(), ExpiresAt: req.ExpiresAt.UTC()}
	if prev, err := s.n.ledger.GetHold(req.Job); err == nil {
		return prev.Raw, checkSameHold(prev, h)
	}
	raw, err := protocol.Seal(protocol.KindEscrowHold, h, s.n.key)
	if err != nil {
		return nil, err
	}
	stored, err := s.n.ledger.PlaceHold(ledger.Hold{Job: h.Job, Renter: h.Renter, Provider: h.Provider, Amount: h.Amount,
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
func (s *settlement) charge(ctx context.Context, it ledger.ReportCharge) (ledger.ReportOutcome, error) {
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
func (s *settlement) commitLoop(ctx context.Context) {
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
		outs, err := s.n.ledger.ChargeReports(items)
		for i, r := range batch {
			if i < len(outs) {
				r.done <- chargeResult{out: outs[i]}
			} else {
				r.done <- chargeResult{err: err}
			}
		}
	}
}

// loop runs the coordinator's money chores: the group commit, releasing expired holds,
// resuming unfinished payout batches, scheduled payouts and market statistics.
func (s *settlement) loop(ctx context.Context) {
	go s.commitLoop(ctx)
	s.ensureTreasuryAccount(ctx)
	if err := s.resume(ctx); err != nil && ctx.Err() == nil {
		s.n.log.Warn("payout batches not resumed", "err", err)
	}
	st := s.n.cfg.Settlement
	payouts := time.NewTicker(st.PayoutCheck.Duration)
	defer payouts.Stop()
	market := time.NewTicker(st.MarketInterval.Duration)
	defer market.Stop()
	s.publishMarket(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-payouts.C:
			if n, err := s.n.ledger.ReleaseExpiredHolds(s.n.clock.Now()); err != nil {
				s.n.log.Warn("release expired holds", "err", err)
			} else if n > 0 {
				s.n.log.Info("expired holds returned to renters", "holds", n)
			}
			s.scheduledPayouts(ctx)
		case <-market.C:
			s.publishMarket(ctx)
		}
	}
}

// ensureTreasuryAccount creates the treasury's USDC token account when it is missing:
// deposits are sent to it.
func (s *settlement) ensureTreasuryAccount(ctx context.Context) {
	if s.ready() != nil {
		return
	}
	k, err := s.treasury()
	if err != nil {
		s.n.log.Warn("treasury keypair not loaded: deposits and USDC payouts are off", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if ok, err := s.client.AccountExists(ctx, chain.ATA(k.PublicKey(), s.mint)); err == nil && !ok {
		if err := s.client.CreateATA(ctx, k, k.PublicKey(), s.mint); err != nil {
			s.n.log.Warn("treasury token account not created", "err", err)
		}
	}
}

// release returns a renter's hold for a job the provider confirms never ran.
func (s *settlement) release(ctx context.Context, renter peer.ID, job string) (ledger.Hold, error) {
	h, err := s.n.ledger.GetHold(job)
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
	var a holdRelease
	if err := s.n.exchange(ctx, prov, protocol.HoldReleaseProtocol, 15*time.Second, holdRelease{Job: job}, 1024, &a); err != nil {
		return h, fmt.Errorf("the provider cannot be asked whether job %s ran (%v): the hold returns at %s", job, err, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if !a.Release || a.Job != job {
		return h, fmt.Errorf("the provider does not release job %s: %s", job, a.Reason)
	}
	h, err = s.n.ledger.ReleaseHold(job)
	if err == nil {
		s.n.log.Info("hold released: the job never ran", "job", job, "renter", renter, "usdc", h.Amount.String())
	}
	return h, err
}
