package money

import (
	"context"
	"crypto/sha512"
	"errors"
	"strings"
	"testing"
	"time"

	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Deposits credited from the chain (docs/settlement.md, "The flow", step 2).

// onChain puts a finalized deposit transaction on the fake chain and returns its
// signature.
func (c *coordinator) onChain(name string, tx chain.TxFacts) string {
	sig := chain.Signature(sha512.Sum512([]byte(name)))
	tx.Signature = sig
	c.chain.finalized[sig] = &tx
	return sig.String()
}

// usdcInto is a TransferChecked of amount USDC into the treasury's token account.
func (c *coordinator) usdcInto(amount uint64) chain.TokenTransfer {
	return chain.TokenTransfer{Destination: chain.ATA(c.treasury.PublicKey(), c.chain.mint), Mint: c.chain.mint,
		Amount: amount, Decimals: protocol.USDCDecimals, Checked: true}
}

// TestDepositCredited: a finalized USDC transfer into the treasury's account, whose memo
// names a renter, credits that renter once, whoever claims it.
func TestDepositCredited(t *testing.T) {
	c := newCoordinator(t)
	renter, claimer := newParty(), newParty()
	sig := c.onChain("deposit", chain.TxFacts{Memos: []string{protocol.DepositMemo(renter.id)},
		Transfers: []chain.TokenTransfer{c.usdcInto(30_000_000), c.usdcInto(20_000_000)}})
	resp, err := c.Serve(context.Background(), claimer.id, protocol.WalletRequest{Op: "claim", Signature: sig})
	if err != nil || !resp.Credited || resp.Deposit.Renter != renter.id.String() || resp.Deposit.Amount != 50_000_000 || resp.Account.Available != 50_000_000 {
		t.Fatalf("claim: %+v %v", resp, err)
	}
	again, err := c.Serve(context.Background(), renter.id, protocol.WalletRequest{Op: "claim", Signature: sig})
	if err != nil || again.Credited || again.Account.Available != 50_000_000 || again.Deposit.Amount != 50_000_000 {
		t.Fatalf("claimed again: %+v %v", again, err)
	}
	if a := c.account(t, claimer); a.Available != 0 {
		t.Fatalf("the claimer was credited %d", a.Available)
	}
	bal, err := c.Serve(context.Background(), renter.id, protocol.WalletRequest{Op: "balance"})
	if err != nil || bal.Account.Deposited != 50_000_000 || len(bal.Deposits) != 1 || bal.Deposits[0].Signature != sig {
		t.Fatalf("balance: %+v %v", bal, err)
	}
}

// TestDepositRefused: nothing is credited from a transaction not finalized yet, failed on
// chain, without the memo, moving no USDC of the mint into the treasury's account, or read
// from another cluster; each refusal says why.
func TestDepositRefused(t *testing.T) {
	c := newCoordinator(t)
	renter := newParty()
	memo := []string{protocol.DepositMemo(renter.id)}
	plain := c.usdcInto(1_000_000)
	plain.Checked = false
	otherMint := c.usdcInto(1_000_000)
	otherMint.Mint = c.treasury.PublicKey()
	elsewhere := c.usdcInto(1_000_000)
	elsewhere.Destination = c.treasury.PublicKey()
	notFinal := c.onChain("confirmed", chain.TxFacts{Memos: memo, Transfers: []chain.TokenTransfer{c.usdcInto(1_000_000)}})
	sigNotFinal, _ := chain.ParseSignature(notFinal)
	c.chain.confirmedOnly[sigNotFinal] = true

	for name, tc := range map[string]struct {
		sig, want string
	}{
		"not finalized":  {notFinal, "is not finalized yet: try again"},
		"unknown":        {chain.Signature{7}.String(), "is not finalized yet"},
		"failed":         {c.onChain("failed", chain.TxFacts{Failed: "InsufficientFunds", Memos: memo, Transfers: []chain.TokenTransfer{c.usdcInto(1)}}), "failed on chain: InsufficientFunds"},
		"no memo":        {c.onChain("no memo", chain.TxFacts{Transfers: []chain.TokenTransfer{c.usdcInto(1_000_000)}}), `carries no memo "gpunex deposit <peer ID>"`},
		"bad memo":       {c.onChain("bad memo", chain.TxFacts{Memos: []string{"gpunex deposit bob"}, Transfers: []chain.TokenTransfer{c.usdcInto(1)}}), "does not name a peer ID"},
		"plain transfer": {c.onChain("plain", chain.TxFacts{Memos: memo, Transfers: []chain.TokenTransfer{plain}}), "moves no USDC"},
		"other mint":     {c.onChain("mint", chain.TxFacts{Memos: memo, Transfers: []chain.TokenTransfer{otherMint}}), "moves no USDC"},
		"elsewhere":      {c.onChain("elsewhere", chain.TxFacts{Memos: memo, Transfers: []chain.TokenTransfer{elsewhere}}), "moves no USDC"},
		"not base58":     {"0OIl", `deposit signature "0OIl"`},
	} {
		_, err := c.Serve(context.Background(), renter.id, protocol.WalletRequest{Op: "claim", Signature: tc.sig})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	good := c.onChain("good", chain.TxFacts{Memos: memo, Transfers: []chain.TokenTransfer{c.usdcInto(1_000_000)}})
	c.chain.genesis = "AnotherCluster1111111111111111111111111111111"
	if _, err := c.Serve(context.Background(), renter.id, protocol.WalletRequest{Op: "claim", Signature: good}); !errors.Is(err, chain.ErrWrongCluster) {
		t.Fatalf("another cluster: %v", err)
	}
	if a := c.account(t, renter); a.Deposited != 0 {
		t.Fatalf("refused deposits credited %d", a.Deposited)
	}
}

// TestClaimFloodBounded: a flood of claims of random signatures from many peers reaches
// the chain at most claimsToChainPerMinute times a minute, the same unknown signature is
// not asked again for unknownSignatureFor (security review item 11), and a real deposit
// claimed once the minute has passed is credited.
func TestClaimFloodBounded(t *testing.T) {
	c := newCoordinator(t)
	ctx := context.Background()
	statuses := func() int {
		c.chain.mu.Lock()
		defer c.chain.mu.Unlock()
		return c.chain.statuses
	}
	limited := 0
	for i := 0; i < 500; i++ {
		sig := chain.Signature(sha512.Sum512([]byte{byte(i), byte(i >> 8)})).String()
		if _, err := c.Serve(ctx, newParty().id, protocol.WalletRequest{Op: "claim", Signature: sig}); errors.Is(err, api.ErrRateLimited) {
			limited++
		}
	}
	if n := statuses(); n > claimsToChainPerMinute {
		t.Fatalf("500 claims of unknown signatures asked the chain %d times in a minute; at most %d", n, claimsToChainPerMinute)
	}
	if limited != 500-claimsToChainPerMinute {
		t.Fatalf("%d claims refused for the coordinator's cap, want %d", limited, 500-claimsToChainPerMinute)
	}
	c.clock.Advance(time.Minute)
	unknown := chain.Signature{9}.String()
	for i := 0; i < 5; i++ {
		c.Serve(ctx, newParty().id, protocol.WalletRequest{Op: "claim", Signature: unknown})
	}
	if n := statuses(); n != claimsToChainPerMinute+1 {
		t.Fatalf("one unknown signature claimed 5 times asked the chain %d times", n-claimsToChainPerMinute)
	}
	renter := newParty()
	sig := c.onChain("after the flood", chain.TxFacts{Memos: []string{protocol.DepositMemo(renter.id)}, Transfers: []chain.TokenTransfer{c.usdcInto(5_000_000)}})
	if resp, err := c.Serve(ctx, renter.id, protocol.WalletRequest{Op: "claim", Signature: sig}); err != nil || !resp.Credited {
		t.Fatalf("a real deposit after the flood: %+v %v", resp, err)
	}
}
