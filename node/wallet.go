package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	sol "github.com/gagliardetto/solana-go"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/protocol"
)

// The renter's and the provider's side of money: the wallet stream to the coordinator,
// deposits, balances, escrow holds for jobs, payout settings and job reports.

// coordinatorID is the coordinator this node deals with: the first trusted one.
func (n *Node) coordinatorID() (peer.ID, error) {
	if n.cfg.Role == RoleCoordinator {
		return n.id, nil
	}
	ids, err := n.cfg.TrustedCoordinators()
	if err != nil {
		return "", err
	}
	if len(ids) == 0 {
		return "", errors.New("no coordinator in trust.coordinators")
	}
	return ids[0], nil
}

// walletCall sends one request on the wallet stream to the coordinator (or serves it
// locally on a coordinator).
func (n *Node) walletCall(ctx context.Context, req walletRequest) (walletResponse, error) {
	if n.money != nil {
		return n.money.serve(ctx, n.id, req)
	}
	c, err := n.coordinatorID()
	if err != nil {
		return walletResponse{}, err
	}
	return n.walletCallTo(ctx, c, req)
}

// walletCallTo sends one wallet request to a given coordinator (served locally when it is
// this node).
func (n *Node) walletCallTo(ctx context.Context, c peer.ID, req walletRequest) (walletResponse, error) {
	if n.money != nil && c == n.id {
		return n.money.serve(ctx, n.id, req)
	}
	var resp walletResponse
	if err := n.exchange(ctx, c, protocol.WalletProtocol, 60*time.Second, req, protocol.MaxPayoutBatchSize*4, &resp); err != nil {
		return walletResponse{}, fmt.Errorf("coordinator %s: %w", c, err)
	}
	if resp.Error != "" {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// exchange sends one JSON frame to a peer on a protocol and reads one JSON frame back (at
// most max bytes), all within timeout.
func (n *Node) exchange(ctx context.Context, p peer.ID, proto string, timeout time.Duration, req any, max int, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := n.reach(ctx, p); err != nil {
		return err
	}
	s, err := n.host.NewStream(ctx, p, libp2pprotocol.ID(proto))
	if err != nil {
		return err
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	if err := writeJSONFrame(s, req); err != nil {
		return err
	}
	s.CloseWrite()
	if err := readJSONFrame(bufio.NewReader(s), max, resp); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	return nil
}

// requestHold asks the coordinator to set the proposal's maximum cost aside.
func (n *Node) requestHold(ctx context.Context, p protocol.Proposal) ([]byte, error) {
	if _, err := n.coordinatorID(); err != nil {
		return nil, err
	}
	expires := p.IssuedAt.Add(protocol.ProposalTTL + time.Duration(p.MaxSeconds)*time.Second + protocol.HoldGrace + time.Minute)
	resp, err := n.walletCall(ctx, walletRequest{Op: "hold", Job: p.Job, Provider: p.Provider,
		Amount: protocol.HoldAmount(p.MaxPrice, p.GPUs, p.MaxSeconds), ExpiresAt: expires})
	if err != nil {
		return nil, err
	}
	return resp.Hold, nil
}

// WalletKey loads this node's Solana wallet keypair.
func (n *Node) WalletKey() (sol.PrivateKey, error) {
	k, err := chain.LoadKeypair(n.keyPath(n.cfg.Wallet.Keypair))
	if err != nil {
		return nil, fmt.Errorf("wallet.keypair: %w (create one with gpunex wallet init)", err)
	}
	return k, nil
}

// DepositView is what `gpunex wallet deposit` prints.
type DepositView struct {
	Signature  string             `json:"signature"`
	Amount     protocol.MicroUSDC `json:"amount_micro_usdc"`
	AmountUSDC string             `json:"amount_usdc"`
	Credited   bool               `json:"credited"`
	Explorer   string             `json:"explorer,omitempty"`
	Balance    *BalanceView       `json:"balance,omitempty"`
}

// Deposit sends USDC from this node's wallet to the coordinator's treasury, with a memo
// naming this node, waits for confirmation and has the coordinator credit it. The signed
// transaction is recorded before it is sent: after a crash, ClaimDeposits finishes it.
func (n *Node) Deposit(ctx context.Context, amount protocol.MicroUSDC) (DepositView, error) {
	if amount <= 0 {
		return DepositView{}, badRequest(errors.New("the amount must be positive"))
	}
	if n.cfg.Wallet.RPC == "" {
		return DepositView{}, errors.New("wallet.rpc is not set: name the Solana RPC endpoint in config.toml")
	}
	key, err := n.WalletKey()
	if err != nil {
		return DepositView{}, err
	}
	info, err := n.walletCall(ctx, walletRequest{Op: "info"})
	if err != nil {
		return DepositView{}, err
	}
	if info.Info.Treasury == "" || info.Info.Mint == "" {
		return DepositView{}, errors.New("the coordinator takes no deposits: its treasury or mint is not configured")
	}
	treasury, err1 := sol.PublicKeyFromBase58(info.Info.Treasury)
	mint, err2 := sol.PublicKeyFromBase58(info.Info.Mint)
	if err := errors.Join(err1, err2); err != nil {
		return DepositView{}, fmt.Errorf("coordinator's treasury facts: %w", err)
	}
	c := chain.Dial(n.cfg.Wallet.RPC)
	if info.Info.Cluster != "" {
		if g, err := c.GenesisHash(ctx); err != nil {
			return DepositView{}, fmt.Errorf("wallet.rpc %s: %w", n.cfg.Wallet.RPC, err)
		} else if g != info.Info.Cluster {
			return DepositView{}, fmt.Errorf("%w: wallet.rpc is on cluster %s, the coordinator settles on %s", chain.ErrWrongCluster, g, info.Info.Cluster)
		}
	}
	have, err := c.TokenBalance(ctx, key.PublicKey(), mint)
	if err != nil {
		return DepositView{}, err
	}
	if have < uint64(amount) {
		return DepositView{}, fmt.Errorf("%w: the wallet %s holds %s USDC, %s asked", chain.ErrUnderfunded, key.PublicKey(), protocol.MicroUSDC(have), amount)
	}
	hash, lastValid, err := c.LatestBlockhash(ctx)
	if err != nil {
		return DepositView{}, err
	}
	raw, sig, err := chain.DepositTransaction(hash, key, treasury, mint, USDCDecimals, uint64(amount), protocol.DepositMemo(n.id))
	if err != nil {
		return DepositView{}, err
	}
	d := ledger.OwnDeposit{Signature: sig.String(), Amount: amount, Raw: raw, LastValid: lastValid, SentAt: n.clock.Now()}
	if err := n.ledger.PutOwnDeposit(d); err != nil {
		return DepositView{}, err
	}
	if err := c.Send(ctx, raw); err != nil {
		// It may have landed all the same: the deposit stays recorded, and the claim loop
		// sends it again, claims it, or marks it expired (depositLanded).
		return DepositView{}, fmt.Errorf("deposit %s: %w (it may still land: it is checked and credited automatically; gpunex wallet claim does it now)", sig, err)
	}
	// The coordinator credits finalized deposits only (about 13 s after confirmation on a
	// public cluster).
	st, err := c.WaitFinalized(ctx, sig, lastValid)
	if err != nil {
		return DepositView{}, fmt.Errorf("deposit %s: %w", sig, err)
	}
	if st.Err != "" {
		d.Error, d.Raw = st.Err, nil
		n.ledger.PutOwnDeposit(d)
		return DepositView{}, fmt.Errorf("deposit %s failed on chain: %s", sig, st.Err)
	}
	v, err := n.claim(ctx, d)
	v.Explorer = chain.ExplorerURL(sig, n.cfg.Wallet.RPC)
	return v, err
}

// claim asks the coordinator to credit a confirmed deposit.
func (n *Node) claim(ctx context.Context, d ledger.OwnDeposit) (DepositView, error) {
	v := DepositView{Signature: d.Signature, Amount: d.Amount, AmountUSDC: d.Amount.String()}
	var resp walletResponse
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if resp, err = n.walletCall(ctx, walletRequest{Op: "claim", Signature: d.Signature}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return v, fmt.Errorf("deposit %s is on chain but not credited yet (gpunex wallet claim %s retries): %w", d.Signature, d.Signature, err)
	}
	d.Claimed, d.Raw, d.Error = true, nil, ""
	n.ledger.PutOwnDeposit(d)
	v.Credited = true
	if resp.Account != nil {
		b := balanceView(*resp.Account, nil)
		v.Balance = &b
	}
	return v, nil
}

// ClaimDeposits has the coordinator credit this node's deposits not credited yet (after a
// crash or a coordinator outage), or one named by its signature.
func (n *Node) ClaimDeposits(ctx context.Context, signature string) ([]DepositView, error) {
	if signature != "" {
		v, err := n.claim(ctx, ledger.OwnDeposit{Signature: signature})
		return []DepositView{v}, err
	}
	deps, err := n.ledger.OwnDeposits()
	if err != nil {
		return nil, err
	}
	var out []DepositView
	var errs []error
	for _, d := range deps {
		if d.Claimed || d.Error != "" { // credited, or failed or expired: nothing to claim
			continue
		}
		v, err := n.claim(ctx, d)
		out = append(out, v)
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// BalanceView is a renter's balance at the coordinator.
type BalanceView struct {
	Available     protocol.MicroUSDC `json:"available_micro_usdc"`
	Held          protocol.MicroUSDC `json:"held_micro_usdc"`
	AvailableUSDC string             `json:"available_usdc"`
	HeldUSDC      string             `json:"held_usdc"`
	DepositedUSDC string             `json:"deposited_usdc"`
	ChargedUSDC   string             `json:"charged_usdc"`
	Holds         []HoldView         `json:"holds"`
	// Wallet is the node's own Solana wallet and its USDC, when configured.
	Wallet     string `json:"wallet,omitempty"`
	WalletUSDC string `json:"wallet_usdc,omitempty"`
}

// HoldView is one escrow hold.
type HoldView struct {
	Job        string    `json:"job"`
	Provider   string    `json:"provider"`
	AmountUSDC string    `json:"amount_usdc"`
	State      string    `json:"state"`
	ChargeUSDC string    `json:"charge_usdc,omitempty"`
	ExpiresAt  time.Time `json:"expires_at"`
}

func balanceView(a ledger.Account, holds []ledger.Hold) BalanceView {
	v := BalanceView{Available: a.Available, Held: a.Held, AvailableUSDC: a.Available.String(), HeldUSDC: a.Held.String(),
		DepositedUSDC: a.Deposited.String(), ChargedUSDC: a.Charged.String(), Holds: []HoldView{}}
	for _, h := range holds {
		hv := HoldView{Job: h.Job, Provider: h.Provider, AmountUSDC: h.Amount.String(), State: h.State, ExpiresAt: h.ExpiresAt}
		if h.State == ledger.HoldCharged {
			hv.ChargeUSDC = h.Charge.String()
		}
		v.Holds = append(v.Holds, hv)
	}
	return v
}

// Balance returns this node's balance at the coordinator, and its wallet's USDC.
func (n *Node) Balance(ctx context.Context) (BalanceView, error) {
	resp, err := n.walletCall(ctx, walletRequest{Op: "balance"})
	if err != nil {
		return BalanceView{}, err
	}
	v := balanceView(*resp.Account, resp.Holds)
	if key, err := n.WalletKey(); err == nil && n.cfg.Wallet.RPC != "" {
		v.Wallet = key.PublicKey().String()
		if info, err := n.walletCall(ctx, walletRequest{Op: "info"}); err == nil && info.Info.Mint != "" {
			if mint, err := sol.PublicKeyFromBase58(info.Info.Mint); err == nil {
				if have, err := chain.Dial(n.cfg.Wallet.RPC).TokenBalance(ctx, key.PublicKey(), mint); err == nil {
					v.WalletUSDC = protocol.MicroUSDC(have).String()
				}
			}
		}
	}
	return v, nil
}

// InitWallet creates this node's Solana wallet keypair (refusing to overwrite one) and
// returns its address.
func (n *Node) InitWallet() (string, error) {
	k, err := chain.NewKeypair()
	if err != nil {
		return "", err
	}
	if err := chain.WriteKeypair(n.keyPath(n.cfg.Wallet.Keypair), k); err != nil {
		return "", err
	}
	return k.PublicKey().String(), nil
}

// payoutSettingsLoop signs the provider's [payout] settings and delivers them to the
// coordinator, retrying until it acknowledges them.
func (n *Node) payoutSettingsLoop(ctx context.Context) {
	ps := n.cfg.Payout.Settings()
	if ps == nil {
		return
	}
	ps.Provider, ps.IssuedAt = n.id.String(), n.clock.Now().UTC()
	seq, err := n.ledger.NextPayoutSettingsSeq(ps.IssuedAt)
	if err != nil {
		n.log.Warn("payout settings not sent", "err", err)
		return
	}
	ps.Seq = seq
	raw, err := protocol.Seal(protocol.KindPayoutSettings, ps, n.key)
	if err != nil {
		n.log.Warn("payout settings not sent", "err", err)
		return
	}
	// Every trusted coordinator gets them: a job is charged, and its earning paid, by the
	// coordinator that held the renter's money for it (reportTarget).
	ids, err := n.cfg.TrustedCoordinators()
	if err != nil || len(ids) == 0 {
		return
	}
	left := slices.Clone(ids)
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		left = slices.DeleteFunc(left, func(c peer.ID) bool {
			if _, err := n.walletCallTo(ctx, c, walletRequest{Op: "settings", Settings: raw}); err != nil {
				n.log.Debug("payout settings not delivered yet", "coordinator", c, "err", err)
				return false
			}
			n.log.Info("payout settings delivered to the coordinator", "coordinator", c, "method", ps.Method, "schedule", ps.Schedule)
			return true
		})
		if len(left) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// reportLoop delivers the final receipts the coordinator has not acknowledged yet (a
// coordinator that was down, a lost connection), so that every job is charged and counted.
func (n *Node) reportLoop(ctx context.Context) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		n.deliverReports(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deliverReports sends every final receipt the coordinator has not acknowledged yet, 8 at
// a time, and returns when all were tried or ctx ends: from reportLoop, and at shutdown (the
// jobs stopped then have theirs).
func (n *Node) deliverReports(ctx context.Context) {
	jobs, _ := n.ledger.Jobs()
	slots := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		unreported := j.ReportedAt.IsZero() || (len(j.ReceiptCountersig) > 0 && !j.CountersigReported)
		if j.Side != "provider" || j.State != ledger.JobEnded || len(j.Receipt) == 0 || !unreported || j.ReportError != "" {
			continue
		}
		select {
		case <-ctx.Done():
		case slots <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				n.reportJob(ctx, j)
			}()
		}
	}
	wg.Wait()
}

// claimLoop finishes deposits a crash or a coordinator outage left uncredited: at start
// and every minute while any is left.
func (n *Node) claimLoop(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		deps, _ := n.ledger.OwnDeposits()
		for _, d := range deps {
			if !d.Claimed && d.Error == "" && n.depositLanded(ctx, &d) {
				if _, err := n.claim(ctx, d); err != nil {
					n.log.Debug("deposit not credited yet", "signature", d.Signature, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// holdRelease is the coordinator's question to a provider and its answer.
type holdRelease struct {
	Job     string `json:"job"`
	Release bool   `json:"release,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// handleHoldRelease answers a trusted coordinator asking whether a job's hold may be
// released: yes when the job never got a lease here (the job ID is then marked so that no
// proposal for it is taken later) or failed before it started; no once it has a lease.
func (r *jobRunner) handleHoldRelease(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	remote := s.Conn().RemotePeer()
	trusted, _ := r.n.cfg.TrustedCoordinators()
	var q holdRelease
	if !slices.Contains(trusted, remote) {
		writeJSONFrame(s, holdRelease{Reason: "only a trusted coordinator may ask"})
		return
	}
	if err := readJSONFrame(bufio.NewReader(s), 1024, &q); err != nil || !protocol.ValidJobID(q.Job) {
		writeJSONFrame(s, holdRelease{Reason: "bad request"})
		return
	}
	writeJSONFrame(s, r.releaseAnswer(q.Job))
}

func (r *jobRunner) releaseAnswer(job string) holdRelease {
	now := r.n.clock.Now()
	err := r.n.ledger.CreateJob(ledger.Job{ID: job, Side: "provider", State: ledger.JobReleased, CreatedAt: now, UpdatedAt: now,
		Error: "escrow hold released before any lease"})
	if err == nil {
		return holdRelease{Job: job, Release: true}
	}
	j, gerr := r.n.ledger.GetJob(job)
	switch {
	case gerr != nil:
		return holdRelease{Job: job, Reason: gerr.Error()}
	case j.State == ledger.JobReleased, j.State == ledger.JobFailed && len(j.Receipt) == 0:
		return holdRelease{Job: job, Release: true}
	}
	return holdRelease{Job: job, Reason: fmt.Sprintf("job %s is %s here: its final receipt settles the hold", job, j.State)}
}

// ReleaseHold asks the coordinator to return a job's hold: the provider must confirm
// that the job never ran.
func (n *Node) ReleaseHold(ctx context.Context, job string) (BalanceView, error) {
	resp, err := n.walletCall(ctx, walletRequest{Op: "release", Job: job})
	if err != nil {
		return BalanceView{}, err
	}
	return balanceView(*resp.Account, resp.Holds), nil
}

// releaseAfterFailure asks for a failed proposal's hold back, a few times: a provider that
// is still marking a failed start answers no at first.
func (n *Node) releaseAfterFailure(job string) {
	for _, wait := range []time.Duration{0, 2 * time.Second, 10 * time.Second, 30 * time.Second} {
		time.Sleep(wait)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := n.ReleaseHold(ctx, job)
		cancel()
		if err == nil {
			n.log.Info("escrow hold released: the job did not run", "job", job)
			return
		}
		n.log.Debug("escrow hold not released yet", "job", job, "err", err)
	}
	n.log.Info("escrow hold kept until it expires (gpunex wallet release retries)", "job", job)
}

// depositLanded finishes a deposit a crash may have left between recording and sending: on
// chain, it is ready to claim; not on chain and still valid, it is sent again (the same
// signed bytes cannot pay twice); expired unseen, it moved nothing and is marked so.
func (n *Node) depositLanded(ctx context.Context, d *ledger.OwnDeposit) bool {
	if n.cfg.Wallet.RPC == "" || len(d.Raw) == 0 {
		return true
	}
	sig, err := sol.SignatureFromBase58(d.Signature)
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := chain.Dial(n.cfg.Wallet.RPC)
	height, err := c.BlockHeight(ctx) // first: see settleTx
	if err != nil {
		return false
	}
	st, err := c.Status(ctx, sig)
	switch {
	case err != nil:
		return false
	case st.Found && st.Err != "":
		d.Error, d.Raw = "failed on chain: "+st.Err, nil
	case st.Found:
		return true
	case height > d.LastValid:
		d.Error, d.Raw = "never landed: its blockhash expired, nothing moved; deposit again", nil
	default:
		if err := c.Send(ctx, d.Raw); err != nil {
			n.log.Debug("deposit sent again", "signature", d.Signature, "err", err)
		}
		return false // claimed at the next round, once confirmed
	}
	n.ledger.PutOwnDeposit(*d)
	n.log.Warn("deposit not credited", "signature", d.Signature, "why", d.Error)
	return false
}
