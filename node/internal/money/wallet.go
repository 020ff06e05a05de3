package money

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"

	"github.com/gpunex/gpunex/node/api"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/protocol"

	"golang.org/x/sync/errgroup"
)

// The renter's and the provider's side of money: the wallet stream to the coordinator,
// deposits, balances, escrow holds for jobs, payout settings and job reports.

// Wallet is every node's side of money: the wallet stream to its coordinators (deposits,
// balance, escrow holds, releases, earnings, audit bundles), the provider's payout settings
// and job reports.
type Wallet struct {
	peer    *p2p.Peer
	id      peer.ID
	ledger  Stores
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	cfg     config.Config
	home    string
	// settlement answers locally what is asked of this node as a coordinator (nil on other
	// roles).
	settlement *Settlement

	// payoutPoke restarts the delivery of the payout settings after they change;
	// deliveries says where the latest ones stand with each trusted coordinator.
	payoutPoke chan struct{}
	payoutMu   sync.Mutex
	deliveries map[peer.ID]api.PayoutDelivery
	// alert tells the operator (a payout settings change applied after its delay); nil
	// tells nobody.
	alert func(key, subject, body string)
}

// SetAlert has the wallet tell the operator through alert.
func (w *Wallet) SetAlert(alert func(key, subject, body string)) { w.alert = alert }

// NewWallet returns a node's wallet; settlement is the node's own when it is a coordinator.
func NewWallet(d Deps, settlement *Settlement) *Wallet {
	return &Wallet{peer: d.Peer, id: d.Peer.ID, ledger: d.Ledger, clock: d.Clock, log: d.Log, metrics: d.Metrics,
		cfg: d.Config, home: d.Home, settlement: settlement, payoutPoke: make(chan struct{}, 1),
		deliveries: map[peer.ID]api.PayoutDelivery{}}
}

// Info returns a coordinator's treasury facts ("": the home coordinator).
func (w *Wallet) Info(ctx context.Context, coordinator string) (*api.WalletInfo, error) {
	c, err := w.coordinator(coordinator)
	if err != nil {
		return nil, err
	}
	resp, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "info"})
	if err != nil {
		return nil, err
	}
	return resp.Info, nil
}

// walletCall sends one request on the wallet stream to the coordinator (or serves it
// locally on a coordinator).
func (w *Wallet) walletCall(ctx context.Context, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	if w.settlement != nil {
		return w.settlement.Serve(ctx, w.id, req)
	}
	c, err := w.cfg.HomeCoordinator(w.id)
	if err != nil {
		return protocol.WalletResponse{}, err
	}
	return w.walletCallTo(ctx, c, req)
}

// coordinator names the coordinator a wallet request goes to: the home coordinator (the
// first trusted) when name is empty, else one of trust.coordinators. A node keeps an
// account at each coordinator it deposited with.
func (w *Wallet) coordinator(name string) (peer.ID, error) {
	if name == "" {
		return w.cfg.HomeCoordinator(w.id)
	}
	c, err := peer.Decode(name)
	if err != nil {
		return "", api.Invalid(fmt.Errorf("coordinator %q: not a peer ID", name))
	}
	if c == w.id && w.settlement != nil {
		return c, nil
	}
	trusted, err := w.cfg.TrustedCoordinators()
	if err != nil {
		return "", err
	}
	if !slices.Contains(trusted, c) {
		return "", api.Invalid(fmt.Errorf("coordinator %s is not in trust.coordinators", c))
	}
	return c, nil
}

// walletCallTo sends one wallet request to a given coordinator (served locally when it is
// this node).
func (w *Wallet) walletCallTo(ctx context.Context, c peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	if w.settlement != nil && c == w.id {
		return w.settlement.Serve(ctx, w.id, req)
	}
	var resp protocol.WalletResponse
	if err := w.peer.Exchange(ctx, c, protocol.WalletProtocol, 60*time.Second, req, protocol.MaxWalletResponse, &resp); err != nil {
		return protocol.WalletResponse{}, fmt.Errorf("coordinator %s: %w", c, err)
	}
	if resp.Error != "" {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// ClockOffset measures this node's clock against its coordinator's: wallet requests, the
// coordinator's time taken at the middle of the shortest round trip.
func (w *Wallet) ClockOffset(ctx context.Context) (api.ClockView, error) {
	c, err := w.cfg.HomeCoordinator(w.id)
	if err != nil {
		return api.ClockView{}, err
	}
	if c == w.id {
		return api.ClockView{}, fmt.Errorf("%w: this node is the coordinator", api.ErrWrongRole)
	}
	// Three exchanges, the shortest round trip kept: the first may include dialling.
	var best api.ClockView
	for i := range 3 {
		sent := w.clock.Now()
		resp, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "info"})
		back := w.clock.Now()
		if err != nil {
			return api.ClockView{}, err
		}
		if resp.Now.IsZero() {
			return api.ClockView{}, fmt.Errorf("coordinator %s does not say its time (an older version)", c)
		}
		rtt := back.Sub(sent)
		if i == 0 || rtt.Milliseconds() < best.RoundTripMillis {
			offset := sent.Add(rtt / 2).Sub(resp.Now)
			best = api.ClockView{Coordinator: c.String(), OffsetMillis: offset.Milliseconds(), RoundTripMillis: rtt.Milliseconds(), MeasuredAt: back.UTC()}
		}
	}
	return best, nil
}

// RequestHold asks a coordinator to set the proposal's maximum cost aside: the one that
// certified the provider (the provider trusts it), from this node's account there; the home
// coordinator when none is named.
func (w *Wallet) RequestHold(ctx context.Context, p protocol.Proposal, coordinator peer.ID) ([]byte, error) {
	c, err := w.coordinator(coordinator.String())
	if err != nil {
		return nil, err
	}
	expires := p.IssuedAt.Add(protocol.ProposalTTL + time.Duration(p.MaxSeconds)*time.Second + protocol.HoldGrace + time.Minute)
	resp, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "hold", Job: p.Job, Provider: p.Provider,
		Amount: protocol.HoldAmount(p.MaxPrice, p.GPUs, p.MaxSeconds), ExpiresAt: expires})
	if err != nil {
		return nil, err
	}
	// The hold's signer is where this job's disputes and accounts go later: it must be the
	// coordinator asked. A hold refused here (a renter's clock far off the coordinator's,
	// say) is placed all the same: it is asked back at once rather than left to lock the
	// funds until it expires.
	if h, err := protocol.CheckHold(resp.Hold, w.clock.Now(), protocol.NewTrust(c)); err != nil {
		go w.ReleaseAfterFailure(p.Job, c)
		return nil, fmt.Errorf("coordinator %s answered with a hold that does not check: %w", c, err)
	} else if h.Job != p.Job || h.Renter != w.id.String() {
		go w.ReleaseAfterFailure(p.Job, c)
		return nil, fmt.Errorf("coordinator %s answered with a hold for another job or renter", c)
	}
	return resp.Hold, nil
}

// WalletKey loads this node's Solana wallet keypair.
func (w *Wallet) WalletKey() (chain.PrivateKey, error) {
	k, err := chain.LoadKeypair(keyPath(w.home, w.cfg.Wallet.Keypair))
	if err != nil {
		return nil, fmt.Errorf("wallet.keypair: %w (create one with gpunex wallet init)", err)
	}
	return k, nil
}

// Deposit sends USDC from this node's wallet to a coordinator's treasury ("": the home
// coordinator's), with a memo naming this node, waits for confirmation and has the
// coordinator credit it. The signed transaction is recorded before it is sent: after a
// crash, ClaimDeposits finishes it.
func (w *Wallet) Deposit(ctx context.Context, amount protocol.MicroUSDC, coordinator string) (api.DepositView, error) {
	if amount <= 0 {
		return api.DepositView{}, api.Invalid(errors.New("the amount must be positive"))
	}
	to, err := w.coordinator(coordinator)
	if err != nil {
		return api.DepositView{}, err
	}
	if w.cfg.Wallet.RPC == "" {
		return api.DepositView{}, errors.New("wallet.rpc is not set: name the Solana RPC endpoint in config.toml")
	}
	key, err := w.WalletKey()
	if err != nil {
		return api.DepositView{}, err
	}
	info, err := w.walletCallTo(ctx, to, protocol.WalletRequest{Op: "info"})
	if err != nil {
		return api.DepositView{}, err
	}
	if info.Info.Treasury == "" || info.Info.Mint == "" {
		return api.DepositView{}, errors.New("the coordinator takes no deposits: its treasury or mint is not configured")
	}
	treasury, err1 := chain.ParsePublicKey(info.Info.Treasury)
	mint, err2 := chain.ParsePublicKey(info.Info.Mint)
	if err := errors.Join(err1, err2); err != nil {
		return api.DepositView{}, fmt.Errorf("coordinator's treasury facts: %w", err)
	}
	c := chain.Dial(w.cfg.Wallet.RPC)
	if info.Info.Cluster != "" {
		if g, err := c.GenesisHash(ctx); err != nil {
			return api.DepositView{}, fmt.Errorf("wallet.rpc %s: %w", w.cfg.Wallet.RPC, err)
		} else if g != info.Info.Cluster {
			return api.DepositView{}, fmt.Errorf("%w: wallet.rpc is on cluster %s, the coordinator settles on %s", chain.ErrWrongCluster, g, info.Info.Cluster)
		}
	}
	have, err := c.TokenBalance(ctx, key.PublicKey(), mint)
	if err != nil {
		return api.DepositView{}, err
	}
	if have < uint64(amount) {
		return api.DepositView{}, fmt.Errorf("%w: the wallet %s holds %s USDC, %s asked", chain.ErrUnderfunded, key.PublicKey(), protocol.MicroUSDC(have), amount)
	}
	hash, lastValid, err := c.LatestBlockhash(ctx)
	if err != nil {
		return api.DepositView{}, err
	}
	raw, sig, err := chain.DepositTransaction(hash, key, treasury, mint, protocol.USDCDecimals, uint64(amount), protocol.DepositMemo(w.id))
	if err != nil {
		return api.DepositView{}, err
	}
	d := ledger.OwnDeposit{Signature: sig.String(), Amount: amount, Raw: raw, LastValid: lastValid, SentAt: w.clock.Now(), Coordinator: to.String()}
	if err := w.ledger.Wallet.PutOwnDeposit(d); err != nil {
		return api.DepositView{}, err
	}
	if err := c.Send(ctx, raw); err != nil {
		// It may have landed all the same: the deposit stays recorded, and the claim loop
		// sends it again, claims it, or marks it expired (depositLanded).
		return api.DepositView{}, fmt.Errorf("deposit %s: %w (it may still land: it is checked and credited automatically; gpunex wallet claim does it now)", sig, err)
	}
	// The coordinator credits finalized deposits only (about 13 s after confirmation on a
	// public cluster).
	st, err := c.WaitFinalized(ctx, sig, lastValid)
	if err != nil {
		return api.DepositView{}, fmt.Errorf("deposit %s: %w", sig, err)
	}
	if st.Err != "" {
		d.Error, d.Raw = st.Err, nil
		w.ledger.Wallet.PutOwnDeposit(d)
		return api.DepositView{}, fmt.Errorf("deposit %s failed on chain: %s", sig, st.Err)
	}
	v, err := w.claim(ctx, d)
	v.Explorer = chain.ExplorerURL(sig, w.cfg.Wallet.RPC)
	return v, err
}

// claim asks the coordinator the deposit was sent to (the home coordinator for deposits
// recorded before they named one) to credit it.
func (w *Wallet) claim(ctx context.Context, d ledger.OwnDeposit) (api.DepositView, error) {
	v := api.DepositView{Signature: d.Signature, Amount: d.Amount, AmountUSDC: d.Amount.String()}
	to, err := w.coordinator(d.Coordinator)
	if err != nil {
		return v, err
	}
	var resp protocol.WalletResponse
	for attempt := 0; attempt < 10; attempt++ {
		if resp, err = w.walletCallTo(ctx, to, protocol.WalletRequest{Op: "claim", Signature: d.Signature}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-w.clock.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return v, fmt.Errorf("deposit %s is on chain but not credited yet (gpunex wallet claim %s retries): %w", d.Signature, d.Signature, err)
	}
	d.Claimed, d.Raw, d.Error = true, nil, ""
	w.ledger.Wallet.PutOwnDeposit(d)
	v.Credited = true
	if resp.Account != nil {
		b := balanceView(*resp.Account, nil)
		v.Balance = &b
	}
	return v, nil
}

// ClaimDeposits has the coordinators credit this node's deposits not credited yet (after a
// crash or a coordinator outage), or one named by its signature (sent to coordinator, ""
// for the one this node recorded, else the home coordinator).
func (w *Wallet) ClaimDeposits(ctx context.Context, signature, coordinator string) ([]api.DepositView, error) {
	if signature != "" {
		d := ledger.OwnDeposit{Signature: signature, Coordinator: coordinator}
		if own, err := w.ledger.Wallet.OwnDeposit(signature); err == nil && coordinator == "" {
			d.Coordinator = own.Coordinator
		}
		v, err := w.claim(ctx, d)
		return []api.DepositView{v}, err
	}
	deps, err := w.ledger.Wallet.OwnDeposits()
	if err != nil {
		return nil, err
	}
	var out []api.DepositView
	var errs []error
	for _, d := range deps {
		if d.Claimed || d.Error != "" { // credited, or failed or expired: nothing to claim
			continue
		}
		v, err := w.claim(ctx, d)
		out = append(out, v)
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

func balanceView(a ledger.Account, holds []ledger.Hold) api.BalanceView {
	v := api.BalanceView{Available: a.Available, Held: a.Held, AvailableUSDC: a.Available.String(), HeldUSDC: a.Held.String(),
		DepositedUSDC: a.Deposited.String(), ChargedUSDC: a.Charged.String(), Holds: []api.HoldView{}}
	for _, h := range holds {
		hv := api.HoldView{Job: h.Job, Provider: h.Provider, AmountUSDC: h.Amount.String(), State: h.State, ExpiresAt: h.ExpiresAt}
		if h.State == ledger.HoldCharged {
			hv.ChargeUSDC = h.Charge.String()
		}
		v.Holds = append(v.Holds, hv)
	}
	return v
}

// Balance returns this node's balance at a coordinator ("": the home coordinator), and its
// wallet's USDC.
func (w *Wallet) Balance(ctx context.Context, coordinator string) (api.BalanceView, error) {
	c, err := w.coordinator(coordinator)
	if err != nil {
		return api.BalanceView{}, err
	}
	resp, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "balance"})
	if err != nil {
		return api.BalanceView{}, err
	}
	v := balanceView(*resp.Account, resp.Holds)
	v.Coordinator = c.String()
	if key, err := w.WalletKey(); err == nil && w.cfg.Wallet.RPC != "" {
		v.Wallet = key.PublicKey().String()
		if info, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "info"}); err == nil && info.Info.Mint != "" {
			if mint, err := chain.ParsePublicKey(info.Info.Mint); err == nil {
				if have, err := chain.Dial(w.cfg.Wallet.RPC).TokenBalance(ctx, key.PublicKey(), mint); err == nil {
					v.WalletUSDC = protocol.MicroUSDC(have).String()
				}
			}
		}
	}
	return v, nil
}

// InitWallet creates this node's Solana wallet keypair (refusing to overwrite one) and
// returns its address.
func (w *Wallet) InitWallet() (string, error) {
	k, err := chain.NewKeypair()
	if err != nil {
		return "", err
	}
	if err := chain.WriteKeypair(keyPath(w.home, w.cfg.Wallet.Keypair), k); err != nil {
		return "", err
	}
	return k.PublicKey().String(), nil
}

// PayoutSettings returns the provider's payout settings in force: those chosen from the
// dashboard (SetPayoutSettings) or else [payout] of config.toml; nil when there are none.
func (w *Wallet) PayoutSettings() (ps *protocol.PayoutSettings, fromConfig bool, err error) {
	ps, err = w.ledger.Wallet.OwnPayoutSettings()
	if errors.Is(err, ledger.ErrNotFound) {
		return w.cfg.Payout.Settings(), true, nil
	}
	return ps, false, err
}

// SetPayoutSettings keeps new payout settings (nil: back to config.toml's) and delivers
// them, signed, to every trusted coordinator: the next payout goes where they say.
func (w *Wallet) SetPayoutSettings(ps *protocol.PayoutSettings) error {
	if ps != nil {
		ps.Provider, ps.Seq, ps.IssuedAt = "", 0, time.Time{}
		if err := ps.Validate(); err != nil {
			return err
		}
	}
	if err := w.ledger.Wallet.SetOwnPayoutSettings(ps); err != nil {
		return err
	}
	// Until the loop signs and delivers them, no coordinator has these settings.
	w.payoutMu.Lock()
	for c := range w.deliveries {
		w.deliveries[c] = api.PayoutDelivery{Coordinator: c.String()}
	}
	w.payoutMu.Unlock()
	w.poke()
	return nil
}

// poke wakes PayoutSettingsLoop.
func (w *Wallet) poke() {
	select {
	case w.payoutPoke <- struct{}{}:
	default:
	}
}

// PayoutSettingsView describes the payout settings in force and where their delivery stands.
func (w *Wallet) PayoutSettingsView() (api.PayoutSettingsView, error) {
	ps, fromConfig, err := w.PayoutSettings()
	if err != nil {
		return api.PayoutSettingsView{}, err
	}
	v := api.PayoutSettingsView{Settings: ps, FromConfig: fromConfig, Deliveries: []api.PayoutDelivery{}}
	if c, err := w.PendingPayoutChange(); err == nil && c != nil {
		v.Pending = &api.PendingPayoutView{Settings: c.Settings, Remove: c.Remove, RequestedAt: c.RequestedAt, ApplyAt: c.ApplyAt}
	}
	ids, _ := w.cfg.TrustedCoordinators()
	w.payoutMu.Lock()
	defer w.payoutMu.Unlock()
	for _, c := range ids {
		d, ok := w.deliveries[c]
		if !ok {
			d = api.PayoutDelivery{Coordinator: c.String()}
		}
		v.Deliveries = append(v.Deliveries, d)
	}
	return v, nil
}

// PayoutSettingsLoop signs the provider's payout settings and delivers them to every
// trusted coordinator, retrying until each acknowledges them, and again whenever they
// change.
func (w *Wallet) PayoutSettingsLoop(ctx context.Context) {
	for {
		if !w.deliverPayoutSettings(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-w.payoutPoke:
			case <-w.payoutChangeDue():
				if c, err := w.ApplyDuePayoutChange(); err != nil {
					w.log.Warn("payout settings change not applied", "err", err)
				} else if c != nil && w.alert != nil {
					w.alert("payout-settings", "Payout settings changed", "The payout settings change asked for from the dashboard at "+
						c.RequestedAt.Format(time.RFC3339)+" applied: "+DescribePayoutChange(*c))
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// deliverPayoutSettings signs the settings in force and delivers them; it reports true
// when new settings interrupted it.
func (w *Wallet) deliverPayoutSettings(ctx context.Context) (poked bool) {
	ps, _, err := w.PayoutSettings()
	if err != nil || ps == nil {
		if err != nil {
			w.log.Warn("payout settings not sent", "err", err)
		}
		return false
	}
	ps.Provider, ps.IssuedAt = w.id.String(), w.clock.Now().UTC()
	seq, err := w.ledger.Wallet.NextPayoutSettingsSeq(ps.IssuedAt)
	if err != nil {
		w.log.Warn("payout settings not sent", "err", err)
		return false
	}
	ps.Seq = seq
	raw, err := protocol.Seal(protocol.KindPayoutSettings, ps, w.peer.Key)
	if err != nil {
		w.log.Warn("payout settings not sent", "err", err)
		return false
	}
	// Every trusted coordinator gets them: a job is charged, and its earning paid, by the
	// coordinator that held the renter's money for it (reportTarget).
	ids, err := w.cfg.TrustedCoordinators()
	if err != nil || len(ids) == 0 {
		return false
	}
	w.payoutMu.Lock()
	for _, c := range ids {
		w.deliveries[c] = api.PayoutDelivery{Coordinator: c.String(), Seq: seq}
	}
	w.payoutMu.Unlock()
	left := slices.Clone(ids)
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		changed := false
		left = slices.DeleteFunc(left, func(c peer.ID) bool {
			// New settings while these are delivered: stop, and deliver those instead.
			select {
			case <-w.payoutPoke:
				changed = true
			default:
			}
			if changed {
				return false
			}
			_, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "settings", Settings: raw})
			w.payoutMu.Lock()
			// An entry reset for newer settings (SetPayoutSettings) is not these settings'.
			if d := w.deliveries[c]; d.Seq == seq {
				if err != nil {
					d.Error = err.Error()
				} else {
					at := w.clock.Now().UTC()
					d.Error, d.DeliveredAt = "", &at
				}
				w.deliveries[c] = d
			}
			w.payoutMu.Unlock()
			if err != nil {
				w.log.Debug("payout settings not delivered yet", "coordinator", c, "err", err)
				return false
			}
			w.log.Info("payout settings delivered to the coordinator", "coordinator", c, "method", ps.Method, "schedule", ps.Schedule)
			return true
		})
		if changed {
			return true
		}
		if len(left) == 0 {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-w.payoutPoke:
			return true
		case <-w.clock.After(delay):
		}
	}
}

// ReportLoop delivers the final receipts the coordinator has not acknowledged yet (a
// coordinator that was down, a lost connection), so that every job is charged and counted.
func (w *Wallet) ReportLoop(ctx context.Context) {
	for {
		w.DeliverReports(ctx)
		select {
		case <-ctx.Done():
			return
		case <-w.clock.After(15 * time.Second):
		}
	}
}

// DeliverReports sends every final receipt the coordinator has not acknowledged yet, 8 at
// a time, and returns when all were tried or ctx ends: from reportLoop, and at shutdown (the
// jobs stopped then have theirs).
func (w *Wallet) DeliverReports(ctx context.Context) {
	jobs, _ := w.ledger.Jobs.Jobs()
	var workers errgroup.Group
	workers.SetLimit(8)
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		unreported := j.ReportedAt.IsZero() || (len(j.ReceiptCountersig) > 0 && !j.CountersigReported)
		if j.Side != "provider" || j.State != ledger.JobEnded || len(j.Receipt) == 0 || !unreported || j.ReportError != "" {
			continue
		}
		workers.Go(func() error { w.ReportJob(ctx, j); return nil })
	}
	workers.Wait()
}

// ClaimLoop finishes deposits a crash or a coordinator outage left uncredited: at start
// and every minute while any is left.
func (w *Wallet) ClaimLoop(ctx context.Context) {
	for {
		deps, _ := w.ledger.Wallet.OwnDeposits()
		for _, d := range deps {
			if !d.Claimed && d.Error == "" && w.DepositLanded(ctx, &d) {
				if _, err := w.claim(ctx, d); err != nil {
					w.log.Debug("deposit not credited yet", "signature", d.Signature, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.clock.After(time.Minute):
		}
	}
}

// ReleaseHold asks the coordinator that holds a job's money to return it: the provider
// must confirm that the job never ran. The coordinator is the hold's signer, from the
// job's proposal when this node keeps the job, else coordinator ("": the home one).
func (w *Wallet) ReleaseHold(ctx context.Context, job, coordinator string) (api.BalanceView, error) {
	if j, err := w.ledger.Jobs.GetJob(job); err == nil && coordinator == "" {
		coordinator = protocol.HoldCoordinator(j.Proposal).String()
	}
	c, err := w.coordinator(coordinator)
	if err != nil {
		return api.BalanceView{}, err
	}
	resp, err := w.walletCallTo(ctx, c, protocol.WalletRequest{Op: "release", Job: job})
	if err != nil {
		return api.BalanceView{}, err
	}
	return balanceView(*resp.Account, resp.Holds), nil
}

// ReleaseAfterFailure asks for a failed proposal's hold back, a few times: a provider that
// is still marking a failed start answers no at first.
func (w *Wallet) ReleaseAfterFailure(job string, coordinator peer.ID) {
	for _, wait := range []time.Duration{0, 2 * time.Second, 10 * time.Second, 30 * time.Second} {
		<-w.clock.After(wait)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := w.ReleaseHold(ctx, job, coordinator.String())
		cancel()
		if err == nil {
			w.log.Info("escrow hold released: the job did not run", "job", job)
			return
		}
		w.log.Debug("escrow hold not released yet", "job", job, "err", err)
	}
	w.log.Info("escrow hold kept until it expires (gpunex wallet release retries)", "job", job)
}

// DepositLanded finishes a deposit a crash may have left between recording and sending: on
// chain, it is ready to claim; not on chain and still valid, it is sent again (the same
// signed bytes cannot pay twice); expired unseen, it moved nothing and is marked so.
func (w *Wallet) DepositLanded(ctx context.Context, d *ledger.OwnDeposit) bool {
	if w.cfg.Wallet.RPC == "" || len(d.Raw) == 0 {
		return true
	}
	sig, err := chain.ParseSignature(d.Signature)
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := chain.Dial(w.cfg.Wallet.RPC)
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
			w.log.Debug("deposit sent again", "signature", d.Signature, "err", err)
		}
		return false // claimed at the next round, once confirmed
	}
	w.ledger.Wallet.PutOwnDeposit(*d)
	w.log.Warn("deposit not credited", "signature", d.Signature, "why", d.Error)
	return false
}
