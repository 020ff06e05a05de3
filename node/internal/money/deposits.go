package money

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	chain "github.com/gpunex/gpunex/ledger/solana"
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
	// gate keeps floods of claims from spending the RPC quota.
	gate *claimGate
}

// ErrClaimsBusy is the answer to a deposit claim once the coordinator's budget of claims
// that reach the Solana RPC is spent for the minute.
var ErrClaimsBusy = errors.New("this coordinator checks no more deposits on chain this minute: try again in a minute")

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
	notFinalized := fmt.Errorf("deposit %s is not finalized yet: try again in a few seconds", signature)
	now := s.clock.Now()
	if s.gate.knownUnknown(signature, now) {
		return ledger.Deposit{}, false, notFinalized
	}
	if !s.gate.take(now) {
		return ledger.Deposit{}, false, ErrClaimsBusy
	}
	treasury, err := s.treasury.key()
	if err != nil {
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
		s.gate.noteUnknown(signature, now)
	}
	if !st.Found || !st.Finalized {
		return ledger.Deposit{}, false, notFinalized
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
