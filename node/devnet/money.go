package devnet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger/audit"
	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/ledger/solana/localnet"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// The devnet's money: a local Solana runtime with a test USDC mint, a funded treasury for
// the coordinator, a funded wallet for the renter, and a wallet per provider for payouts.
// After the demo job the renter's deposit has paid for it, the coordinator settles a payout
// batch and the auditor checks it (docs/settlement.md).

// devnetChain is the devnet's Solana side.
type devnetChain struct {
	rt     *localnet.Runtime
	c      *chain.Client
	faucet chain.PrivateKey // mint authority and airdrop payer of the test USDC
	mint   chain.PublicKey
	// nodeRPC is the RPC address the nodes are given, when not the runtime's own (the
	// soak's proxy).
	nodeRPC string
}

// devnetRenterUSDC is what the devnet mints into the renter's wallet; devnetDeposit what
// the renter deposits.
const (
	devnetRenterUSDC = 1_000 * protocol.MicroPerUSDC
	devnetDeposit    = "100"
)

func startDevnetChain(ctx context.Context, logw io.Writer) (*devnetChain, error) {
	rt, err := localnet.Start(ctx, logw)
	if err != nil {
		return nil, err
	}
	d := &devnetChain{rt: rt, c: chain.Dial(rt.URL)}
	if d.faucet, err = chain.NewKeypair(); err == nil {
		if err = d.c.Airdrop(ctx, d.faucet.PublicKey(), 1_000_000_000_000); err == nil {
			d.mint, err = d.c.CreateMint(ctx, d.faucet, protocol.USDCDecimals)
		}
	}
	if err != nil {
		rt.Stop()
		return nil, fmt.Errorf("set up the test USDC mint: %w", err)
	}
	return d, nil
}

// newWallet writes a fresh keypair into a home (replacing the last devnet's), funds it with
// SOL for fees and, when usdc > 0, test USDC, and returns its address.
func (d *devnetChain) newWallet(ctx context.Context, path string, usdc protocol.MicroUSDC) (chain.PrivateKey, error) {
	os.Remove(path)
	k, err := chain.NewKeypair()
	if err != nil {
		return nil, err
	}
	if err := chain.WriteKeypair(path, k); err != nil {
		return nil, err
	}
	if err := d.c.Airdrop(ctx, k.PublicKey(), 10_000_000_000); err != nil {
		return nil, err
	}
	if usdc > 0 {
		if err := d.c.MintTo(ctx, d.faucet, d.mint, k.PublicKey(), uint64(usdc)); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// configure sets a node's money settings before it starts: the coordinator's treasury, the
// renter's wallet, a provider's payout wallet.
func (d *devnetChain) configure(ctx context.Context, h config.Home) error {
	cfg, err := h.Config()
	if err != nil {
		return err
	}
	rpc := d.rt.URL
	if d.nodeRPC != "" {
		rpc = d.nodeRPC
	}
	cfg.Wallet.RPC = rpc
	switch cfg.Role {
	case config.RoleCoordinator:
		if _, err := d.newWallet(ctx, h.Path(cfg.Settlement.TreasuryKeypair), 0); err != nil {
			return err
		}
		cfg.Settlement.RPC, cfg.Settlement.Cluster, cfg.Settlement.Mint = rpc, d.rt.GenesisHash, d.mint.String()
		// Devnet jobs cost fractions of a cent: pay whatever is pending, and publish the
		// market statistics every 10 s.
		cfg.Settlement.MinPayoutUSDC = "0.000001"
		cfg.Settlement.MarketInterval = config.Duration{Duration: 10 * time.Second}
	case config.RoleRenter:
		if _, err := d.newWallet(ctx, h.Path(cfg.Wallet.Keypair), devnetRenterUSDC); err != nil {
			return err
		}
	case config.RoleProvider:
		k, err := d.newWallet(ctx, h.Path(cfg.Wallet.Keypair), 0)
		if err != nil {
			return err
		}
		cfg.Payout = config.PayoutConfig{Method: protocol.PayoutUSDC, Schedule: protocol.PayoutWeekly, SolanaAddress: k.PublicKey().String()}
	}
	return h.WriteConfig(cfg)
}

// devnetDepositFunds has the renter deposit USDC so that its jobs get escrow holds.
func devnetDepositFunds(ctx context.Context, renter *api.Client, say func(string, ...any)) error {
	v, err := renter.Deposit(ctx, devnetDeposit, "")
	if err != nil {
		return fmt.Errorf("the renter's deposit failed: %w", err)
	}
	say("the renter deposited %s USDC to the coordinator's treasury (transaction %s); available %s USDC",
		v.AmountUSDC, v.Signature, v.Balance.AvailableUSDC)
	return nil
}

// devnetSettle waits for the demo job's charge, runs a payout batch, audits it, and audits
// an altered copy, which must fail. It writes both bundles into dir for the user to audit.
func devnetSettle(ctx context.Context, coord, renter *api.Client, rpc string, dir string, say func(string, ...any)) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := renter.Balance(ctx, "")
		if err == nil && b.Held == 0 && len(b.Holds) > 0 && b.Holds[0].State == "charged" {
			say("the job was charged %s USDC from its escrow hold; the renter has %s USDC available", b.ChargedUSDC, b.AvailableUSDC)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the demo job was not charged within 60 s: %+v %v", b, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	v, err := coord.RunPayouts(ctx, api.PayoutRunOptions{Now: true})
	if err != nil {
		return fmt.Errorf("the payout batch failed: %w", err)
	}
	for _, p := range v.Payouts {
		say("batch_id %s %s: %s USDC to %s (its wallet %s), transaction %s", v.BatchID, v.State, p.AmountUSDC, p.Provider, p.Destination, p.Transaction)
	}
	st, err := coord.Status(ctx)
	if err != nil {
		return err
	}
	coordID, _ := peer.Decode(st.PeerID)
	bv, err := renter.Bundle(ctx, v.BatchID)
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "payout-"+v.BatchID+".json")
	if err := writeJSONFile(file, bv.Bundle); err != nil {
		return err
	}
	rep := audit.Batch(ctx, *bv.Bundle, audit.Options{RPC: rpc, Trust: []peer.ID{coordID}, Known: bv.Known})
	if !rep.OK {
		return fmt.Errorf("the auditor refused the devnet's own batch: %v", rep.Discrepancies)
	}
	say("the auditor recomputed %d receipts and checked %d transactions on chain: OK", rep.Receipts, rep.Transactions)
	// An altered copy: one payout raised by a micro-USDC.
	altered := *bv.Bundle
	sb, err := protocol.CheckBatch(altered.Batch, nil)
	if err != nil || len(sb.Payouts) == 0 {
		return fmt.Errorf("batch record: %v", err)
	}
	from := fmt.Sprintf(`"amount_micro_usdc":%d`, sb.Payouts[0].Amount)
	altered.Batch = bytes.Replace(altered.Batch, []byte(from), []byte(fmt.Sprintf(`"amount_micro_usdc":%d`, sb.Payouts[0].Amount+1)), 1)
	alteredFile := filepath.Join(dir, "payout-"+v.BatchID+"-altered.json")
	if err := writeJSONFile(alteredFile, altered); err != nil {
		return err
	}
	if bad := audit.Batch(ctx, altered, audit.Options{RPC: rpc, Trust: []peer.ID{coordID}}); bad.OK {
		return fmt.Errorf("an altered batch passed the audit")
	} else {
		say("an altered copy of the batch fails the audit: %s", bad.Discrepancies[0])
	}
	say("audit it yourself: gpunex audit payouts --batch %s --rpc %s --coordinator %s", file, rpc, coordID)
	return nil
}
