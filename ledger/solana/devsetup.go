package solana

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	sol "github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"
)

// Development and test setup. These use standard RPC only, so they work against the local
// runtime, solana-test-validator and devnet alike.

// mintSize is the size of an SPL Token mint account.
const mintSize = 82

// Airdrop requests lamports for to (test clusters only) and waits until confirmed.
func (c *Client) Airdrop(ctx context.Context, to sol.PublicKey, lamports uint64) error {
	sig, err := c.rpc.RequestAirdrop(ctx, to, lamports, commitment)
	if err != nil {
		return fmt.Errorf("requestAirdrop: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := c.WaitConfirmed(ctx, sig, 0)
	if err != nil {
		return fmt.Errorf("airdrop: %w", err)
	}
	if st.Err != "" {
		return fmt.Errorf("airdrop %s failed: %s", sig, st.Err)
	}
	return nil
}

// sendAndConfirm builds a transaction of ixs paid by signers[0], signs, sends and waits.
func (c *Client) sendAndConfirm(ctx context.Context, what string, ixs []sol.Instruction, signers ...sol.PrivateKey) (sol.Signature, error) {
	bh, lastValid, err := c.LatestBlockhash(ctx)
	if err != nil {
		return sol.Signature{}, fmt.Errorf("%s: %w", what, err)
	}
	tx, err := sol.NewTransaction(ixs, bh, sol.TransactionPayer(signers[0].PublicKey()))
	if err != nil {
		return sol.Signature{}, fmt.Errorf("%s: %w", what, err)
	}
	raw, sig, err := signWith(tx, signers...)
	if err != nil {
		return sol.Signature{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := c.Send(ctx, raw); err != nil {
		return sig, fmt.Errorf("%s: %w", what, err)
	}
	st, err := c.WaitConfirmed(ctx, sig, lastValid)
	if err != nil {
		return sig, fmt.Errorf("%s: %w", what, err)
	}
	if st.Err != "" {
		return sig, fmt.Errorf("%s: transaction %s failed: %s", what, sig, st.Err)
	}
	return sig, nil
}

// CreateMint creates a new SPL Token mint (a fresh random address) with payer as the mint
// authority and no freeze authority, and waits until confirmed.
func (c *Client) CreateMint(ctx context.Context, payer sol.PrivateKey, decimals uint8) (sol.PublicKey, error) {
	return c.createMint(ctx, payer, decimals, sol.TokenProgramID)
}

// createMint creates a mint owned by a token program (the classic one, or Token-2022 in
// tests).
func (c *Client) createMint(ctx context.Context, payer sol.PrivateKey, decimals uint8, program sol.PublicKey) (sol.PublicKey, error) {
	mintKey, err := NewKeypair()
	if err != nil {
		return sol.PublicKey{}, err
	}
	mint := mintKey.PublicKey()
	rent, err := c.rpc.GetMinimumBalanceForRentExemption(ctx, mintSize, commitment)
	if err != nil {
		return sol.PublicKey{}, fmt.Errorf("create mint: getMinimumBalanceForRentExemption: %w", err)
	}
	create := system.NewCreateAccountInstruction(rent, mintSize, program, payer.PublicKey(), mint).Build()
	// InitializeMint2: [20, decimals, mint authority, freeze authority option (none)].
	data := make([]byte, 0, 35)
	data = append(data, 20, decimals)
	auth := payer.PublicKey()
	data = append(data, auth[:]...)
	data = append(data, 0)
	init := sol.NewInstruction(program, sol.AccountMetaSlice{sol.NewAccountMeta(mint, true, false)}, data)
	if _, err := c.sendAndConfirm(ctx, "create mint", []sol.Instruction{create, init}, payer, mintKey); err != nil {
		return sol.PublicKey{}, err
	}
	return mint, nil
}

// CreateATA creates owner's associated token account for mint (payer pays the rent) unless
// it exists, and waits until confirmed.
func (c *Client) CreateATA(ctx context.Context, payer sol.PrivateKey, owner, mint sol.PublicKey) error {
	ix := createATAIdempotent(payer.PublicKey(), ATA(owner, mint), owner, mint)
	_, err := c.sendAndConfirm(ctx, "create token account", []sol.Instruction{ix}, payer)
	return err
}

// MintTo mints amount base units to owner's associated token account, creating it first
// (idempotently, authority pays), and waits until confirmed. authority is the mint
// authority and pays the fee.
func (c *Client) MintTo(ctx context.Context, authority sol.PrivateKey, mint, owner sol.PublicKey, amount uint64) error {
	ata := ATA(owner, mint)
	data := make([]byte, 9)
	data[0] = 7 // MintTo
	binary.LittleEndian.PutUint64(data[1:], amount)
	ixs := []sol.Instruction{
		createATAIdempotent(authority.PublicKey(), ata, owner, mint),
		sol.NewInstruction(sol.TokenProgramID, sol.AccountMetaSlice{
			sol.NewAccountMeta(mint, true, false),
			sol.NewAccountMeta(ata, true, false),
			sol.NewAccountMeta(authority.PublicKey(), false, true),
		}, data),
	}
	_, err := c.sendAndConfirm(ctx, "mint", ixs, authority)
	return err
}

// CloseTokenAccount closes owner's empty associated token account for mint, the rent going
// back to owner, who signs and pays the fee (tests: a provider closing its account).
func (c *Client) CloseTokenAccount(ctx context.Context, owner sol.PrivateKey, mint sol.PublicKey) error {
	ix := sol.NewInstruction(sol.TokenProgramID, sol.AccountMetaSlice{
		sol.NewAccountMeta(ATA(owner.PublicKey(), mint), true, false),
		sol.NewAccountMeta(owner.PublicKey(), true, false),
		sol.NewAccountMeta(owner.PublicKey(), false, true),
	}, []byte{9}) // CloseAccount
	_, err := c.sendAndConfirm(ctx, "close token account", []sol.Instruction{ix}, owner)
	return err
}
