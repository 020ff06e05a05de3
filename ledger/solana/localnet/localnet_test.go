package localnet_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	sol "github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/ws"

	"github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/ledger/solana/localnet"
)

func post(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestStartStop(t *testing.T) {
	rt := localnet.ForTest(t)
	if !strings.HasPrefix(rt.URL, "http://127.0.0.1:") || !strings.HasPrefix(rt.WSURL, "ws://127.0.0.1:") || len(rt.GenesisHash) < 32 {
		t.Fatalf("runtime %+v", rt)
	}
	if got := post(t, rt.URL, `{"jsonrpc":"2.0","id":1,"method":"getGenesisHash"}`); !strings.Contains(got, rt.GenesisHash) {
		t.Fatal(got)
	}
	if err := rt.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Post(rt.URL, "application/json", strings.NewReader(`{}`)); err == nil {
		t.Fatal("server still answers after Stop")
	}
}

// TestBadInput sends malformed requests; each must get a JSON-RPC error and the server
// must keep answering.
func TestBadInput(t *testing.T) {
	rt := localnet.ForTest(t)
	for _, body := range []string{
		`not json`,
		`[]`,
		`{"jsonrpc":"2.0","id":1}`,
		`{"jsonrpc":"2.0","id":1,"method":"noSuchMethod"}`,
		`{"jsonrpc":"2.0","id":1,"method":"getBalance","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"getBalance","params":["0OIl"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"getBalance","params":[42]}`,
		`{"jsonrpc":"2.0","id":1,"method":"getAccountInfo","params":["1111111111111111111111111111111"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"sendTransaction","params":["!!!!"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"sendTransaction","params":["AQID"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"sendTransaction","params":["` + strings.Repeat("A", 400) + `"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"sendTransaction","params":[]}`,
		`{"jsonrpc":"2.0","id":1,"method":"getTransaction","params":["abc"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"getSignatureStatuses","params":["x"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"getFeeForMessage","params":["AAAA"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"requestAirdrop","params":["11111111111111111111111111111111", "many"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"getTokenAccountBalance","params":["11111111111111111111111111111111"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"getMinimumBalanceForRentExemption","params":["x"]}`,
	} {
		got := post(t, rt.URL, body)
		var out struct {
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(got), &out); err != nil || out.Error == nil {
			// getMinimumBalanceForRentExemption of a non-number counts as 0 bytes.
			if !strings.Contains(body, "getMinimumBalance") {
				t.Errorf("%s -> %s (want a JSON-RPC error)", body, got)
			}
		}
	}
	// 64-bit request ids come back unchanged; batches work.
	got := post(t, rt.URL, `[{"jsonrpc":"2.0","id":18446744073709551615,"method":"getHealth"},{"jsonrpc":"2.0","id":2,"method":"getSlot"}]`)
	if !strings.Contains(got, `"id":18446744073709551615`) || !strings.Contains(got, `"result":"ok"`) {
		t.Fatal(got)
	}
	if got := post(t, rt.URL, `{"jsonrpc":"2.0","id":1,"method":"getHealth"}`); !strings.Contains(got, `"ok"`) {
		t.Fatal(got)
	}
}

// TestStandardMethods drives the server through unmodified solana-go clients.
func TestStandardMethods(t *testing.T) {
	rt := localnet.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := solana.Dial(rt.URL)
	r := rpc.New(rt.URL)

	payer, _ := solana.NewKeypair()
	if err := c.Airdrop(ctx, payer.PublicKey(), 10_000_000_000); err != nil {
		t.Fatal(err)
	}
	mint, err := c.CreateMint(ctx, payer, 6)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MintTo(ctx, payer, mint, payer.PublicKey(), 5_000_000); err != nil {
		t.Fatal(err)
	}

	if v, err := r.GetVersion(ctx); err != nil || v.SolanaCore == "" {
		t.Fatalf("version %+v %v", v, err)
	}
	slot, err := r.GetSlot(ctx, rpc.CommitmentFinalized)
	if err != nil || slot == 0 {
		t.Fatalf("slot %d %v", slot, err)
	}
	rent, err := r.GetMinimumBalanceForRentExemption(ctx, 165, "")
	if err != nil || rent != 2_039_280 {
		t.Fatalf("rent %d %v", rent, err)
	}

	// jsonParsed mint and token account.
	ai, err := r.GetAccountInfoWithOpts(ctx, mint, &rpc.GetAccountInfoOpts{Encoding: sol.EncodingJSONParsed})
	if err != nil {
		t.Fatal(err)
	}
	js := string(ai.Value.Data.GetRawJSON())
	if !strings.Contains(js, `"type":"mint"`) || !strings.Contains(js, `"decimals":6`) || !strings.Contains(js, `"supply":"5000000"`) {
		t.Fatalf("parsed mint %s", js)
	}
	ata := solana.ATA(payer.PublicKey(), mint)
	ai, err = r.GetAccountInfoWithOpts(ctx, ata, &rpc.GetAccountInfoOpts{Encoding: sol.EncodingJSONParsed})
	if err != nil {
		t.Fatal(err)
	}
	js = string(ai.Value.Data.GetRawJSON())
	if !strings.Contains(js, `"type":"account"`) || !strings.Contains(js, `"uiAmountString":"5"`) || !strings.Contains(js, payer.PublicKey().String()) {
		t.Fatalf("parsed token account %s", js)
	}
	tb, err := r.GetTokenAccountBalance(ctx, ata, "")
	if err != nil || tb.Value.Amount != "5000000" || tb.Value.Decimals != 6 {
		t.Fatalf("token balance %+v %v", tb, err)
	}

	// A transfer, watched over the websocket, then read back in "json" encoding.
	wsc, err := ws.Connect(ctx, rt.WSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer wsc.Close()
	bh, lastValid, err := c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := r.IsBlockhashValid(ctx, bh, ""); err != nil || !ok.Value {
		t.Fatalf("blockhash valid %v %v", ok, err)
	}
	to, _ := solana.NewKeypair()
	raw, sig, err := solana.PayoutTransaction(bh, payer, mint, 6, "hello", []solana.Payment{{Owner: to.PublicKey(), Amount: 1_250_000, CreateATA: true}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := sol.TransactionFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	fee, err := r.GetFeeForMessage(ctx, tx.Message.ToBase64(), "")
	if err != nil || fee.Value == nil || *fee.Value != 5000 {
		t.Fatalf("fee %+v %v", fee, err)
	}
	sub, err := wsc.SignatureSubscribe(sig, rpc.CommitmentConfirmed)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := c.Send(ctx, raw); err != nil {
		t.Fatal(err)
	}
	got, err := sub.RecvWithTimeout(10 * time.Second)
	if err != nil || got.Value.Err != nil {
		t.Fatalf("signature notification %+v %v", got, err)
	}
	if _, err := c.WaitConfirmed(ctx, sig, lastValid); err != nil {
		t.Fatal(err)
	}
	// solana-go refuses the "json" encoding for getTransaction: call it by hand.
	var res rpc.GetTransactionResult
	if err := r.RPCCallForInto(ctx, &res, "getTransaction", []any{sig.String(), map[string]any{"encoding": "json", "maxSupportedTransactionVersion": 0}}); err != nil {
		t.Fatal(err)
	}
	if res.Meta == nil || res.Meta.Fee != 5000 || res.Meta.Err != nil || len(res.Meta.PostTokenBalances) != 2 || len(res.Meta.PreTokenBalances) != 1 || len(res.Meta.LogMessages) == 0 {
		t.Fatalf("meta %+v", res.Meta)
	}
	var paid bool
	for _, b := range res.Meta.PostTokenBalances {
		if b.Owner != nil && b.Owner.Equals(to.PublicKey()) && b.UiTokenAmount.Amount == "1250000" && b.Mint.Equals(mint) {
			paid = true
		}
	}
	if !paid {
		t.Fatalf("post token balances %+v", res.Meta.PostTokenBalances)
	}
	jtx, err := res.Transaction.GetTransaction()
	if err != nil || jtx.Signatures[0] != sig || len(jtx.Message.Instructions) != 3 {
		t.Fatalf("json transaction %v", err)
	}
	sigs, err := r.GetSignaturesForAddress(ctx, to.PublicKey())
	if err != nil || len(sigs) != 1 || sigs[0].Signature != sig || sigs[0].Memo == nil || !strings.Contains(*sigs[0].Memo, "hello") {
		t.Fatalf("signatures for address %+v %v", sigs, err)
	}

	// Preflight off: a failing transaction lands, pays its fee and reports its error.
	bh, _, err = c.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, sig, err = solana.PayoutTransaction(bh, payer, mint, 6, "too much", []solana.Payment{{Owner: to.PublicKey(), Amount: 1 << 40}})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := c.Lamports(ctx, payer.PublicKey())
	if _, err := r.SendRawTransactionWithOpts(ctx, raw, rpc.TransactionOpts{SkipPreflight: true}); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, sig)
	if err != nil || !st.Found || !strings.Contains(st.Err, "InstructionError") {
		t.Fatalf("failed transaction status %+v %v", st, err)
	}
	after, _ := c.Lamports(ctx, payer.PublicKey())
	if before-after != 5000 {
		t.Fatalf("fee charged %d", before-after)
	}
	f, err := c.Transaction(ctx, sig)
	if err != nil || f.Failed == "" || f.FeeLamports != 5000 {
		t.Fatalf("failed facts %+v %v", f, err)
	}
}

// TestBlockHeightAdvances checks the clock: heights grow with time, and a blockhash stays
// valid until its lastValidBlockHeight.
func TestBlockHeightAdvances(t *testing.T) {
	rt := localnet.ForTest(t)
	ctx := context.Background()
	c := solana.Dial(rt.URL)
	h1, err := c.BlockHeight(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bh, lastValid, err := c.LatestBlockhash(ctx)
	if err != nil || lastValid < h1+149 {
		t.Fatalf("last valid %d at height %d, %v", lastValid, h1, err)
	}
	time.Sleep(900 * time.Millisecond)
	h2, _ := c.BlockHeight(ctx)
	if h2 <= h1 {
		t.Fatalf("height did not advance: %d -> %d", h1, h2)
	}
	r := rpc.New(rt.URL)
	if ok, err := r.IsBlockhashValid(ctx, bh, ""); err != nil || !ok.Value {
		t.Fatalf("blockhash from %d blocks ago invalid: %v", h2-h1, err)
	}
	if err := rt.ExpireBlockhash(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.IsBlockhashValid(ctx, bh, ""); err != nil || ok.Value {
		t.Fatalf("blockhash still valid after expiry: %v", err)
	}
	h3, _ := c.BlockHeight(ctx)
	if h3 <= lastValid {
		t.Fatalf("height %d not past %d", h3, lastValid)
	}
}

// TestMutatedTransactions sends randomly corrupted copies of a valid transaction: every
// one must get a JSON-RPC answer and the server must stay up (a panic inside LiteSVM
// would abort the process).
func TestMutatedTransactions(t *testing.T) {
	rt := localnet.ForTest(t)
	ctx := context.Background()
	c := solana.Dial(rt.URL)
	payer, _ := solana.NewKeypair()
	if err := c.Airdrop(ctx, payer.PublicKey(), 10_000_000_000); err != nil {
		t.Fatal(err)
	}
	mint, err := c.CreateMint(ctx, payer, 6)
	if err != nil {
		t.Fatal(err)
	}
	bh, _, _ := c.LatestBlockhash(ctx)
	raw, _, err := solana.PayoutTransaction(bh, payer, mint, 6, "m", []solana.Payment{{Owner: payer.PublicKey(), Amount: 1, CreateATA: true}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 1000; i++ {
		b := append([]byte(nil), raw...)
		for j := 0; j < 1+rng.Intn(4); j++ {
			b[rng.Intn(len(b))] = byte(rng.Intn(256))
		}
		if rng.Intn(10) == 0 {
			b = b[:rng.Intn(len(b))]
		}
		body := `{"jsonrpc":"2.0","id":1,"method":"sendTransaction","params":["` + base64.StdEncoding.EncodeToString(b) + `",{"skipPreflight":` + map[bool]string{true: "true", false: "false"}[rng.Intn(2) == 0] + `}]}`
		got := post(t, rt.URL, body)
		if !strings.Contains(got, `"jsonrpc"`) {
			t.Fatalf("iteration %d: %s", i, got)
		}
	}
	if got := post(t, rt.URL, `{"jsonrpc":"2.0","id":1,"method":"getHealth"}`); !strings.Contains(got, "ok") {
		t.Fatal(got)
	}
}
