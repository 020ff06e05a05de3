// Package solana is the node's Solana chain client: keys, reads (balances, mints,
// transactions), building and sending signed payout and deposit transactions, and
// confirmation. It speaks only standard Solana JSON-RPC, so the same code runs against the
// local runtime (ledger/solana/localnet), solana-test-validator, devnet or mainnet.
package solana

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	sol "github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"
)

// Errors. Functions wrap them with details; test with errors.Is.
var (
	ErrWrongCluster = errors.New("wrong Solana cluster")
	ErrWrongMint    = errors.New("not the expected SPL token mint")
	ErrUnderfunded  = errors.New("treasury underfunded")
	ErrSendFailed   = errors.New("sending the transaction failed")
	ErrNotFound     = errors.New("not found")
	ErrExpired      = errors.New("transaction expired: its blockhash is no longer valid and it did not land")
	ErrTooLarge     = errors.New("transaction too large")
)

// Memo program ids: v1 (legacy) and v2 (current).
var (
	MemoV1ProgramID = sol.MustPublicKeyFromBase58("Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo")
	MemoV2ProgramID = sol.MemoProgramID
)

// commitment used for every read: confirmed (optimistic confirmation by a supermajority).
const commitment = rpc.CommitmentConfirmed

// pollEvery is how often WaitConfirmed polls.
const pollEvery = 100 * time.Millisecond

// Client is a Solana JSON-RPC client. It is safe for concurrent use.
type Client struct {
	rpc *rpc.Client
	url string
}

// Dial returns a client for the JSON-RPC endpoint rpcURL (no request is made).
func Dial(rpcURL string) *Client {
	return DialHTTP(rpcURL, &http.Client{Timeout: 30 * time.Second})
}

// DialHTTP is Dial with the given HTTP client (tests inject failures through its
// Transport).
func DialHTTP(rpcURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	rc := jsonrpc.NewClientWithOpts(rpcURL, &jsonrpc.RPCClientOpts{HTTPClient: hc})
	return &Client{rpc: rpc.NewWithCustomRPCClient(rc), url: rpcURL}
}

// URL returns the RPC endpoint.
func (c *Client) URL() string { return c.url }

// RPC returns the underlying solana-go client, for calls this package does not wrap.
func (c *Client) RPC() *rpc.Client { return c.rpc }

// GenesisHash returns the cluster's genesis hash (base58), which names the cluster.
func (c *Client) GenesisHash(ctx context.Context) (string, error) {
	h, err := c.rpc.GetGenesisHash(ctx)
	if err != nil {
		return "", fmt.Errorf("getGenesisHash: %w", err)
	}
	return h.String(), nil
}

// account reads an account in base64; nil (and no error) when it does not exist.
func (c *Client) account(ctx context.Context, pk sol.PublicKey) (*rpc.Account, error) {
	res, err := c.rpc.GetAccountInfoWithOpts(ctx, pk, &rpc.GetAccountInfoOpts{Encoding: sol.EncodingBase64, Commitment: commitment})
	if errors.Is(err, rpc.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getAccountInfo %s: %w", pk, err)
	}
	if res == nil || res.Value == nil {
		return nil, nil
	}
	return res.Value, nil
}

func isTokenProgram(pk sol.PublicKey) bool {
	return pk.Equals(sol.TokenProgramID) || pk.Equals(sol.Token2022ProgramID)
}

// mintLayout checks SPL mint data (82 bytes, or longer with Token-2022 extensions and the
// account type byte 1 at offset 165) and returns its decimals.
func mintLayout(data []byte) (uint8, bool) {
	if len(data) < 82 {
		return 0, false
	}
	if len(data) > 82 && !(len(data) > 165 && data[165] == 1) {
		return 0, false
	}
	if data[45] != 1 { // is_initialized
		return 0, false
	}
	return data[44], true
}

// MintDecimals returns the decimals of an SPL Token or Token-2022 mint. The error wraps
// ErrWrongMint when the account does not exist or is not an initialized mint.
func (c *Client) MintDecimals(ctx context.Context, mint sol.PublicKey) (uint8, error) {
	a, err := c.account(ctx, mint)
	if err != nil {
		return 0, err
	}
	if a == nil {
		return 0, fmt.Errorf("%w: account %s does not exist", ErrWrongMint, mint)
	}
	if a.Owner.Equals(sol.Token2022ProgramID) {
		return 0, fmt.Errorf("%w: %s is a Token-2022 mint: gpunex moves USDC with the classic SPL Token program only", ErrWrongMint, mint)
	}
	if !isTokenProgram(a.Owner) {
		return 0, fmt.Errorf("%w: account %s is owned by %s, not an SPL token program", ErrWrongMint, mint, a.Owner)
	}
	d, ok := mintLayout(a.Data.GetBinary())
	if !ok {
		return 0, fmt.Errorf("%w: account %s is not an initialized mint", ErrWrongMint, mint)
	}
	return d, nil
}

// Setup is what the node expects of the chain before it settles.
type Setup struct {
	GenesisHash  string // expected genesis hash; "" skips the check
	Mint         sol.PublicKey
	Decimals     uint8 // expected mint decimals (6 for USDC)
	Treasury     sol.PublicKey
	NeedMicro    uint64 // token base units the treasury must hold (in its associated token account)
	NeedLamports uint64 // lamports the treasury must hold (fees, rent for new token accounts)
}

// Check verifies the cluster, the mint and the treasury's funds. Errors wrap
// ErrWrongCluster, ErrWrongMint or ErrUnderfunded, or are RPC failures.
func (c *Client) Check(ctx context.Context, s Setup) error {
	if s.GenesisHash != "" {
		got, err := c.GenesisHash(ctx)
		if err != nil {
			return err
		}
		if got != s.GenesisHash {
			return fmt.Errorf("%w: expected genesis hash %s, got %s from %s", ErrWrongCluster, s.GenesisHash, got, c.url)
		}
	}
	d, err := c.MintDecimals(ctx, s.Mint)
	if err != nil {
		return err
	}
	if d != s.Decimals {
		return fmt.Errorf("%w: mint %s has %d decimals, expected %d", ErrWrongMint, s.Mint, d, s.Decimals)
	}
	bal, err := c.TokenBalance(ctx, s.Treasury, s.Mint)
	if err != nil {
		return err
	}
	lam, err := c.Lamports(ctx, s.Treasury)
	if err != nil {
		return err
	}
	if bal < s.NeedMicro || lam < s.NeedLamports {
		return fmt.Errorf("%w: treasury %s has %s USDC and %s SOL, needs %s USDC and %s SOL",
			ErrUnderfunded, s.Treasury,
			FormatAmount(bal, s.Decimals), FormatAmount(lam, 9),
			FormatAmount(s.NeedMicro, s.Decimals), FormatAmount(s.NeedLamports, 9))
	}
	return nil
}

// FormatAmount writes base units with the given decimals: FormatAmount(1500000, 6) =
// "1.500000".
func FormatAmount(units uint64, decimals uint8) string {
	s := fmt.Sprintf("%0*d", int(decimals)+1, units)
	if decimals == 0 {
		return s
	}
	return s[:len(s)-int(decimals)] + "." + s[len(s)-int(decimals):]
}

// TokenBalance returns the balance (base units) of owner's associated token account for
// mint; 0 when that account does not exist.
func (c *Client) TokenBalance(ctx context.Context, owner, mint sol.PublicKey) (uint64, error) {
	ata := ATA(owner, mint)
	a, err := c.account(ctx, ata)
	if err != nil {
		return 0, err
	}
	if a == nil {
		return 0, nil
	}
	data := a.Data.GetBinary()
	if !isTokenProgram(a.Owner) || len(data) < 165 || !sol.PublicKeyFromBytes(data[:32]).Equals(mint) {
		return 0, fmt.Errorf("account %s is not a token account of mint %s", ata, mint)
	}
	return binary.LittleEndian.Uint64(data[64:72]), nil
}

// Lamports returns pk's balance in lamports (0 when the account does not exist).
func (c *Client) Lamports(ctx context.Context, pk sol.PublicKey) (uint64, error) {
	res, err := c.rpc.GetBalance(ctx, pk, commitment)
	if err != nil {
		return 0, fmt.Errorf("getBalance %s: %w", pk, err)
	}
	return res.Value, nil
}

// AccountExists reports whether an account exists at pk.
func (c *Client) AccountExists(ctx context.Context, pk sol.PublicKey) (bool, error) {
	a, err := c.account(ctx, pk)
	if err != nil {
		return false, err
	}
	return a != nil, nil
}

// IsTokenAccount reports whether addr holds an SPL Token (or Token-2022) account of mint:
// an address that merely holds lamports, or nothing, is not one.
func (c *Client) IsTokenAccount(ctx context.Context, addr, mint sol.PublicKey) (bool, error) {
	a, err := c.account(ctx, addr)
	if err != nil || a == nil {
		return false, err
	}
	data := a.Data.GetBinary()
	return isTokenProgram(a.Owner) && len(data) >= 165 && sol.PublicKeyFromBytes(data[:32]) == mint, nil
}

// LatestBlockhash returns a recent blockhash and the last block height at which a
// transaction using it can land.
func (c *Client) LatestBlockhash(ctx context.Context) (sol.Hash, uint64, error) {
	h, last, _, err := c.LatestBlockhashAt(ctx)
	return h, last, err
}

// LatestBlockhashAt is LatestBlockhash with the slot the answer was read at: a transaction
// using the blockhash cannot land in an earlier slot.
func (c *Client) LatestBlockhashAt(ctx context.Context) (hash sol.Hash, lastValid, slot uint64, err error) {
	res, err := c.rpc.GetLatestBlockhash(ctx, commitment)
	if err != nil {
		return sol.Hash{}, 0, 0, fmt.Errorf("getLatestBlockhash: %w", err)
	}
	if res == nil || res.Value == nil {
		return sol.Hash{}, 0, 0, errors.New("getLatestBlockhash: empty answer")
	}
	return res.Value.Blockhash, res.Value.LastValidBlockHeight, res.Context.Slot, nil
}

// FirstAvailableSlot is the oldest slot the RPC node still has: it cannot tell whether a
// transaction landed before it (getFirstAvailableBlock).
func (c *Client) FirstAvailableSlot(ctx context.Context) (uint64, error) {
	s, err := c.rpc.GetFirstAvailableBlock(ctx)
	if err != nil {
		return 0, fmt.Errorf("getFirstAvailableBlock: %w", err)
	}
	return s, nil
}

// BlockHeight returns the current block height.
func (c *Client) BlockHeight(ctx context.Context) (uint64, error) {
	h, err := c.rpc.GetBlockHeight(ctx, commitment)
	if err != nil {
		return 0, fmt.Errorf("getBlockHeight: %w", err)
	}
	return h, nil
}

// Send submits a signed transaction (base64, with preflight simulation). A transaction the
// cluster has already processed is not an error. Every other failure wraps ErrSendFailed
// with the RPC message and the simulation logs. A transport failure (no answer) also wraps
// ErrSendFailed, but then the transaction may still land: check its status by signature
// before building a replacement.
func (c *Client) Send(ctx context.Context, raw []byte) error {
	_, err := c.rpc.SendRawTransactionWithOpts(ctx, raw, rpc.TransactionOpts{
		SkipPreflight:       false,
		PreflightCommitment: commitment,
	})
	if err == nil {
		return nil
	}
	var re *jsonrpc.RPCError
	if errors.As(err, &re) {
		if alreadyProcessed(re) {
			return nil
		}
		msg := re.Message
		if logs := rpcErrorLogs(re); len(logs) > 0 {
			msg += "; logs: " + strings.Join(logs, " | ")
		}
		return fmt.Errorf("%w: %s (code %d)", ErrSendFailed, msg, re.Code)
	}
	return fmt.Errorf("%w: %w", ErrSendFailed, err)
}

func alreadyProcessed(re *jsonrpc.RPCError) bool {
	if strings.Contains(re.Message, "already been processed") || strings.Contains(re.Message, "AlreadyProcessed") {
		return true
	}
	if m, ok := re.Data.(map[string]any); ok {
		if s, ok := m["err"].(string); ok && s == "AlreadyProcessed" {
			return true
		}
	}
	return false
}

func rpcErrorLogs(re *jsonrpc.RPCError) []string {
	m, ok := re.Data.(map[string]any)
	if !ok {
		return nil
	}
	list, ok := m["logs"].([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, l := range list {
		if s, ok := l.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// TxStatus is what the cluster knows of a transaction.
type TxStatus struct {
	Found     bool
	Confirmed bool   // confirmed or finalized
	Finalized bool   // finalized: rooted, it cannot be rolled back
	Err       string // the on-chain failure (JSON of the TransactionError), "" if none
}

// Status returns a transaction's status, searching the whole history.
func (c *Client) Status(ctx context.Context, sig sol.Signature) (TxStatus, error) {
	res, err := c.rpc.GetSignatureStatuses(ctx, true, sig)
	if errors.Is(err, rpc.ErrNotFound) {
		return TxStatus{}, nil
	}
	if err != nil {
		return TxStatus{}, fmt.Errorf("getSignatureStatuses: %w", err)
	}
	if len(res.Value) == 0 || res.Value[0] == nil {
		return TxStatus{}, nil
	}
	v := res.Value[0]
	st := TxStatus{Found: true}
	switch v.ConfirmationStatus {
	case rpc.ConfirmationStatusConfirmed:
		st.Confirmed = true
	case rpc.ConfirmationStatusFinalized:
		st.Confirmed, st.Finalized = true, true
	}
	if v.Err != nil {
		st.Err = errText(v.Err)
	}
	return st, nil
}

func errText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// maxPollErrors is how many RPC errors in a row WaitConfirmed rides out before it gives up.
const maxPollErrors = 20

// WaitConfirmed polls (every ~100 ms) until the transaction is confirmed, landed with an
// error (returned in TxStatus.Err, with a nil error), or can no longer land: then it
// returns ErrExpired (the block height passed lastValidBlockHeight and the transaction is
// not found). Passing lastValidBlockHeight 0 waits without an expiry check until ctx ends.
// Transient RPC errors are retried; after 20 in a row the last one is returned.
func (c *Client) WaitConfirmed(ctx context.Context, sig sol.Signature, lastValidBlockHeight uint64) (TxStatus, error) {
	return c.wait(ctx, sig, lastValidBlockHeight, false)
}

// WaitFinalized is WaitConfirmed waiting for finalization (about 13 s more on a public
// cluster): what money is credited on.
func (c *Client) WaitFinalized(ctx context.Context, sig sol.Signature, lastValidBlockHeight uint64) (TxStatus, error) {
	return c.wait(ctx, sig, lastValidBlockHeight, true)
}

func (c *Client) wait(ctx context.Context, sig sol.Signature, lastValidBlockHeight uint64, final bool) (TxStatus, error) {
	errs := 0
	var lastErr error
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return TxStatus{}, fmt.Errorf("waiting for %s: %w (last RPC error: %v)", sig, ctx.Err(), lastErr)
			}
			return TxStatus{}, fmt.Errorf("waiting for %s: %w", sig, ctx.Err())
		case <-t.C:
		}
		st, expired, err := c.pollOnce(ctx, sig, lastValidBlockHeight)
		switch {
		case err != nil && ctx.Err() == nil:
			errs++
			lastErr = err
			if errs >= maxPollErrors {
				return TxStatus{}, fmt.Errorf("waiting for %s: %w", sig, err)
			}
		case err != nil:
			// ctx ended: reported at the top of the loop
		case st.Found && ((st.Confirmed && !final) || st.Finalized || st.Err != ""):
			return st, nil
		case expired:
			return st, fmt.Errorf("%s: %w", sig, ErrExpired)
		default:
			errs = 0
		}
		t.Reset(pollEvery)
	}
}

// pollOnce reads the block height first and the status second, so a transaction that
// landed before the height passed its limit is always seen.
func (c *Client) pollOnce(ctx context.Context, sig sol.Signature, lastValid uint64) (TxStatus, bool, error) {
	var h uint64
	if lastValid > 0 {
		var err error
		if h, err = c.BlockHeight(ctx); err != nil {
			return TxStatus{}, false, err
		}
	}
	st, err := c.Status(ctx, sig)
	if err != nil {
		return TxStatus{}, false, err
	}
	return st, lastValid > 0 && h > lastValid && !st.Found, nil
}

// ExplorerURL links a transaction on explorer.solana.com for the cluster behind rpcURL.
func ExplorerURL(sig sol.Signature, rpcURL string) string {
	base := "https://explorer.solana.com/tx/" + sig.String()
	u, err := url.Parse(rpcURL)
	host := ""
	if err == nil {
		host = strings.ToLower(u.Hostname())
	}
	switch {
	case host == "api.mainnet-beta.solana.com" || host == "api.mainnet.solana.com":
		return base
	case host == "api.devnet.solana.com":
		return base + "?cluster=devnet"
	case host == "api.testnet.solana.com":
		return base + "?cluster=testnet"
	}
	return base + "?cluster=custom&customUrl=" + url.QueryEscape(rpcURL)
}
