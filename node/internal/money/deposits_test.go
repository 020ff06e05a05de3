package money

import (
	"context"
	"crypto/sha512"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	chain "github.com/gpunex/gpunex/ledger/solana"
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

// TestClaimFloodBounded: a flood of claims of random signatures from many peers costs the
// coordinator's Solana RPC a bounded number of calls a minute (one budget for the whole
// coordinator; a signature just found unknown is answered from memory), and a real
// deposit claimed after the flood is still credited.
func TestClaimFloodBounded(t *testing.T) {
	c := newCoordinator(t)
	claim := func(from party, sig string) (protocol.WalletResponse, error) {
		return c.Serve(context.Background(), from.id, protocol.WalletRequest{Op: "claim", Signature: sig})
	}
	// The same unknown signature twice: the second is answered without the RPC.
	unknown := chain.Signature{9}.String()
	if _, err := claim(newParty(), unknown); err == nil || !strings.Contains(err.Error(), "not finalized yet") {
		t.Fatalf("an unknown signature: %v", err)
	}
	reads := c.chain.depositReads
	if _, err := claim(newParty(), unknown); err == nil || !strings.Contains(err.Error(), "not finalized yet") || c.chain.depositReads != reads {
		t.Fatalf("the unknown signature again: %v, %d RPC calls", err, c.chain.depositReads-reads)
	}
	// 200 peers, 20 fresh signatures each.
	busy := 0
	for p := range 200 {
		from := newParty()
		for i := range 20 {
			sig := chain.Signature(sha512.Sum512([]byte(fmt.Sprint("flood ", p, " ", i)))).String()
			if _, err := claim(from, sig); errors.Is(err, ErrClaimsBusy) {
				busy++
			} else if err == nil {
				t.Fatal("a random signature credited")
			}
		}
	}
	if c.chain.depositReads > 3*claimRPCBurst {
		t.Fatalf("4000 claims in a minute cost %d RPC calls, over %d", c.chain.depositReads, 3*claimRPCBurst)
	}
	if busy < 4000-claimRPCBurst {
		t.Fatalf("only %d claims of 4000 were refused", busy)
	}
	renter := newParty()
	sig := c.onChain("after the flood", chain.TxFacts{Memos: []string{protocol.DepositMemo(renter.id)}, Transfers: []chain.TokenTransfer{c.usdcInto(5_000_000)}})
	if _, err := claim(renter, sig); !errors.Is(err, ErrClaimsBusy) || !strings.Contains(err.Error(), "try again in a minute") {
		t.Fatalf("a real claim during the flood: %v", err)
	}
	c.clock.Advance(time.Minute)
	resp, err := claim(renter, sig)
	if err != nil || !resp.Credited || resp.Account.Available != 5_000_000 {
		t.Fatalf("the real deposit a minute later: %+v %v", resp, err)
	}
}
