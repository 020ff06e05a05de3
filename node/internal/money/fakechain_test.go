package money

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"

	chain "github.com/gpunex/gpunex/ledger/solana"
)

// fakeChain is the chain as the settlement sees it (ChainClient), in memory: a USDC mint,
// the treasury's funds, token accounts, block height and slot, and the transactions that
// landed. A transaction lands at most once per signature, as on Solana: a second landing
// of the same payouts needs a second signature, which the tests count. Switches make it
// lose the answer of a send, drop sends, fail transactions on chain, or forget its history.
type fakeChain struct {
	mu       sync.Mutex
	genesis  string
	mint     chain.PublicKey
	treasury chain.PublicKey
	usdc     uint64 // the treasury's USDC, in micro-USDC
	lamports uint64

	height, slot, firstSlot uint64
	accounts                map[chain.PublicKey]bool // token accounts of the mint
	landed                  map[chain.Signature]string
	pruned                  map[chain.Signature]string // landed, forgotten by a pruned node
	blockhashes             int

	sends          int  // Send calls
	loseAnswers    int  // the next sends land, but their answer is lost
	dropSends      bool // sends are taken and never land
	failOnChain    int  // the next sends land failed: nothing moves
	genesisErr     error
	finalized      map[chain.Signature]*chain.TxFacts // deposit transactions
	confirmedOnly  map[chain.Signature]bool           // deposits confirmed, not finalized yet
	createdAccount []chain.PublicKey
	depositReads   int // GenesisHash, Status and FinalizedTransaction calls: a deposit claim's RPC cost
}

func newFakeChain(treasury chain.PublicKey) *fakeChain {
	mint, _ := chain.NewKeypair()
	return &fakeChain{genesis: "GenesisOfTheFakeChain11111111111111111111111", mint: mint.PublicKey(), treasury: treasury,
		usdc: 1_000_000_000_000, lamports: 100_000_000_000, height: 1000, slot: 2000,
		accounts: map[chain.PublicKey]bool{}, landed: map[chain.Signature]string{}, pruned: map[chain.Signature]string{},
		finalized: map[chain.Signature]*chain.TxFacts{}, confirmedOnly: map[chain.Signature]bool{}}
}

var _ ChainClient = (*fakeChain)(nil)

// signatureOf reads a signed transaction's first signature: its identity on chain.
func signatureOf(raw []byte) chain.Signature {
	var sig chain.Signature
	copy(sig[:], raw[1:65]) // one signature, its count a one-byte compact-u16
	return sig
}

// succeeded is how many distinct transactions landed and succeeded.
func (f *fakeChain) succeeded() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.landed {
		if e == "" {
			n++
		}
	}
	for _, e := range f.pruned {
		if e == "" {
			n++
		}
	}
	return n
}

func (f *fakeChain) GenesisHash(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.depositReads++
	return f.genesis, f.genesisErr
}

func (f *fakeChain) Check(_ context.Context, s chain.Setup) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case s.GenesisHash != "" && s.GenesisHash != f.genesis:
		return fmt.Errorf("%w: expected genesis hash %s, got %s", chain.ErrWrongCluster, s.GenesisHash, f.genesis)
	case s.Mint != f.mint:
		return fmt.Errorf("%w: %s is not a mint", chain.ErrWrongMint, s.Mint)
	case s.Treasury != f.treasury || f.usdc < s.NeedMicro || f.lamports < s.NeedLamports:
		return fmt.Errorf("%w: has %d, needs %d", chain.ErrUnderfunded, f.usdc, s.NeedMicro)
	}
	return nil
}

func (f *fakeChain) IsTokenAccount(_ context.Context, addr, mint chain.PublicKey) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return mint == f.mint && f.accounts[addr], nil
}

func (f *fakeChain) AccountExists(_ context.Context, pk chain.PublicKey) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accounts[pk], nil
}

func (f *fakeChain) CreateATA(_ context.Context, _ chain.PrivateKey, owner, mint chain.PublicKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.accounts[chain.ATA(owner, mint)] = true
	f.createdAccount = append(f.createdAccount, owner)
	return nil
}

func (f *fakeChain) LatestBlockhashAt(context.Context) (chain.Hash, uint64, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blockhashes++
	return chain.Hash(sha256.Sum256(fmt.Appendf(nil, "blockhash %d", f.blockhashes))), f.height + 150, f.slot, nil
}

func (f *fakeChain) BlockHeight(context.Context) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.height, nil
}

func (f *fakeChain) FirstAvailableSlot(context.Context) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.firstSlot, nil
}

func (f *fakeChain) Status(_ context.Context, sig chain.Signature) (chain.TxStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.depositReads++
	if f.confirmedOnly[sig] {
		return chain.TxStatus{Found: true, Confirmed: true}, nil
	}
	if _, ok := f.finalized[sig]; ok {
		return chain.TxStatus{Found: true, Confirmed: true, Finalized: true}, nil
	}
	e, ok := f.landed[sig]
	if !ok {
		return chain.TxStatus{}, nil
	}
	return chain.TxStatus{Found: true, Confirmed: true, Finalized: true, Err: e}, nil
}

func (f *fakeChain) Send(_ context.Context, raw []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sends++
	sig := signatureOf(raw)
	if _, ok := f.landed[sig]; ok {
		return nil // already processed
	}
	if f.dropSends {
		return nil
	}
	f.landed[sig] = ""
	if f.failOnChain > 0 {
		f.failOnChain--
		f.landed[sig] = `{"InstructionError":[1,{"Custom":1}]}`
	}
	f.slot++
	f.height++
	if f.loseAnswers > 0 {
		f.loseAnswers--
		return fmt.Errorf("%w: connection reset after the request was sent", chain.ErrSendFailed)
	}
	return nil
}

// WaitConfirmed answers at once: landed, or expired (time passes until the blockhash can
// no longer land).
func (f *fakeChain) WaitConfirmed(_ context.Context, sig chain.Signature, lastValid uint64) (chain.TxStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.landed[sig]; ok {
		return chain.TxStatus{Found: true, Confirmed: true, Err: e}, nil
	}
	f.height = max(f.height, lastValid+1)
	return chain.TxStatus{}, fmt.Errorf("%s: %w", sig, chain.ErrExpired)
}

func (f *fakeChain) Transaction(_ context.Context, sig chain.Signature) (*chain.TxFacts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.landed[sig]; !ok {
		return nil, chain.ErrNotFound
	}
	return &chain.TxFacts{Signature: sig, FeeLamports: 5000}, nil
}

func (f *fakeChain) FinalizedTransaction(_ context.Context, sig chain.Signature) (*chain.TxFacts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.depositReads++
	if tx, ok := f.finalized[sig]; ok {
		return tx, nil
	}
	return nil, fmt.Errorf("transaction %s: %w", sig, chain.ErrNotFound)
}

// prune forgets every transaction landed so far, as an RPC node that does not keep the
// whole history; unprune brings them back (an archival endpoint).
func (f *fakeChain) prune() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s, e := range f.landed {
		f.pruned[s] = e
	}
	clear(f.landed)
	f.firstSlot = f.slot + 1
}

func (f *fakeChain) unprune() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s, e := range f.pruned {
		f.landed[s] = e
	}
	clear(f.pruned)
	f.firstSlot = 0
}

// expire moves the block height past every blockhash issued so far.
func (f *fakeChain) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.height += 1000
}
