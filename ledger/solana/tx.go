package solana

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	sol "github.com/gagliardetto/solana-go"
)

// MaxTransactionSize is the largest signed transaction a cluster accepts, in bytes.
const MaxTransactionSize = 1232

// ATA returns owner's associated token account for mint under the classic SPL Token
// program (the program of USDC). See ATAFor for Token-2022 mints.
func ATA(owner, mint sol.PublicKey) sol.PublicKey {
	return ATAFor(owner, mint, sol.TokenProgramID)
}

// ATAFor returns owner's associated token account for mint under tokenProgram.
func ATAFor(owner, mint, tokenProgram sol.PublicKey) sol.PublicKey {
	addr, _, err := sol.FindProgramAddress(
		[][]byte{owner[:], tokenProgram[:], mint[:]},
		sol.SPLAssociatedTokenAccountProgramID,
	)
	if err != nil {
		// Unreachable in practice: some bump in 255..0 always gives an off-curve address.
		panic(fmt.Sprintf("associated token address: %v", err))
	}
	return addr
}

// createATAIdempotent is the Associated Token Account program's CreateIdempotent
// instruction: creates owner's account for mint (payer pays the rent) unless it exists.
func createATAIdempotent(payer, ata, owner, mint sol.PublicKey) sol.Instruction {
	return sol.NewInstruction(sol.SPLAssociatedTokenAccountProgramID, sol.AccountMetaSlice{
		sol.NewAccountMeta(payer, true, true),
		sol.NewAccountMeta(ata, true, false),
		sol.NewAccountMeta(owner, false, false),
		sol.NewAccountMeta(mint, false, false),
		sol.NewAccountMeta(sol.SystemProgramID, false, false),
		sol.NewAccountMeta(sol.TokenProgramID, false, false),
	}, []byte{1})
}

// transferChecked is the SPL Token TransferChecked instruction.
func transferChecked(source, mint, dest, authority sol.PublicKey, amount uint64, decimals uint8) sol.Instruction {
	data := make([]byte, 10)
	data[0] = 12
	binary.LittleEndian.PutUint64(data[1:], amount)
	data[9] = decimals
	return sol.NewInstruction(sol.TokenProgramID, sol.AccountMetaSlice{
		sol.NewAccountMeta(source, true, false),
		sol.NewAccountMeta(mint, false, false),
		sol.NewAccountMeta(dest, true, false),
		sol.NewAccountMeta(authority, false, true),
	}, data)
}

// memoInstruction is a Memo v2 instruction whose data is the text itself (solana-go's memo
// helper prepends a length byte, which would become part of the memo). signer, when not
// zero, is listed as a signer of the memo.
func memoInstruction(memo string, signer sol.PublicKey) sol.Instruction {
	var accounts sol.AccountMetaSlice
	if !signer.IsZero() {
		accounts = sol.AccountMetaSlice{sol.NewAccountMeta(signer, false, true)}
	}
	return sol.NewInstruction(sol.MemoProgramID, accounts, []byte(memo))
}

// Payment is one payout: Amount base units to Owner's associated token account, created
// first (paid by the treasury) when CreateATA is set.
type Payment struct {
	Owner     sol.PublicKey
	Amount    uint64
	CreateATA bool
}

func checkMemo(memo string) error {
	if !utf8.ValidString(memo) {
		return errors.New("memo is not valid UTF-8")
	}
	return nil
}

// payoutInstructions builds the instructions of a payout transaction; ataOf maps an owner
// to its associated token account for the mint.
func payoutInstructions(treasury, mint sol.PublicKey, decimals uint8, memo string, pays []Payment, ataOf func(sol.PublicKey) sol.PublicKey) []sol.Instruction {
	source := ataOf(treasury)
	ixs := make([]sol.Instruction, 0, 2*len(pays)+1)
	for _, p := range pays {
		dest := ataOf(p.Owner)
		if p.CreateATA {
			ixs = append(ixs, createATAIdempotent(treasury, dest, p.Owner, mint))
		}
		ixs = append(ixs, transferChecked(source, mint, dest, treasury, p.Amount, decimals))
	}
	if memo != "" {
		ixs = append(ixs, memoInstruction(memo, treasury))
	}
	return ixs
}

// signedSize is the size of the transaction once signed by its single signer.
func signedSize(tx *sol.Transaction) (int, error) {
	msg, err := tx.Message.MarshalBinary()
	if err != nil {
		return 0, err
	}
	n := int(tx.Message.Header.NumRequiredSignatures)
	return compactLen(n) + 64*n + len(msg), nil
}

func compactLen(n int) int {
	switch {
	case n < 0x80:
		return 1
	case n < 0x4000:
		return 2
	default:
		return 3
	}
}

func signWith(tx *sol.Transaction, keys ...sol.PrivateKey) ([]byte, sol.Signature, error) {
	_, err := tx.Sign(func(pk sol.PublicKey) *sol.PrivateKey {
		for i := range keys {
			if keys[i].PublicKey().Equals(pk) {
				return &keys[i]
			}
		}
		return nil
	})
	if err != nil {
		return nil, sol.Signature{}, fmt.Errorf("signing: %w", err)
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		return nil, sol.Signature{}, fmt.Errorf("encoding: %w", err)
	}
	if len(raw) > MaxTransactionSize {
		return nil, sol.Signature{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(raw), MaxTransactionSize)
	}
	return raw, tx.Signatures[0], nil
}

// PayoutTransaction builds and signs one legacy transaction paying every payment from the
// treasury's associated token account: for each payment an idempotent associated token
// account creation when CreateATA is set (the treasury pays the rent), then a
// TransferChecked to ATA(owner, mint) with the treasury as authority; then one memo
// instruction (omitted when memo is ""). The treasury pays the fee and signs. It returns
// ErrTooLarge when the signed transaction exceeds MaxTransactionSize (use SplitPayments).
func PayoutTransaction(blockhash sol.Hash, treasury sol.PrivateKey, mint sol.PublicKey, decimals uint8, memo string, pays []Payment) ([]byte, sol.Signature, error) {
	if len(pays) == 0 {
		return nil, sol.Signature{}, errors.New("payout: no payments")
	}
	if err := checkMemo(memo); err != nil {
		return nil, sol.Signature{}, fmt.Errorf("payout: %w", err)
	}
	payer := treasury.PublicKey()
	ixs := payoutInstructions(payer, mint, decimals, memo, pays, func(o sol.PublicKey) sol.PublicKey { return ATA(o, mint) })
	tx, err := sol.NewTransaction(ixs, blockhash, sol.TransactionPayer(payer))
	if err != nil {
		return nil, sol.Signature{}, fmt.Errorf("payout: %w", err)
	}
	if n, err := signedSize(tx); err == nil && n > MaxTransactionSize {
		return nil, sol.Signature{}, fmt.Errorf("payout of %d payments: %w: %d bytes, the limit is %d", len(pays), ErrTooLarge, n, MaxTransactionSize)
	}
	raw, sig, err := signWith(tx, treasury)
	if err != nil {
		return nil, sol.Signature{}, fmt.Errorf("payout: %w", err)
	}
	return raw, sig, nil
}

// sizing keys: stand-ins for the treasury and the mint when measuring. Distinct stand-ins
// give an upper bound: real keys can only coincide with others and shrink the transaction.
var (
	sizingTreasury = sol.PublicKeyFromBytes([]byte("gpunex payout sizing: treasury.."))
	sizingMint     = sol.PublicKeyFromBytes([]byte("gpunex payout sizing: mint......"))
)

// payoutSize measures the signed size of a payout transaction of pays.
func payoutSize(memo string, pays []Payment, ataOf func(sol.PublicKey) sol.PublicKey) (int, error) {
	ixs := payoutInstructions(sizingTreasury, sizingMint, 6, memo, pays, ataOf)
	tx, err := sol.NewTransaction(ixs, sol.Hash{}, sol.TransactionPayer(sizingTreasury))
	if err != nil {
		return 0, err
	}
	return signedSize(tx)
}

// SplitPayments splits pays, in order, into groups that each fit one PayoutTransaction
// with this memo (greedy, measuring real encoded sizes). A payment that does not fit even
// alone gets a group of its own (PayoutTransaction then returns ErrTooLarge).
func SplitPayments(memo string, pays []Payment) [][]Payment {
	atas := make(map[sol.PublicKey]sol.PublicKey)
	ataOf := func(o sol.PublicKey) sol.PublicKey {
		if a, ok := atas[o]; ok {
			return a
		}
		a := ATA(o, sizingMint)
		atas[o] = a
		return a
	}
	var groups [][]Payment
	start := 0
	for start < len(pays) {
		end := start + 1
		for end < len(pays) {
			n, err := payoutSize(memo, pays[start:end+1], ataOf)
			if err != nil || n > MaxTransactionSize {
				break
			}
			end++
		}
		groups = append(groups, append([]Payment(nil), pays[start:end]...))
		start = end
	}
	return groups
}

// DepositTransaction builds and signs a transfer of amount base units from from's
// associated token account to the treasury's (which must exist), with a memo; from pays
// the fee and signs.
func DepositTransaction(blockhash sol.Hash, from sol.PrivateKey, treasury sol.PublicKey, mint sol.PublicKey, decimals uint8, amount uint64, memo string) ([]byte, sol.Signature, error) {
	if err := checkMemo(memo); err != nil {
		return nil, sol.Signature{}, fmt.Errorf("deposit: %w", err)
	}
	payer := from.PublicKey()
	ixs := []sol.Instruction{transferChecked(ATA(payer, mint), mint, ATA(treasury, mint), payer, amount, decimals)}
	if memo != "" {
		ixs = append(ixs, memoInstruction(memo, payer))
	}
	tx, err := sol.NewTransaction(ixs, blockhash, sol.TransactionPayer(payer))
	if err != nil {
		return nil, sol.Signature{}, fmt.Errorf("deposit: %w", err)
	}
	raw, sig, err := signWith(tx, from)
	if err != nil {
		return nil, sol.Signature{}, fmt.Errorf("deposit: %w", err)
	}
	return raw, sig, nil
}
