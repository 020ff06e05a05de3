package ledger

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

func openTemp(t *testing.T, dir string) *Ledger {
	t.Helper()
	l, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newPeer(t *testing.T) peer.ID {
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPublicKey(pub)
	return id
}

func TestPricesSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	l := openTemp(t, dir)
	if err := l.Provider.SetPrice("h100-80gb", 2_100_000); err != nil {
		t.Fatal(err)
	}
	if err := l.Provider.SetPrice("L4-24GB", 450_000); err != nil {
		t.Fatal(err)
	}
	if err := l.Provider.SetPrice("L4-24GB", 0); err == nil {
		t.Fatal("zero price accepted")
	}
	l.Close()
	l = openTemp(t, dir)
	defer l.Close()
	p, err := l.Provider.Prices()
	if err != nil {
		t.Fatal(err)
	}
	if p["H100-80GB"] != 2_100_000 || p["L4-24GB"] != 450_000 || len(p) != 2 {
		t.Fatalf("prices after reopen: %v", p)
	}
}

func TestOfferSeqMonotonic(t *testing.T) {
	l, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now := time.UnixMilli(1_000_000)
	a, _ := l.Provider.NextOfferSeq(now)
	b, _ := l.Provider.NextOfferSeq(now)                 // same instant: still moves
	c, _ := l.Provider.NextOfferSeq(now.Add(-time.Hour)) // clock went back: still moves
	d, _ := l.Provider.NextOfferSeq(now.Add(time.Hour))  // clock jumps: follows it
	if !(a < b && b < c && c < d) || a != 1_000_000 || d != uint64(now.Add(time.Hour).UnixMilli()) {
		t.Fatalf("sequence not monotonic: %d %d %d %d", a, b, c, d)
	}
}

func TestSeenOffersKeepHighestAndExpire(t *testing.T) {
	l, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p1, p2 := newPeer(t), newPeer(t)
	now := time.Now()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Offers.SaveSeenOffers([]SeenOffer{{Provider: p1, Seq: 5, ExpiresAt: now.Add(time.Hour), Raw: []byte("five")}}))
	must(l.Offers.SaveSeenOffers([]SeenOffer{{Provider: p1, Seq: 4, ExpiresAt: now.Add(time.Hour), Raw: []byte("four")}})) // replay: ignored
	must(l.Offers.SaveSeenOffers([]SeenOffer{{Provider: p2, Seq: 1, ExpiresAt: now.Add(time.Minute), Raw: []byte("p2")}}))
	if s, _ := l.Offers.HighestOfferSeq(p1); s != 5 {
		t.Fatalf("highest seq = %d; want 5", s)
	}
	seen, err := l.Offers.SeenOffers(now)
	must(err)
	if len(seen) != 2 {
		t.Fatalf("seen %d offers; want 2", len(seen))
	}
	for _, s := range seen {
		if s.Provider == p1 && string(s.Raw) != "five" {
			t.Fatalf("older record replaced newer: %q", s.Raw)
		}
	}
	later := now.Add(2 * time.Minute)
	if seen, _ := l.Offers.SeenOffers(later); len(seen) != 1 {
		t.Fatalf("expired offer still listed: %d", len(seen))
	}
	n, err := l.Offers.PruneSeenOffers(later)
	must(err)
	if n != 1 {
		t.Fatalf("pruned %d; want 1", n)
	}
	if s, _ := l.Offers.HighestOfferSeq(p2); s != 0 {
		t.Fatal("pruned provider still has a sequence")
	}
}

// TestKill9 kills a process that is writing to the ledger, at random points, several times.
// After each crash the ledger opens, every sequence number the process reported as reserved
// is below the next one handed out (a provider never reuses a sequence after a crash, so
// renters never take its new offer for a replay), and every acknowledged price is there.
func TestKill9(t *testing.T) {
	if os.Getenv("GPUNEX_LEDGER_CHILD") != "" {
		ledgerChild(os.Getenv("GPUNEX_LEDGER_CHILD"))
		return
	}
	dir := t.TempDir()
	var lastAcked uint64
	for round := 0; round < 4; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKill9$")
		cmd.Env = append(os.Environ(), "GPUNEX_LEDGER_CHILD="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		lines := 0
		target := 50 + round*37
		for sc.Scan() {
			v, err := strconv.ParseUint(sc.Text(), 10, 64)
			if err != nil {
				continue
			}
			if v <= lastAcked {
				t.Fatalf("round %d: sequence %d handed out again (last acknowledged %d)", round, v, lastAcked)
			}
			lastAcked = v
			if lines++; lines == target {
				cmd.Process.Signal(syscall.SIGKILL)
				break
			}
		}
		cmd.Wait()
		if lines < target {
			t.Fatalf("round %d: child wrote only %d records before dying on its own", round, lines)
		}
		l := openTemp(t, dir)
		next, err := l.Provider.NextOfferSeq(time.UnixMilli(0))
		if err != nil {
			t.Fatal(err)
		}
		if next <= lastAcked {
			t.Fatalf("after kill -9: next sequence %d not above acknowledged %d", next, lastAcked)
		}
		lastAcked = next
		prices, err := l.Provider.Prices()
		if err != nil {
			t.Fatal(err)
		}
		if len(prices) == 0 {
			t.Fatal("acknowledged prices lost")
		}
		l.Close()
	}
}

func ledgerChild(dir string) {
	l, err := Open(Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	for i := 0; ; i++ {
		if err := l.Provider.SetPrice(fmt.Sprintf("M%d", i%5), protocol.MicroUSDC(i+1)); err != nil {
			os.Exit(4)
		}
		seq, err := l.Provider.NextOfferSeq(time.UnixMilli(0))
		if err != nil {
			os.Exit(5)
		}
		fmt.Println(seq) // acknowledged only once durable
	}
}

// TestConcurrentJobUpdates: updates of one job at once (a renter's metering loop and its
// log stream, say) all land: the one losing a conflict applies its change again on what
// the other wrote, and nobody gets "Transaction Conflict".
func TestConcurrentJobUpdates(t *testing.T) {
	l := openTemp(t, t.TempDir())
	if err := l.Jobs.PutJob(Job{ID: "j1", Side: "renter", State: JobRunning}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Jobs.UpdateJob("j1", func(j *Job) error { j.CheckpointSeconds++; return nil }); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	j, err := l.Jobs.GetJob("j1")
	if err != nil || j.CheckpointSeconds != 40 {
		t.Fatalf("after 40 concurrent increments: %d (%v)", j.CheckpointSeconds, err)
	}
}
