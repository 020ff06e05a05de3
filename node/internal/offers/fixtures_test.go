package offers

import (
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// testCoordinatorKey signs the certificates of the test providers.
var testCoordinatorKey, testCoordinatorID = func() (crypto.PrivKey, peer.ID) {
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		panic(err)
	}
	id, _ := peer.IDFromPrivateKey(sk)
	return sk, id
}()

// testCertificate signs a certificate for provider, valid for 30 days from now.
func testCertificate(t testing.TB, coord crypto.PrivKey, provider peer.ID, gpus []protocol.CertifiedGPU, now time.Time) []byte {
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

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
