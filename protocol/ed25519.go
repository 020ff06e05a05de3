package protocol

import (
	"bytes"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Signature checks dominate the cost of accepting a record. curve25519-voi verifies
// standard Ed25519 signatures (the ones libp2p makes) faster than the standard library, and
// faster still with a public key expanded once. Nodes see the same providers again and
// again, so each key's expanded form and peer ID are kept in a small bounded cache.

const signerCacheSize = 8192

type signer struct {
	pub ed25519.PublicKey
	key *ed25519.ExpandedPublicKey
	id  peer.ID
	str string // id.String(), computed once
}

var signers = struct {
	sync.Mutex
	m map[string]*signer
}{m: make(map[string]*signer)}

// signerFor returns the expanded key and identity of a raw Ed25519 public key.
func signerFor(pub []byte) (*signer, error) {
	signers.Lock()
	s := signers.m[string(pub)]
	signers.Unlock()
	if s != nil {
		return s, nil
	}
	ek, err := ed25519.NewExpandedPublicKey(pub)
	if err != nil {
		return nil, err
	}
	pk, err := crypto.UnmarshalEd25519PublicKey(pub)
	if err != nil {
		return nil, err
	}
	id, err := peer.IDFromPublicKey(pk)
	if err != nil {
		return nil, err
	}
	s = &signer{pub: ed25519.PublicKey(bytes.Clone(pub)), key: ek, id: id, str: id.String()}
	signers.Lock()
	if len(signers.m) >= signerCacheSize {
		clear(signers.m) // crude but bounded; a full cache refills in one round of gossip
	}
	signers.m[string(pub)] = s
	signers.Unlock()
	return s, nil
}

func (s *signer) verify(msg, sig []byte) bool {
	return len(sig) == ed25519.SignatureSize && ed25519.VerifyExpanded(s.key, msg, sig)
}

// verifyBatch checks many signatures at once, which costs less per signature than one by
// one when they are valid; ok[i] says whether entry i verified.
func verifyBatch(items []*unverified) []bool {
	bv := ed25519.NewBatchVerifierWithCapacity(len(items))
	for _, u := range items {
		bv.AddWithOptions(u.signer.pub, u.signed, u.sig, &ed25519.Options{Verify: ed25519.VerifyOptionsDefault})
	}
	_, ok := bv.Verify(nil)
	return ok
}
