package solana

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	sol "github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// TxFacts is what the node needs to know of a landed transaction, decoded from the
// transaction's own instructions (not from logs).
type TxFacts struct {
	Signature   sol.Signature
	Slot        uint64
	BlockTime   time.Time // zero when the cluster does not report it
	Failed      string    // the on-chain error (JSON of the TransactionError), "" if it succeeded
	FeeLamports uint64
	Signers     []sol.PublicKey
	Memos       []string        // data of Memo program instructions (v1 and v2), as text
	Transfers   []TokenTransfer // top-level Transfer and TransferChecked instructions
}

// TokenTransfer is one top-level Transfer or TransferChecked instruction of the SPL Token
// or Token-2022 program. For Transfer, Mint is zero, Decimals 0 and Checked false.
type TokenTransfer struct {
	Program     sol.PublicKey
	Source      sol.PublicKey // token account
	Destination sol.PublicKey // token account
	Authority   sol.PublicKey
	Mint        sol.PublicKey
	Amount      uint64
	Decimals    uint8
	Checked     bool
}

// Transaction fetches a confirmed transaction. The error wraps ErrNotFound when the
// cluster does not know it.
func (c *Client) Transaction(ctx context.Context, sig sol.Signature) (*TxFacts, error) {
	return c.transaction(ctx, sig, commitment)
}

// FinalizedTransaction fetches a finalized transaction: one that cannot be rolled back. The
// error wraps ErrNotFound when the cluster does not know it or has not finalized it yet.
func (c *Client) FinalizedTransaction(ctx context.Context, sig sol.Signature) (*TxFacts, error) {
	return c.transaction(ctx, sig, rpc.CommitmentFinalized)
}

func (c *Client) transaction(ctx context.Context, sig sol.Signature, at rpc.CommitmentType) (*TxFacts, error) {
	version := uint64(0)
	res, err := c.rpc.GetTransaction(ctx, sig, &rpc.GetTransactionOpts{
		Encoding:                       sol.EncodingBase64,
		Commitment:                     at,
		MaxSupportedTransactionVersion: &version,
	})
	if errors.Is(err, rpc.ErrNotFound) {
		return nil, fmt.Errorf("transaction %s: %w", sig, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("getTransaction %s: %w", sig, err)
	}
	if res.Transaction == nil {
		return nil, fmt.Errorf("transaction %s: %w", sig, ErrNotFound)
	}
	tx, err := res.Transaction.GetTransaction()
	if err != nil {
		return nil, fmt.Errorf("transaction %s: decoding: %w", sig, err)
	}
	var loaded rpc.LoadedAddresses
	f := &TxFacts{Signature: sig, Slot: res.Slot}
	if res.BlockTime != nil {
		f.BlockTime = res.BlockTime.Time()
	}
	if res.Meta != nil {
		f.FeeLamports = res.Meta.Fee
		if res.Meta.Err != nil {
			f.Failed = errText(res.Meta.Err)
		}
		loaded = res.Meta.LoadedAddresses
	}
	decodeFacts(f, tx, loaded)
	return f, nil
}

// decodeFacts fills Signers, Memos and Transfers from the transaction's message. loaded
// holds the addresses a v0 message loaded from lookup tables (writable, then read-only).
func decodeFacts(f *TxFacts, tx *sol.Transaction, loaded rpc.LoadedAddresses) {
	m := &tx.Message
	keys := make([]sol.PublicKey, 0, len(m.AccountKeys)+len(loaded.Writable)+len(loaded.ReadOnly))
	keys = append(keys, m.AccountKeys...)
	keys = append(keys, loaded.Writable...)
	keys = append(keys, loaded.ReadOnly...)
	key := func(i uint16) (sol.PublicKey, bool) {
		if int(i) >= len(keys) {
			return sol.PublicKey{}, false
		}
		return keys[i], true
	}
	for i := 0; i < int(m.Header.NumRequiredSignatures) && i < len(m.AccountKeys); i++ {
		f.Signers = append(f.Signers, m.AccountKeys[i])
	}
	for _, ix := range m.Instructions {
		prog, ok := key(ix.ProgramIDIndex)
		if !ok {
			continue
		}
		data := []byte(ix.Data)
		switch {
		case prog.Equals(MemoV1ProgramID) || prog.Equals(MemoV2ProgramID):
			f.Memos = append(f.Memos, string(data))
		case isTokenProgram(prog):
			if t, ok := decodeTransfer(prog, ix.Accounts, data, key); ok {
				f.Transfers = append(f.Transfers, t)
			}
		}
	}
}

func decodeTransfer(prog sol.PublicKey, accounts []uint16, data []byte, key func(uint16) (sol.PublicKey, bool)) (TokenTransfer, bool) {
	acct := func(i int) (sol.PublicKey, bool) {
		if i >= len(accounts) {
			return sol.PublicKey{}, false
		}
		return key(accounts[i])
	}
	if len(data) == 0 {
		return TokenTransfer{}, false
	}
	t := TokenTransfer{Program: prog}
	var ok1, ok2, ok3, ok4 bool
	switch {
	case data[0] == 3 && len(data) == 9: // Transfer: source, destination, authority
		t.Amount = binary.LittleEndian.Uint64(data[1:9])
		t.Source, ok1 = acct(0)
		t.Destination, ok2 = acct(1)
		t.Authority, ok3 = acct(2)
		ok4 = true
	case data[0] == 12 && len(data) == 10: // TransferChecked: source, mint, destination, authority
		t.Amount = binary.LittleEndian.Uint64(data[1:9])
		t.Decimals = data[9]
		t.Checked = true
		t.Source, ok1 = acct(0)
		t.Mint, ok2 = acct(1)
		t.Destination, ok3 = acct(2)
		t.Authority, ok4 = acct(3)
	default:
		return TokenTransfer{}, false
	}
	return t, ok1 && ok2 && ok3 && ok4
}
