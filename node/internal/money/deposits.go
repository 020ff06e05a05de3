package money

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
)

// Deposits: a renter's USDC sent to the treasury on chain is credited to its account at
// this coordinator, once per transaction. docs/settlement.md, "The flow", step 2.

// deposits credits deposit transactions from the chain.
type deposits struct {
	ledger   Stores
	clock    clock.Clock
	log      *slog.Logger
	treasury *treasury
	guard    claimGuard
}

// A claim costs the coordinator's Solana RPC endpoint one to three calls, and a claim of a
// random signature costs as much as a real one: the per-peer and per-network limits of the
// wallet stream leave many addresses (an IPv6 /48) free to spend a metered or public
// endpoint's quota, after which deposits are not credited and payout runs fail (security
// review item 11). So the claims that reach the chain are capped for the whole
// coordinator, and a signature the chain does not know is not asked again for a while.
const (
	// claimsToChainPerMinute is the most claims a minute that reach the chain, from all
	// peers together.
	claimsToChainPerMinute = 60
	// unknownSignatureFor is how long a signature the chain did not know is answered
	// without asking again (a renter's node claims again a few seconds later: a deposit
	// sent a moment ago is found then).
	unknownSignatureFor = 10 * time.Second
	// maxUnknownSignatures bounds the signatures remembered as unknown.
	maxUnknownSignatures = 10_000
)

// claimGuard caps the claims that reach the chain and remembers unknown signatures.
type claimGuard struct {
	mu      sync.Mutex
	minute  time.Time // the start of the current minute's count
	count   int
	unknown map[string]time.Time // signature → until when it is answered unknown
}

// admit says whether a claim of sig may ask the chain at now, and if not, why.
func (g *claimGuard) admit(sig string, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if until, ok := g.unknown[sig]; ok && now.Before(until) {
		return fmt.Errorf("deposit %s is not finalized yet: the chain did not know it %s ago; try again in a few seconds", sig, unknownSignatureFor-until.Sub(now).Round(time.Second))
	}
	if now.Sub(g.minute) >= time.Minute {
		g.minute, g.count = now, 0
	}
	if g.count >= claimsToChainPerMinute {
		return fmt.Errorf("%w: the coordinator takes at most %d deposit claims a minute from everyone together: try again in a minute", api.ErrRateLimited, claimsToChainPerMinute)
	}
	g.count++
	return nil
}

// forget remembers sig as unknown to the chain until now + unknownSignatureFor.
func (g *claimGuard) forget(sig string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unknown == nil || len(g.unknown) >= maxUnknownSignatures {
		for k, until := range g.unknown {
			if !now.Before(until) {
				delete(g.unknown, k)
			}
		}
		if g.unknown == nil || len(g.unknown) >= maxUnknownSignatures {
			g.unknown = map[string]time.Time{}
		}
	}
	g.unknown[sig] = now.Add(unknownSignatureFor)
}

// claim credits a deposit transaction once: confirmed on the configured cluster,
// a TransferChecked of the USDC mint into the treasury's token account, with the memo
// naming the renter credited.
func (s *deposits) claim(ctx context.Context, signature string) (ledger.Deposit, bool, error) {
	if err := s.treasury.ready(); err != nil {
		return ledger.Deposit{}, false, err
	}
	sig, err := chain.ParseSignature(signature)
	if err != nil {
		return ledger.Deposit{}, false, fmt.Errorf("deposit signature %q: %w", signature, err)
	}
	if d, err := s.ledger.Escrow.GetDeposit(signature); err == nil {
		return d, false, nil // credited already: no RPC call
	}
	treasury, err := s.treasury.key()
	if err != nil {
		return ledger.Deposit{}, false, err
	}
	if err := s.guard.admit(signature, s.clock.Now()); err != nil {
		return ledger.Deposit{}, false, err
	}
	client, mint := s.treasury.client, s.treasury.mint
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if want := s.treasury.cluster; want != "" {
		if got, err := client.GenesisHash(ctx); err != nil || got != want {
			return ledger.Deposit{}, false, fmt.Errorf("%w: settlement.rpc answers cluster %q, expected %s (%v)", chain.ErrWrongCluster, got, want, err)
		}
	}
	st, err := client.Status(ctx, sig)
	if err != nil {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s: %w", signature, err)
	}
	// Money is credited on finalized transactions only: a confirmed one could still be
	// rolled back, and the credit with it spent.
	if !st.Found {
		s.guard.forget(signature, s.clock.Now())
	}
	if !st.Found || !st.Finalized {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s is not finalized yet: try again in a few seconds", signature)
	}
	tx, err := client.FinalizedTransaction(ctx, sig)
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
	into := chain.ATA(treasury.PublicKey(), mint)
	var amount uint64
	for _, t := range tx.Transfers {
		if t.Destination == into && t.Checked && t.Mint == mint && t.Decimals == protocol.USDCDecimals {
			amount += t.Amount
		}
	}
	if amount == 0 {
		return ledger.Deposit{}, false, fmt.Errorf("deposit %s moves no USDC (mint %s) into the treasury's account %s", signature, mint, into)
	}
	d := ledger.Deposit{Signature: signature, Renter: renter.String(), Amount: protocol.MicroUSDC(amount), CreditedAt: s.clock.Now()}
	credited, _, err := s.ledger.Escrow.CreditDeposit(d)
	if err == nil && credited {
		s.log.Info("deposit credited", "renter", renter, "usdc", d.Amount.String(), "signature", signature)
	}
	if !credited {
		if prev, err := s.ledger.Escrow.GetDeposit(signature); err == nil {
			d = prev
		}
	}
	return d, credited, err
}
