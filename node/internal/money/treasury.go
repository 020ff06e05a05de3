package money

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	chain "github.com/gpunex/gpunex/ledger/solana"
)

// The coordinator's treasury: the Solana chain it settles on (RPC client, USDC mint,
// cluster) and its keypair, shared by the deposits it credits and the payouts it sends.

// PayoutChain is what the payout state machine asks of the chain (a *solana.Client; a fake
// in the tests). docs/settlement.md, "Payout state machine".
type PayoutChain interface {
	// IsTokenAccount says whether addr is a token account of mint.
	IsTokenAccount(ctx context.Context, addr, mint chain.PublicKey) (bool, error)
	// LatestBlockhashAt returns a fresh blockhash, the last block height at which a
	// transaction using it can land, and the slot it was read at.
	LatestBlockhashAt(ctx context.Context) (hash chain.Hash, lastValid, slot uint64, err error)
	BlockHeight(ctx context.Context) (uint64, error)
	// FirstAvailableSlot is the oldest slot the RPC node still knows.
	FirstAvailableSlot(ctx context.Context) (uint64, error)
	// Status searches the whole history for a transaction.
	Status(ctx context.Context, sig chain.Signature) (chain.TxStatus, error)
	// Send broadcasts signed bytes; an error does not prove they did not land.
	Send(ctx context.Context, raw []byte) error
	// WaitConfirmed waits for a transaction's confirmation, or chain.ErrExpired.
	WaitConfirmed(ctx context.Context, sig chain.Signature, lastValid uint64) (chain.TxStatus, error)
	// Transaction reads a landed transaction (its fee).
	Transaction(ctx context.Context, sig chain.Signature) (*chain.TxFacts, error)
}

// ChainClient is every call the settlement makes to the chain (a *solana.Client): the
// payout state machine's, the pre-send check, the deposit reads and the treasury's token
// account.
type ChainClient interface {
	PayoutChain
	GenesisHash(ctx context.Context) (string, error)
	// Check verifies cluster, mint and the treasury's funds before a batch is stored.
	Check(ctx context.Context, s chain.Setup) error
	FinalizedTransaction(ctx context.Context, sig chain.Signature) (*chain.TxFacts, error)
	AccountExists(ctx context.Context, pk chain.PublicKey) (bool, error)
	CreateATA(ctx context.Context, payer chain.PrivateKey, owner, mint chain.PublicKey) error
}

var _ ChainClient = (*chain.Client)(nil)

// treasury is the chain a coordinator settles on and the keypair it pays from. Chain and
// UseChain (tests) replace client, mint and cluster between payout runs.
type treasury struct {
	client  ChainClient // nil when settlement.rpc is not set
	mint    chain.PublicKey
	cluster string // settlement.cluster: the genesis hash expected ("": none checked)
	rpc     string // settlement.rpc, named in errors and explorer links
	keypair string // the treasury keypair file, resolved against the home folder
}

// keyPath resolves a key file setting against the home folder.
func keyPath(home, p string) string {
	if p == "" || filepath.IsAbs(p) || home == "" {
		return p
	}
	return filepath.Join(home, p)
}

// key loads the treasury keypair (mode 0600 enforced, never logged).
func (t *treasury) key() (chain.PrivateKey, error) {
	k, err := chain.LoadKeypair(t.keypair)
	if err != nil {
		return nil, fmt.Errorf("settlement.treasury_keypair: %w", err)
	}
	return k, nil
}

// ready says why USDC settlement cannot run, or nil.
func (t *treasury) ready() error {
	switch {
	case t.client == nil:
		return errors.New("settlement.rpc is not set in the coordinator's config")
	case t.mint.IsZero():
		return errors.New("settlement.mint is not set in the coordinator's config")
	}
	return nil
}

// ensureAccount creates the treasury's USDC token account when it is missing: deposits
// are sent to it.
func (t *treasury) ensureAccount(ctx context.Context, log *slog.Logger) {
	if t.ready() != nil {
		return
	}
	k, err := t.key()
	if err != nil {
		log.Warn("treasury keypair not loaded: deposits and USDC payouts are off", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if ok, err := t.client.AccountExists(ctx, chain.ATA(k.PublicKey(), t.mint)); err == nil && !ok {
		if err := t.client.CreateATA(ctx, k, k.PublicKey(), t.mint); err != nil {
			log.Warn("treasury token account not created", "err", err)
		}
	}
}
