package reliability

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/protocol"
)

// TestBookPerCoordinator: two coordinators score one provider; each one's records replace
// only its own, a replay of one is refused, and a search asks for the score of the
// coordinator that certified the offer.
func TestBookPerCoordinator(t *testing.T) {
	aKey, a := recordtest.NewKey()
	bKey, b := recordtest.NewKey()
	_, prov := recordtest.NewKey()
	now := time.Now()
	book := NewBook(clock.System(), metrics.New(func() float64 { return 0 }, func() float64 { return 0 }), protocol.NewTrust(a, b))
	record := func(key crypto.PrivKey, by peer.ID, seq uint64, score int) []byte {
		raw, err := protocol.Seal(protocol.KindScore, protocol.ScoreRecord{Version: protocol.ScoreVersion, Coordinator: by.String(),
			Provider: prov.String(), Seq: seq, IssuedAt: now.Add(time.Duration(seq) * time.Millisecond), ExpiresAt: now.Add(time.Hour), Score: score}, key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, r := range [][]byte{record(aKey, a, 1, 90), record(bKey, b, 1, 40), record(aKey, a, 2, 91)} {
		if err := book.Take(r, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	if s := book.Score(prov, a); s == nil || s.Score != 91 {
		t.Fatalf("A's score: %+v", s)
	}
	if s := book.Score(prov, b); s == nil || s.Score != 40 {
		t.Fatalf("B's score, after A's newer record: %+v", s)
	}
	if err := book.Take(record(aKey, a, 1, 90), "gossip"); protocol.Reason(err) != "replay" {
		t.Fatalf("A's older record again: %v", err)
	}
	if s := book.Score(prov, ""); s == nil || s.Score != 91 {
		t.Fatalf("the newest of any coordinator: %+v", s)
	}
	if n := len(book.Scores()); n != 2 {
		t.Fatalf("%d records listed, want one per coordinator", n)
	}
}

// TestProviderBookKeepsItsOwn: a provider's book keeps its own score records only; the
// others' are checked (a forged one is refused, so gossip does not forward it) but not
// kept, and a score sync asking for some providers gets theirs only.
func TestProviderBookKeepsItsOwn(t *testing.T) {
	cKey, c := recordtest.NewKey()
	_, self := recordtest.NewKey()
	_, other := recordtest.NewKey()
	forgerKey, _ := recordtest.NewKey()
	now := time.Now()
	book := NewBook(clock.System(), metrics.New(func() float64 { return 0 }, func() float64 { return 0 }), protocol.NewTrust(c))
	record := func(key crypto.PrivKey, p peer.ID) []byte {
		raw, err := protocol.Seal(protocol.KindScore, protocol.ScoreRecord{Version: protocol.ScoreVersion, Coordinator: c.String(),
			Provider: p.String(), Seq: 1, IssuedAt: now, ExpiresAt: now.Add(time.Hour), Score: 80}, key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	// As a coordinator's book, it serves what a sync asks for.
	for _, p := range []peer.ID{self, other} {
		if err := book.Take(record(cKey, p), "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	if n, all := len(book.Records([]string{self.String()})), len(book.Records(nil)); n != 1 || all != 2 {
		t.Fatalf("a sync for one provider gets %d records, for all %d", n, all)
	}

	book = NewBook(clock.System(), metrics.New(func() float64 { return 0 }, func() float64 { return 0 }), protocol.NewTrust(c))
	book.KeepOnly(self)
	for _, p := range []peer.ID{self, other} {
		if err := book.Take(record(cKey, p), "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	if book.Score(self, c) == nil || book.Score(other, c) != nil || len(book.Records(nil)) != 1 {
		t.Fatal("a provider's book should keep its own score and no other")
	}
	if err := book.Take(record(forgerKey, other), "gossip"); err == nil {
		t.Fatal("a forged record of another provider was taken")
	}
}
