package solana

import (
	"errors"

	sol "github.com/gagliardetto/solana-go"
)

// The chain's own types, so that no other package of the module imports solana-go.
type (
	PublicKey  = sol.PublicKey
	PrivateKey = sol.PrivateKey
	Signature  = sol.Signature
	Hash       = sol.Hash
)

// ParsePublicKey reads a base58 public key.
func ParsePublicKey(s string) (PublicKey, error) { return sol.PublicKeyFromBase58(s) }

// ParseSignature reads a base58 transaction signature.
func ParseSignature(s string) (Signature, error) { return sol.SignatureFromBase58(s) }

// TransactionSignature reads a serialized transaction's first signature: the one the
// network knows it by.
func TransactionSignature(raw []byte) (Signature, error) {
	tx, err := sol.TransactionFromBytes(raw)
	if err != nil {
		return Signature{}, err
	}
	if len(tx.Signatures) == 0 {
		return Signature{}, errors.New("an unsigned transaction")
	}
	return tx.Signatures[0], nil
}
