package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// TestRenterIndex: a renter's balance reads its own latest holds and deposits, newest
// first, also from a ledger written before the index existed; a renter cannot keep more
// than MaxOpenHolds holds open.
func TestRenterIndex(t *testing.T) {
	dir := t.TempDir()
	l := openTemp(t, dir)
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for i, r := range []string{"r1", "r2", "r1", "r1"} {
		at := now.Add(time.Duration(i) * time.Minute)
		l.Escrow.CreditDeposit(Deposit{Signature: "sig" + jobID(i), Renter: r, Amount: 10_000_000, CreditedAt: at})
		if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(i), Renter: r, Provider: "p", Amount: 1_000_000, IssuedAt: at, ExpiresAt: at.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		hs, err := l.Escrow.RenterHolds("r1", 2)
		if err != nil || len(hs) != 2 || hs[0].Job != jobID(3) || hs[1].Job != jobID(2) {
			t.Fatalf("%s: r1's two latest holds: %+v %v", when, hs, err)
		}
		ds, err := l.Escrow.RenterDeposits("r2", 10)
		if err != nil || len(ds) != 1 || ds[0].Signature != "sig"+jobID(1) {
			t.Fatalf("%s: r2's deposits: %+v %v", when, ds, err)
		}
		if a, _ := l.Escrow.GetAccount("r1"); a.OpenHolds != 3 {
			t.Fatalf("%s: r1 has %d open holds, not 3", when, a.OpenHolds)
		}
	}
	check("indexed as written")

	// A ledger from before the index: drop it, and the counts, and open again.
	l.kv.db.Update(func(txn *badger.Txn) error {
		for _, p := range []string{prefixRenterHold, prefixRenterDeposit} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(p)})
			var keys [][]byte
			for it.Rewind(); it.Valid(); it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			it.Close()
			for _, k := range keys {
				txn.Delete(k)
			}
		}
		a, _ := getAccount(txn, "r1")
		a.OpenHolds = 0
		putJSON(txn, prefixAccount+"r1", a)
		return txn.Delete([]byte(keyRenterIndexV1))
	})
	l.Close()
	l = openTemp(t, dir)
	defer l.Close()
	check("rebuilt at open")

	// Charged and released holds are no longer open; past the cap, no new hold.
	l.Escrow.ReleaseHold(jobID(0))
	if a, _ := l.Escrow.GetAccount("r1"); a.OpenHolds != 2 {
		t.Fatalf("after a release: %d open holds", a.OpenHolds)
	}
	l.Escrow.CreditDeposit(Deposit{Signature: "big", Renter: "r3", Amount: 100_000_000_000, CreditedAt: now})
	for i := range MaxOpenHolds {
		if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(1000 + i), Renter: "r3", Provider: "p", Amount: 1, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Escrow.PlaceHold(Hold{Job: jobID(5000), Renter: "r3", Provider: "p", Amount: 1, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, ErrTooManyHolds) {
		t.Fatalf("hold %d: %v", MaxOpenHolds+1, err)
	}
}
