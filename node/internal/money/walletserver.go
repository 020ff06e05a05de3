package money

import (
	"bufio"
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// The wallet stream's server on a coordinator (/gpunex/wallet/2.0.0): one request, one
// answer, each op answered by its handler below. docs/protocols/settlement.md.

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

// walletServer answers wallet requests from the settlement's parts.
type walletServer struct {
	id       peer.ID
	ledger   Stores
	clock    clock.Clock
	metrics  *metrics.Metrics
	peers    Misbehaviour
	treasury *treasury
	// commissionBPS and minPayout are announced by info.
	commissionBPS int
	minPayout     protocol.MicroUSDC

	deposits *deposits
	holds    *holds
	disputes *disputes
	payouts  *payouts
	earnings *earningsAnswers
	bundles  *auditBundles

	// ops are the requests served, by op.
	ops map[string]walletOp
	// rate limits every wallet request per peer and network.
	rate *p2p.Sources
	// now is the wall clock the budgets refill by (time.Now; tests fix it).
	now func() time.Time
}

// walletOp is one op of the wallet stream: its handler and, for an op that costs more than
// others, a budget of its own spent besides the stream's.
type walletOp struct {
	serve func(ctx context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error)
	// limit, when set, is the op's own budget, and slowDown the answer once it is spent.
	limit    *p2p.Sources
	slowDown string
}

// newWalletServer completes w with its op table and its budgets.
func newWalletServer(w *walletServer) *walletServer {
	w.rate = p2p.NewSources(walletRequestsPerMinute, walletRequestsPerMinute, 4)
	w.now = time.Now
	claims := p2p.NewSources(claimsPerMinute, 2*claimsPerMinute, 4)
	w.ops = map[string]walletOp{
		"info":      {serve: w.serveInfo},
		"claim":     {serve: w.serveClaim, limit: claims, slowDown: fmt.Sprintf("more than %d deposit claims a minute: slow down", claimsPerMinute)},
		"balance":   {serve: w.serveBalance},
		"hold":      {serve: w.serveHold},
		"release":   {serve: w.serveRelease},
		"settings":  {serve: w.serveSettings},
		"earnings":  {serve: w.serveEarnings},
		"batches":   {serve: w.serveBatches},
		"dispute":   {serve: w.serveDispute},
		"abandoned": {serve: w.serveAbandoned},
		"extend":    {serve: w.serveExtend},
		"bundle":    {serve: w.serveBundle},
	}
	return w
}

// HandleWallet serves the wallet stream: one request, one answer.
func (s *walletServer) HandleWallet(st network.Stream) {
	defer st.Close()
	st.SetDeadline(time.Now().Add(60 * time.Second))
	remote := st.Conn().RemotePeer()
	if !s.rate.Take(st.Conn(), s.now(), 1) {
		s.metrics.RecordsRejected.WithLabelValues("wallet-request", "stream", "rate_limited").Inc()
		s.peers.Misbehaved(remote)
		s.answer(st, protocol.WalletResponse{Error: fmt.Sprintf("more than %d wallet requests in a minute: slow down", walletRequestsPerMinute)})
		return
	}
	var req protocol.WalletRequest
	if err := protocol.ReadJSONFrame(bufio.NewReader(st), protocol.MaxWalletRequest, &req); err != nil {
		s.answer(st, protocol.WalletResponse{Error: "bad request: " + err.Error()})
		return
	}
	if op, ok := s.ops[req.Op]; ok && op.limit != nil && !op.limit.Take(st.Conn(), s.now(), 1) {
		s.metrics.RecordsRejected.WithLabelValues("wallet-request", "stream", "rate_limited").Inc()
		s.peers.Misbehaved(remote)
		s.answer(st, protocol.WalletResponse{Error: op.slowDown})
		return
	}
	resp, err := s.Serve(context.Background(), remote, req)
	if err != nil {
		resp = protocol.WalletResponse{Error: err.Error()}
	}
	s.answer(st, resp)
}

// answer writes a wallet answer with the coordinator's time in it.
func (s *walletServer) answer(st network.Stream, resp protocol.WalletResponse) {
	resp.Now = s.clock.Now().UTC()
	protocol.WriteJSONFrame(st, resp)
}

// Serve answers one wallet request from remote: HandleWallet for a peer's stream, and the
// coordinator's own wallet calls directly (Wallet.walletCall).
func (s *walletServer) Serve(ctx context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	op, ok := s.ops[req.Op]
	if !ok {
		return protocol.WalletResponse{}, fmt.Errorf("unknown wallet request %q", req.Op)
	}
	return op.serve(ctx, remote, req)
}

// info is the treasury's facts: where deposits go and what the coordinator charges.
func (s *walletServer) info() api.WalletInfo {
	wi := api.WalletInfo{Coordinator: s.id.String(), Cluster: s.treasury.cluster, CommissionBPS: s.commissionBPS, MinPayout: s.minPayout}
	if !s.treasury.mint.IsZero() {
		wi.Mint = s.treasury.mint.String()
	}
	if k, err := s.treasury.key(); err == nil {
		wi.Treasury = k.PublicKey().String()
	}
	return wi
}

// serveInfo answers the treasury's facts and the memo remote's deposits must carry.
func (s *walletServer) serveInfo(_ context.Context, remote peer.ID, _ protocol.WalletRequest) (protocol.WalletResponse, error) {
	wi := s.info()
	wi.DepositMemo = protocol.DepositMemo(remote)
	return protocol.WalletResponse{Info: &wi}, nil
}

// serveClaim credits a deposit (to the renter its memo names) and answers its account.
func (s *walletServer) serveClaim(ctx context.Context, _ peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	d, credited, err := s.deposits.claim(ctx, req.Signature)
	if err != nil {
		return protocol.WalletResponse{}, err
	}
	a, err := s.ledger.Escrow.GetAccount(d.Renter)
	return protocol.WalletResponse{Deposit: &d, Credited: credited, Account: &a}, err
}

// serveBalance answers remote's account with its latest holds and deposits.
func (s *walletServer) serveBalance(_ context.Context, remote peer.ID, _ protocol.WalletRequest) (protocol.WalletResponse, error) {
	a, err := s.ledger.Escrow.GetAccount(remote.String())
	if err != nil {
		return protocol.WalletResponse{}, err
	}
	holds, err := s.ledger.Escrow.RenterHolds(remote.String(), MaxBalanceRows)
	if err != nil {
		return protocol.WalletResponse{}, err
	}
	deps, err := s.ledger.Escrow.RenterDeposits(remote.String(), MaxBalanceRows)
	return protocol.WalletResponse{Account: &a, Holds: holds, Deposits: deps}, err
}

// serveHold places a job's escrow hold from remote's funds and answers the signed hold.
func (s *walletServer) serveHold(_ context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	raw, err := s.holds.place(remote, req)
	return protocol.WalletResponse{Hold: raw}, err
}

// serveRelease returns remote's hold of a job that never ran and answers its account.
func (s *walletServer) serveRelease(ctx context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	h, err := s.holds.release(ctx, remote, req.Job)
	if err != nil {
		return protocol.WalletResponse{}, err
	}
	a, err := s.ledger.Escrow.GetAccount(h.Renter)
	return protocol.WalletResponse{Account: &a}, err
}

// serveSettings keeps a provider's payout settings, signed by the provider that sends them.
func (s *walletServer) serveSettings(_ context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	ps, signer, err := protocol.CheckPayoutSettings(req.Settings, s.clock.Now())
	if err != nil {
		return protocol.WalletResponse{}, err
	}
	if signer != remote {
		return protocol.WalletResponse{}, fmt.Errorf("payout settings signed by %s, sent by %s", signer, remote)
	}
	_, err = s.ledger.Payouts.PutPayoutSettings(ledger.PayoutSettings{PayoutSettings: *ps, Raw: req.Settings})
	return protocol.WalletResponse{}, err
}

// serveEarnings answers remote's earnings of jobs that ended in [req.From, req.To].
func (s *walletServer) serveEarnings(_ context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	a, err := s.earnings.EarningsOf(remote.String(), req.From, req.To)
	return protocol.WalletResponse{Earnings: a}, err
}

// serveBatches answers a page of the signed batch records, older than req.After.
func (s *walletServer) serveBatches(_ context.Context, _ peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	batches, more, err := s.payouts.batchPage(req.After, WalletPageBytes)
	return protocol.WalletResponse{Batches: batches, More: more}, err
}

// serveDispute takes remote's dispute of a receipt.
func (s *walletServer) serveDispute(_ context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	return protocol.WalletResponse{}, s.disputes.open(remote, req)
}

// serveAbandoned takes remote's account of a job its provider abandoned.
func (s *walletServer) serveAbandoned(_ context.Context, remote peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	return protocol.WalletResponse{}, s.holds.takeAbandoned(remote, req)
}

// serveBundle answers a page of a batch's audit bundle, from receipt req.Offset on.
func (s *walletServer) serveBundle(_ context.Context, _ peer.ID, req protocol.WalletRequest) (protocol.WalletResponse, error) {
	b, more, err := s.bundles.BundlePage(req.Batch, req.Offset, WalletPageBytes)
	if err != nil {
		return protocol.WalletResponse{}, err
	}
	return protocol.WalletResponse{Bundle: b, More: more}, nil
}
