// Package recordtest makes the signed records that tests of several packages need: keys and
// certificates of test coordinators.
package recordtest

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// NewKey returns a fresh Ed25519 key and its peer ID (for package-level test keys: it panics
// if the system has no randomness).
func NewKey() (crypto.PrivKey, peer.ID) {
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		panic(err)
	}
	id, _ := peer.IDFromPrivateKey(sk)
	return sk, id
}

// Certificate is a certificate signed by coord for provider's GPUs, valid for 30 days from
// now (issued a minute before).
func Certificate(t testing.TB, coord crypto.PrivKey, provider peer.ID, gpus []protocol.CertifiedGPU, now time.Time) []byte {
	t.Helper()
	cid, _ := peer.IDFromPrivateKey(coord)
	raw, err := protocol.Seal(protocol.KindCertificate, protocol.Certificate{
		Version: protocol.CertificateVersion, Coordinator: cid.String(), Provider: provider.String(), Serial: uint64(now.UnixNano()),
		Application: "0123456789ab", Tier: protocol.TierCommunity, GPUs: gpus,
		CommitmentEnd: now.AddDate(0, 1, 0), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.AddDate(0, 0, 30),
	}, coord)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
