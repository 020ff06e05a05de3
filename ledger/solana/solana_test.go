package solana_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sol "github.com/gagliardetto/solana-go"

	"github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/ledger/solana/localnet"
)

const usdc = 1_000_000 // base units of one USDC (6 decimals)

// env is a local cluster with a 6-decimal mint whose authority is also the treasury, which
// holds 1,000,000 USDC and 100 SOL.
type env struct {
	rt       *localnet.Runtime
	c        *solana.Client
	treasury sol.PrivateKey
	mint     sol.PublicKey
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rt := localnet.ForTest(t)
	c := solana.Dial(rt.URL)
	ctx := testCtx(t)
	treasury := mustKey(t)
	if err := c.Airdrop(ctx, treasury.PublicKey(), 100_000_000_000); err != nil {
		t.Fatal(err)
	}
	mint, err := c.CreateMint(ctx, treasury, 6)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MintTo(ctx, treasury, mint, treasury.PublicKey(), 1_000_000*usdc); err != nil {
		t.Fatal(err)
	}
	return &env{rt: rt, c: c, treasury: treasury, mint: mint}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustKey(t testing.TB) sol.PrivateKey {
	t.Helper()
	k, err := solana.NewKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (e *env) balance(t *testing.T, owner sol.PublicKey) uint64 {
	t.Helper()
	b, err := e.c.TokenBalance(context.Background(), owner, e.mint)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendConfirm sends raw and waits until it lands without error.
func (e *env) sendConfirm(t *testing.T, raw []byte, sig sol.Signature, lastValid uint64) {
	t.Helper()
	ctx := testCtx(t)
	if err := e.c.Send(ctx, raw); err != nil {
		t.Fatal(err)
	}
	st, err := e.c.WaitConfirmed(ctx, sig, lastValid)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Found || !st.Confirmed || st.Err != "" {
		t.Fatalf("status %+v", st)
	}
}

func TestUSDCDepositFlow(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	user := mustKey(t)
	if err := e.c.Airdrop(ctx, user.PublicKey(), 1_000_000_000); err != nil {
		t.Fatal(err)
	}
	if err := e.c.MintTo(ctx, e.treasury, e.mint, user.PublicKey(), 100*usdc); err != nil {
		t.Fatal(err)
	}
	if got := e.balance(t, user.PublicKey()); got != 100*usdc {
		t.Fatalf("user balance %d", got)
	}
	d, err := e.c.MintDecimals(ctx, e.mint)
	if err != nil || d != 6 {
		t.Fatalf("decimals %d, %v", d, err)
	}
	before := e.balance(t, e.treasury.PublicKey())

	bh, lastValid, err := e.c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const memo = "gpunex deposit: account 7f3a / job 42 ✓"
	raw, sig, err := solana.DepositTransaction(bh, user, e.treasury.PublicKey(), e.mint, 6, 25_500_000, memo)
	if err != nil {
		t.Fatal(err)
	}
	e.sendConfirm(t, raw, sig, lastValid)

	if got := e.balance(t, user.PublicKey()); got != 74_500_000 {
		t.Fatalf("user balance after deposit %d", got)
	}
	if got := e.balance(t, e.treasury.PublicKey()); got != before+25_500_000 {
		t.Fatalf("treasury balance after deposit %d, want %d", got, before+25_500_000)
	}

	f, err := e.c.Transaction(ctx, sig)
	if err != nil {
		t.Fatal(err)
	}
	if f.Signature != sig || f.Failed != "" || f.FeeLamports != 5000 || f.Slot == 0 || f.BlockTime.IsZero() {
		t.Fatalf("facts %+v", f)
	}
	if time.Since(f.BlockTime) > time.Minute {
		t.Fatalf("block time %v", f.BlockTime)
	}
	if len(f.Signers) != 1 || !f.Signers[0].Equals(user.PublicKey()) {
		t.Fatalf("signers %v", f.Signers)
	}
	if len(f.Memos) != 1 || f.Memos[0] != memo {
		t.Fatalf("memos %q", f.Memos)
	}
	want := solana.TokenTransfer{
		Program:     sol.TokenProgramID,
		Source:      solana.ATA(user.PublicKey(), e.mint),
		Destination: solana.ATA(e.treasury.PublicKey(), e.mint),
		Authority:   user.PublicKey(),
		Mint:        e.mint,
		Amount:      25_500_000,
		Decimals:    6,
		Checked:     true,
	}
	if len(f.Transfers) != 1 || f.Transfers[0] != want {
		t.Fatalf("transfers %+v, want %+v", f.Transfers, want)
	}

	if _, err := e.c.Transaction(ctx, sol.Signature{1, 2, 3}); !errors.Is(err, solana.ErrNotFound) {
		t.Fatalf("unknown signature: %v", err)
	}
	if st, err := e.c.Status(ctx, sol.Signature{1, 2, 3}); err != nil || st.Found {
		t.Fatalf("unknown signature status %+v %v", st, err)
	}
}

func TestPayouts(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)

	// One recipient without a token account.
	alice := mustKey(t).PublicKey()
	bh, lastValid, err := e.c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, sig, err := solana.PayoutTransaction(bh, e.treasury, e.mint, 6, "payout 1", []solana.Payment{{Owner: alice, Amount: 3 * usdc, CreateATA: true}})
	if err != nil {
		t.Fatal(err)
	}
	e.sendConfirm(t, raw, sig, lastValid)
	if got := e.balance(t, alice); got != 3*usdc {
		t.Fatalf("alice %d", got)
	}
	f, err := e.c.Transaction(ctx, sig)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Transfers) != 1 || f.Transfers[0].Amount != 3*usdc || !f.Transfers[0].Destination.Equals(solana.ATA(alice, e.mint)) ||
		!f.Transfers[0].Authority.Equals(e.treasury.PublicKey()) || len(f.Memos) != 1 || f.Memos[0] != "payout 1" {
		t.Fatalf("facts %+v", f)
	}

	// Many recipients: half of them new (CreateATA), alice again with an existing account.
	var pays []solana.Payment
	want := map[sol.PublicKey]uint64{alice: 3*usdc + 1}
	pays = append(pays, solana.Payment{Owner: alice, Amount: 1})
	for i := 0; i < 40; i++ {
		o := mustKey(t).PublicKey()
		amt := uint64(i+1) * 10_000
		create := i%2 == 0
		if !create {
			if err := e.c.CreateATA(ctx, e.treasury, o, e.mint); err != nil {
				t.Fatal(err)
			}
		}
		pays = append(pays, solana.Payment{Owner: o, Amount: amt, CreateATA: create})
		want[o] = amt
	}
	const memo = "settlement epoch 2026-01-01T00:00Z batch 17"
	groups := solana.SplitPayments(memo, pays)
	if len(groups) < 2 {
		t.Fatalf("%d groups", len(groups))
	}
	var flat []solana.Payment
	bh, lastValid, err = e.c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sigs []sol.Signature
	for _, g := range groups {
		flat = append(flat, g...)
		raw, sig, err := solana.PayoutTransaction(bh, e.treasury, e.mint, 6, memo, g)
		if err != nil {
			t.Fatalf("group of %d: %v", len(g), err)
		}
		if len(raw) > solana.MaxTransactionSize {
			t.Fatalf("group of %d is %d bytes", len(g), len(raw))
		}
		if err := e.c.Send(ctx, raw); err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, sig)
	}
	if len(flat) != len(pays) {
		t.Fatalf("groups hold %d payments, want %d", len(flat), len(pays))
	}
	for i := range pays {
		if flat[i] != pays[i] {
			t.Fatalf("order changed at %d", i)
		}
	}
	for _, sig := range sigs {
		st, err := e.c.WaitConfirmed(ctx, sig, lastValid)
		if err != nil || st.Err != "" {
			t.Fatalf("%v %+v", err, st)
		}
	}
	for o, amt := range want {
		if got := e.balance(t, o); got != amt {
			t.Fatalf("%s has %d, want %d", o, got, amt)
		}
	}
	// A group that is one payment too large is refused.
	big := append(append([]solana.Payment(nil), groups[0]...), solana.Payment{Owner: mustKey(t).PublicKey(), Amount: 1, CreateATA: true})
	if _, _, err := solana.PayoutTransaction(bh, e.treasury, e.mint, 6, memo, big); !errors.Is(err, solana.ErrTooLarge) {
		t.Fatalf("oversized payout: %v", err)
	}
}

func TestDuplicateSendPaysOnce(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	bob := mustKey(t).PublicKey()
	bh, lastValid, err := e.c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, sig, err := solana.PayoutTransaction(bh, e.treasury, e.mint, 6, "dup", []solana.Payment{{Owner: bob, Amount: 7 * usdc, CreateATA: true}})
	if err != nil {
		t.Fatal(err)
	}
	e.sendConfirm(t, raw, sig, lastValid)
	for i := 0; i < 3; i++ {
		if err := e.c.Send(ctx, raw); err != nil {
			t.Fatalf("resend %d: %v", i, err)
		}
	}
	if got := e.balance(t, bob); got != 7*usdc {
		t.Fatalf("bob has %d after resends", got)
	}
}

func TestExpiredBlockhash(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	bob := mustKey(t).PublicKey()
	bh, lastValid, err := e.c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, sig, err := solana.PayoutTransaction(bh, e.treasury, e.mint, 6, "late", []solana.Payment{{Owner: bob, Amount: usdc, CreateATA: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rt.ExpireBlockhash(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := e.c.BlockHeight(ctx)
	if err != nil || h <= lastValid {
		t.Fatalf("height %d (last valid %d), %v", h, lastValid, err)
	}
	err = e.c.Send(ctx, raw)
	if !errors.Is(err, solana.ErrSendFailed) || !strings.Contains(err.Error(), "Blockhash not found") {
		t.Fatalf("send with expired blockhash: %v", err)
	}
	if _, err := e.c.WaitConfirmed(ctx, sig, lastValid); !errors.Is(err, solana.ErrExpired) {
		t.Fatalf("wait: %v", err)
	}
	if got := e.balance(t, bob); got != 0 {
		t.Fatalf("bob has %d", got)
	}
	// A fresh blockhash works again.
	bh, lastValid, err = e.c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, sig, err = solana.PayoutTransaction(bh, e.treasury, e.mint, 6, "on time", []solana.Payment{{Owner: bob, Amount: usdc, CreateATA: true}})
	if err != nil {
		t.Fatal(err)
	}
	e.sendConfirm(t, raw, sig, lastValid)
}

func TestSendFailureCarriesLogs(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	poor := mustKey(t)
	if err := e.c.Airdrop(ctx, poor.PublicKey(), 1_000_000_000); err != nil {
		t.Fatal(err)
	}
	if err := e.c.MintTo(ctx, e.treasury, e.mint, poor.PublicKey(), 5); err != nil {
		t.Fatal(err)
	}
	bh, _, err := e.c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, sig, err := solana.DepositTransaction(bh, poor, e.treasury.PublicKey(), e.mint, 6, 6, "too much")
	if err != nil {
		t.Fatal(err)
	}
	err = e.c.Send(ctx, raw)
	if !errors.Is(err, solana.ErrSendFailed) || !strings.Contains(err.Error(), "logs:") {
		t.Fatalf("send: %v", err)
	}
	t.Logf("failure as reported: %v", err)
	if st, err := e.c.Status(ctx, sig); err != nil || st.Found {
		t.Fatalf("rejected transaction status %+v %v", st, err)
	}
}

func TestCheck(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	good := solana.Setup{
		GenesisHash:  e.rt.GenesisHash,
		Mint:         e.mint,
		Decimals:     6,
		Treasury:     e.treasury.PublicKey(),
		NeedMicro:    500_000 * usdc,
		NeedLamports: 1_000_000_000,
	}
	if err := e.c.Check(ctx, good); err != nil {
		t.Fatal(err)
	}
	gh, err := e.c.GenesisHash(ctx)
	if err != nil || gh != e.rt.GenesisHash {
		t.Fatalf("genesis %q %v", gh, err)
	}

	s := good
	s.GenesisHash = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d" // mainnet
	err = e.c.Check(ctx, s)
	if !errors.Is(err, solana.ErrWrongCluster) || !strings.Contains(err.Error(), s.GenesisHash) || !strings.Contains(err.Error(), e.rt.GenesisHash) {
		t.Fatalf("wrong genesis: %v", err)
	}
	s.GenesisHash = ""
	if err := e.c.Check(ctx, s); err != nil {
		t.Fatalf("no genesis check: %v", err)
	}

	for name, mint := range map[string]sol.PublicKey{
		"system account": e.treasury.PublicKey(),
		"token account":  solana.ATA(e.treasury.PublicKey(), e.mint),
		"random key":     mustKey(t).PublicKey(),
	} {
		s := good
		s.Mint = mint
		if err := e.c.Check(ctx, s); !errors.Is(err, solana.ErrWrongMint) {
			t.Fatalf("%s as mint: %v", name, err)
		}
	}
	s = good
	s.Decimals = 9
	if err := e.c.Check(ctx, s); !errors.Is(err, solana.ErrWrongMint) {
		t.Fatalf("wrong decimals: %v", err)
	}
	// A Token-2022 mint is refused before anything moves: payouts use the classic program.
	mint2022, err := e.c.CreateToken2022Mint(ctx, e.treasury, 6)
	if err != nil {
		t.Fatal(err)
	}
	s = good
	s.Mint = mint2022
	if err := e.c.Check(ctx, s); !errors.Is(err, solana.ErrWrongMint) || !strings.Contains(err.Error(), "Token-2022") {
		t.Fatalf("a Token-2022 mint: %v", err)
	}

	s = good
	s.NeedMicro = 2_000_000 * usdc
	err = e.c.Check(ctx, s)
	if !errors.Is(err, solana.ErrUnderfunded) || !strings.Contains(err.Error(), "1000000.000000 USDC") || !strings.Contains(err.Error(), "2000000.000000 USDC") {
		t.Fatalf("underfunded USDC: %v", err)
	}
	s = good
	s.NeedLamports = 1_000_000_000_000
	err = e.c.Check(ctx, s)
	if !errors.Is(err, solana.ErrUnderfunded) || !strings.Contains(err.Error(), "1000.000000000 SOL") {
		t.Fatalf("underfunded SOL: %v", err)
	}
	t.Logf("underfunded error reads: %v", err)

	// A treasury without a token account holds 0.
	s = good
	s.Treasury = mustKey(t).PublicKey()
	if err := e.c.Check(ctx, s); !errors.Is(err, solana.ErrUnderfunded) {
		t.Fatalf("empty treasury: %v", err)
	}
	if ok, err := e.c.AccountExists(ctx, s.Treasury); ok || err != nil {
		t.Fatalf("exists %v %v", ok, err)
	}
	if ok, err := e.c.AccountExists(ctx, e.treasury.PublicKey()); !ok || err != nil {
		t.Fatalf("exists %v %v", ok, err)
	}
}

// failingTransport fails every request, as a dead RPC node would.
type failingTransport struct{}

func (failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("injected network failure")
}

func TestRPCFailures(t *testing.T) {
	c := solana.DialHTTP("http://127.0.0.1:1", &http.Client{Transport: failingTransport{}})
	ctx := context.Background()
	k := mustKey(t)
	raw, _, err := solana.PayoutTransaction(sol.Hash{1}, k, sol.PublicKey{2}, 6, "x", []solana.Payment{{Owner: sol.PublicKey{3}, Amount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, raw); !errors.Is(err, solana.ErrSendFailed) || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("send: %v", err)
	}
	if _, err := c.Status(ctx, sol.Signature{}); err == nil {
		t.Fatal("status without a node")
	}
	if _, err := c.TokenBalance(ctx, k.PublicKey(), sol.PublicKey{2}); err == nil {
		t.Fatal("balance without a node")
	}
	if err := c.Check(ctx, solana.Setup{Mint: sol.PublicKey{2}}); err == nil || errors.Is(err, solana.ErrWrongMint) {
		t.Fatalf("check without a node: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := c.WaitConfirmed(wctx, sol.Signature{}, 10); err == nil || errors.Is(err, solana.ErrExpired) {
		t.Fatalf("wait without a node: %v", err)
	}
}

func TestKeypairFiles(t *testing.T) {
	dir := t.TempDir()
	k := mustKey(t)
	path := filepath.Join(dir, "treasury.json")
	if err := solana.WriteKeypair(path, k); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	if err := solana.WriteKeypair(path, mustKey(t)); !errors.Is(err, os.ErrExist) {
		t.Fatalf("overwrite: %v", err)
	}
	got, err := solana.LoadKeypair(path)
	if err != nil || !got.PublicKey().Equals(k.PublicKey()) || string(got) != string(k) {
		t.Fatalf("load: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}

	keyTexts := func(data []byte) []string {
		// Every run of three consecutive numbers of the file, and the key in base58.
		nums := strings.Split(strings.Trim(string(data), "[]\n "), ",")
		var out []string
		for i := 0; i+3 <= len(nums); i++ {
			out = append(out, strings.Join(nums[i:i+3], ","))
		}
		return append(out, k.String(), "0x")
	}
	data, _ := os.ReadFile(path)
	checkErr := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		for _, s := range keyTexts(data) {
			if strings.Contains(err.Error(), s) {
				t.Fatalf("%s: error %q contains key material %q", name, err, s)
			}
		}
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = solana.LoadKeypair(path)
	checkErr("0644", err)
	if !strings.Contains(err.Error(), "0600") {
		t.Fatalf("0644: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}

	bad := map[string]string{
		"short":     "[" + strings.Join(strings.Split(strings.Trim(string(data), "[]"), ",")[:63], ",") + "]",
		"garbage":   string(data[:len(data)/2]) + "x" + string(data[len(data)/2:]),
		"truncated": string(data[:len(data)-10]),
		"mismatch":  string(data[:len(data)-4]) + "9]",
		"not bytes": strings.Replace(string(data), "[", "[300,", 1),
	}
	for name, content := range bad {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := solana.LoadKeypair(p)
		checkErr(name, err)
	}
}

func TestSplitPaymentsSizes(t *testing.T) {
	treasury := mustKey(t)
	mint := mustKey(t).PublicKey()
	for _, create := range []bool{false, true} {
		var pays []solana.Payment
		for i := 0; i < 1000; i++ {
			pays = append(pays, solana.Payment{Owner: mustKey(t).PublicKey(), Amount: uint64(i) * 1000, CreateATA: create})
		}
		memo := "gpunex settlement 2026-05-01 epoch 123456"
		groups := solana.SplitPayments(memo, pays)
		n := 0
		for i, g := range groups {
			raw, _, err := solana.PayoutTransaction(sol.Hash{9}, treasury, mint, 6, memo, g)
			if err != nil {
				t.Fatalf("group %d of %d: %v", i, len(g), err)
			}
			if len(raw) > solana.MaxTransactionSize {
				t.Fatalf("group %d: %d bytes", i, len(raw))
			}
			// Greedy: the next payment would not have fit.
			if i+1 < len(groups) {
				more := append(append([]solana.Payment(nil), g...), groups[i+1][0])
				if _, _, err := solana.PayoutTransaction(sol.Hash{9}, treasury, mint, 6, memo, more); !errors.Is(err, solana.ErrTooLarge) {
					t.Fatalf("group %d could hold one more: %v", i, err)
				}
			}
			n += len(g)
		}
		if n != len(pays) {
			t.Fatalf("%d payments in groups", n)
		}
		t.Logf("1000 payouts (CreateATA=%v): %d transactions, first holds %d", create, len(groups), len(groups[0]))
		if !create && len(groups) > 60 {
			t.Fatalf("%d transactions for 1000 payouts", len(groups))
		}
	}
}

func TestExplorerURL(t *testing.T) {
	sig := sol.Signature{7}
	s := sig.String()
	for rpcURL, want := range map[string]string{
		"https://api.mainnet-beta.solana.com": "https://explorer.solana.com/tx/" + s,
		"https://api.devnet.solana.com":       "https://explorer.solana.com/tx/" + s + "?cluster=devnet",
		"http://127.0.0.1:8899":               "https://explorer.solana.com/tx/" + s + "?cluster=custom&customUrl=http%3A%2F%2F127.0.0.1%3A8899",
	} {
		if got := solana.ExplorerURL(sig, rpcURL); got != want {
			t.Errorf("%s: %s, want %s", rpcURL, got, want)
		}
	}
}

// TestPayoutFigures measures 1,000 payouts to distinct recipients, first creating their
// token accounts, then again to the now existing accounts. Run with
// GPUNEX_SOLANA_FIGURES=1 go test -run PayoutFigures -v ./ledger/solana/
func TestPayoutFigures(t *testing.T) {
	if os.Getenv("GPUNEX_SOLANA_FIGURES") != "1" {
		t.Skip("set GPUNEX_SOLANA_FIGURES=1 to measure 1,000 payouts")
	}
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("GPUNEX_SOLANA_FIGURES_N")); err == nil && v > 0 {
		n = v
	}
	e := newEnv(t)
	ctx := testCtx(t)
	owners := make([]sol.PublicKey, n)
	for i := range owners {
		owners[i] = mustKey(t).PublicKey()
	}
	run := func(label string, create bool) {
		pays := make([]solana.Payment, n)
		for i, o := range owners {
			pays[i] = solana.Payment{Owner: o, Amount: 1_000 + uint64(i), CreateATA: create}
		}
		lamBefore, err := e.c.Lamports(ctx, e.treasury.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		memo := "gpunex payout " + label
		groups := solana.SplitPayments(memo, pays)
		splitTime := time.Since(start)
		bh, lastValid, err := e.c.LatestBlockhash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sigs := make([]sol.Signature, len(groups))
		for i, g := range groups {
			raw, sig, err := solana.PayoutTransaction(bh, e.treasury, e.mint, 6, memo, g)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.c.Send(ctx, raw); err != nil {
				t.Fatal(err)
			}
			sigs[i] = sig
		}
		var fees uint64
		for _, sig := range sigs {
			st, err := e.c.WaitConfirmed(ctx, sig, lastValid)
			if err != nil || st.Err != "" {
				t.Fatalf("%v %+v", err, st)
			}
		}
		wall := time.Since(start)
		for _, sig := range sigs {
			f, err := e.c.Transaction(ctx, sig)
			if err != nil {
				t.Fatal(err)
			}
			fees += f.FeeLamports
		}
		lamAfter, err := e.c.Lamports(ctx, e.treasury.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, n / 2, n - 1} {
			if got := e.balance(t, owners[i]); got%(1_000+uint64(i)) != 0 || got == 0 {
				t.Fatalf("recipient %d holds %d", i, got)
			}
		}
		msg := fmt.Sprintf("%d payouts (%s): %d transactions (%.1f payouts/tx), fees %d lamports (%.6f SOL), treasury SOL spent %d lamports (fees + rent), wall %v (split %v)",
			n, label, len(groups), float64(n)/float64(len(groups)), fees, float64(fees)/1e9, lamBefore-lamAfter, wall.Round(time.Millisecond), splitTime.Round(time.Millisecond))
		t.Log(msg)
		fmt.Println(msg)
	}
	run("new token accounts, CreateATA", true)
	run("existing token accounts", false)
}
