package offers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// TestCatalogueSync: a node joining asks a peer for its revocations, then its live offers,
// and holds them after; a revoked provider's offer reaching it later is refused. A peer is
// served SyncsPerMinute syncs a minute.
func TestCatalogueSync(t *testing.T) {
	a, b := newWorld(t), newWorld(t)
	a.follows(t)
	a.peer.Handle(protocol.OfferSyncProtocol, a.cat.HandleSyncStream)
	a.peer.Handle(protocol.RevocationSyncProtocol, a.cat.HandleRevocationSync)
	live, revoked := a.certified(), a.certified()
	revokedOffer := a.offer(revoked, 1, 1_000_000, nil)
	for _, raw := range [][]byte{a.offer(live, 1, 1_000_000, nil), revokedOffer} {
		if _, _, err := a.book.Accept(raw, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.cat.TakeRevocation(a.revocation(testCoordinatorKey, revoked, 0), "gossip"); err != nil {
		t.Fatal(err)
	}
	b.connect(a)
	if !b.cat.SyncOffers(context.Background(), protocol.OfferSyncRequest{}) {
		t.Fatal("the sync found no peer answering")
	}
	if so, _ := b.book.Get(live.id); so == nil {
		t.Fatal("the live offer did not come by sync")
	}
	if len(b.trust.Revocations()) != 1 || testutil.ToFloat64(b.metrics.RecordsAccepted.WithLabelValues("revocation", "sync")) != 1 {
		t.Fatal("the revocation did not come by sync")
	}
	if _, _, err := b.book.Accept(revokedOffer, "gossip"); protocol.Reason(err) != "revoked" {
		t.Fatalf("the revoked provider's offer after the sync: %v", err)
	}
	if b.book.lastSynced().IsZero() {
		t.Fatal("the sync is not marked done")
	}
	// One sync took one of the peer's offer syncs; the rest of the minute's budget is
	// spent, and then the peer is refused.
	served := 0
	for range SyncsPerMinute {
		if _, _, err := b.cat.syncFrom(context.Background(), a.peer.ID, protocol.OfferSyncRequest{}); err == nil {
			served++
		}
	}
	if served != SyncsPerMinute-1 {
		t.Fatalf("%d more syncs served within the minute; want %d", served, SyncsPerMinute-1)
	}
	if n := testutil.ToFloat64(a.metrics.RecordsRejected.WithLabelValues("sync", "stream", "rate_limited")); n != 1 {
		t.Fatalf("syncs refused: %v", n)
	}
}

// follows makes the world's node follow offer gossip (all models, by the previous
// release's topic), as a renter or a coordinator does: it then answers syncs.
func (w *world) follows(t testing.TB) {
	t.Helper()
	if err := w.cat.FollowPrevious(); err != nil {
		t.Fatal(err)
	}
}

// TestSyncAnsweredByFollowers: only a node whose book follows the market answers a sync: a
// provider, which holds its own offer only, declines (its answer would pass a part of the
// market for all of it), and the joining node's sync is not done; an empty answer from a
// node that follows but is not a coordinator (a renter that joined moments ago) does not
// make it done either; the same empty answer from a coordinator (a market with no offer
// yet) does.
func TestSyncAnsweredByFollowers(t *testing.T) {
	prov, renter, joiner := newWorld(t), newWorld(t), newWorld(t)
	for _, w := range []*world{prov, renter} {
		w.peer.Handle(protocol.OfferSyncProtocol, w.cat.HandleSyncStream)
	}
	own := prov.certified()
	if _, _, err := prov.book.Accept(prov.offer(own, 1, 1_000_000, nil), "self"); err != nil {
		t.Fatal(err)
	}
	joiner.connect(prov)
	if _, _, err := joiner.cat.syncFrom(context.Background(), prov.peer.ID, protocol.OfferSyncRequest{}); err == nil {
		t.Fatal("a provider, which holds its own offer only, answered a sync of the market")
	}
	if joiner.cat.SyncOffers(context.Background(), protocol.OfferSyncRequest{}) {
		t.Fatal("a sync answered by a provider alone counts as done")
	}
	renter.follows(t)
	joiner.connect(renter)
	if joiner.cat.SyncOffers(context.Background(), protocol.OfferSyncRequest{}) {
		t.Fatal("an empty answer from a renter that just joined counts as done")
	}
	joiner.cat.boot = []peer.AddrInfo{{ID: renter.peer.ID}}
	if !joiner.cat.SyncOffers(context.Background(), protocol.OfferSyncRequest{}) {
		t.Fatal("an empty answer from a coordinator (no offer yet) does not count as done")
	}
}

// TestOfferStream: a renter's node that holds no offer of a provider asks the provider
// itself over the offer stream; the record it gets is checked like any other.
func TestOfferStream(t *testing.T) {
	prov, renter := newWorld(t), newWorld(t)
	pub := newPublisher(t, prov, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}})
	prov.peer.Handle(protocol.OfferProtocol, pub.HandleOfferStream)
	renter.connect(prov)
	id := protocol.OfferID(prov.peer.ID, "L4-24GB")
	if _, err := renter.cat.OfferRecord(context.Background(), id); err == nil {
		t.Fatal("an offer found before the provider published one")
	}
	if _, err := pub.SetPrice(context.Background(), "L4-24GB", 1_300_000); err != nil {
		t.Fatal(err)
	}
	so, err := renter.cat.OfferRecord(context.Background(), id)
	if err != nil || so.Offer.GPUs[0].PricePerGPUHour != 1_300_000 || so.Cert == nil {
		t.Fatalf("the record fetched from the provider: %v", err)
	}
	if n := testutil.ToFloat64(renter.metrics.RecordsAccepted.WithLabelValues("offer", "stream")); n != 1 {
		t.Fatalf("offers taken from the stream: %v", n)
	}
}

// TestFilteredSync: a sync asking for one model brings that model's offers only, and
// leaves the book cold for the rest; an asker of the previous release, which sends no
// request, gets every offer; a request past its limits or malformed is refused and counted
// before any sync slot is taken.
func TestFilteredSync(t *testing.T) {
	a, b := newWorld(t), newWorld(t)
	a.follows(t)
	a.peer.Handle(protocol.OfferSyncProtocol, a.cat.HandleSyncStream)
	l4, a100 := a.certified(), a.certified()
	a100.cert = testCertificate(t, testCoordinatorKey, a100.id, []protocol.CertifiedGPU{{Model: "A100-80GB", Count: 2}}, a.clock.Now())
	for _, raw := range [][]byte{a.offer(l4, 1, 1_000_000, nil), a.offer(a100, 1, 2_000_000, func(o *protocol.Offer) {
		o.GPUs = []protocol.OfferGPUs{{Model: "A100-80GB", Count: 2, VRAMGB: 80, PricePerGPUHour: 2_000_000}}
	})} {
		if _, _, err := a.book.Accept(raw, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	b.connect(a)
	if got, _, err := b.cat.syncFrom(context.Background(), a.peer.ID, protocol.OfferSyncRequest{Models: []string{"a100-80gb"}}); err != nil || got != 1 {
		t.Fatalf("a sync for the A100: %d new offers, %v", got, err)
	}
	if so, _ := b.book.Get(a100.id); so == nil {
		t.Fatal("the A100 offer did not come")
	}
	if so, _ := b.book.Get(l4.id); so != nil {
		t.Fatal("a sync for the A100 brought an L4 offer")
	}
	if b.cat.followsAll(protocol.OfferSyncRequest{Models: []string{"A100-80GB"}}) {
		t.Fatal("a sync of one model should leave the book of a node following every model cold")
	}

	// An asker of the previous release writes nothing and gets every offer.
	s, err := b.peer.OpenStream(context.Background(), a.peer.ID, protocol.OfferSyncProtocol)
	if err != nil {
		t.Fatal(err)
	}
	s.CloseWrite()
	n := 0
	if err := protocol.ReadSyncFrames(bufio.NewReader(s), func([]byte) { n++ }); err != nil || n != 2 {
		t.Fatalf("an old asker got %d offers, %v", n, err)
	}
	s.Close()

	// Past the limits, or not JSON: refused before a slot is taken, and counted.
	tooMany := protocol.OfferSyncRequest{}
	for i := range protocol.MaxOfferSyncFilter + 1 {
		tooMany.Models = append(tooMany.Models, fmt.Sprintf("M%d-1GB", i))
	}
	if _, _, err := b.cat.syncFrom(context.Background(), a.peer.ID, tooMany); err == nil {
		t.Fatal("a request naming too many models was served")
	}
	s, err = b.peer.OpenStream(context.Background(), a.peer.ID, protocol.OfferSyncProtocol)
	if err != nil {
		t.Fatal(err)
	}
	protocol.WriteFrame(s, []byte("not json"))
	s.CloseWrite()
	if _, err := io.ReadAll(s); err == nil {
		t.Fatal("a malformed request was answered")
	}
	for _, reason := range []string{"invalid", "malformed"} {
		if n := testutil.ToFloat64(a.metrics.RecordsRejected.WithLabelValues("sync", "stream", reason)); n != 1 {
			t.Fatalf("%s sync requests counted: %v", reason, n)
		}
	}
}

// TestWarmSearchDoesNotWaitForTheWalk: a renter whose book follows gossip answers a search
// from its book without waiting for a DHT walk that does not end; a provider the walk named
// before the warm budget passed is fetched all the same, and a later search shows it. A
// renter whose book is cold waits for the walk and its fetches, up to search_timeout.
func TestWarmSearchDoesNotWaitForTheWalk(t *testing.T) {
	prov, renter := newWorld(t), newWorld(t)
	pub := newPublisher(t, prov, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}})
	prov.peer.Handle(protocol.OfferProtocol, pub.HandleOfferStream)
	if _, err := pub.SetPrice(context.Background(), "L4-24GB", 1_300_000); err != nil {
		t.Fatal(err)
	}
	renter.connect(prov)
	for deadline := time.Now().Add(10 * time.Second); renter.peer.RoutingTableSize() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the provider never entered the renter's routing table")
		}
	}
	// A walk that names the provider at once, then never ends.
	renter.cat.findProviders = func(ctx context.Context, _ cid.Cid) <-chan peer.AddrInfo {
		ch := make(chan peer.AddrInfo)
		go func() {
			defer close(ch)
			select {
			case ch <- peer.AddrInfo{ID: prov.peer.ID, Addrs: prov.peer.Host.Addrs()}:
			case <-ctx.Done():
				return
			}
			<-ctx.Done()
		}()
		return ch
	}
	renter.cat.cfg.SearchTimeout.Duration = time.Hour // a walk that is waited for never ends
	renter.cat.cfg.WarmSearch.Duration = 50 * time.Millisecond
	if err := renter.cat.Follow([]string{"L4-24GB"}); err != nil {
		t.Fatal(err)
	}
	renter.book.markSynced(renter.clock.Now()) // warm: it follows gossip

	search := func() []api.OfferRow {
		t.Helper()
		got := make(chan []api.OfferRow, 1)
		go func() {
			rows, _ := renter.cat.Search(context.Background(), api.SearchFilter{Unbenchmarked: true})
			got <- rows
		}()
		select {
		case rows := <-got:
			return rows
		case <-time.After(30 * time.Second):
			t.Fatal("a warm search waited for a DHT walk that does not end")
			return nil
		}
	}
	search()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if rows := search(); len(rows) == 1 && rows[0].Provider == prov.peer.ID.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the offer the walk named was never fetched into the book")
		}
	}

	// Cold: the walk and its fetches are waited for, up to search_timeout; the offer is in
	// this very search.
	renter.book.Reset()
	renter.cat.cfg.SearchTimeout.Duration = 300 * time.Millisecond
	if rows := search(); len(rows) != 1 {
		t.Fatalf("a cold search: %d offers, want the provider's the walk named", len(rows))
	}
}

// heldScores is a score book that holds the given records, for serving syncs.
type heldScores [][]byte

func (h heldScores) Score(provider, by peer.ID) *protocol.SignedScore { return nil }
func (h heldScores) Records(providers []string) [][]byte              { return h }
func (h heldScores) Take(raw []byte, source string) error             { return nil }

// TestScoreSyncAnsweredByFollowers: a provider, which keeps its own score only, answers a
// score sync that asks for its own score, and declines one that asks for the market's
// (all providers, or others); a node that follows offers answers both.
func TestScoreSyncAnsweredByFollowers(t *testing.T) {
	prov, renter, joiner := newWorld(t), newWorld(t), newWorld(t)
	for _, w := range []*world{prov, renter} {
		w.cat.scores = heldScores{[]byte("a score record")}
		w.peer.Handle(protocol.ScoreSyncProtocol, w.cat.HandleScoreSync)
		joiner.connect(w)
	}
	renter.follows(t)
	ask := func(w *world, req protocol.ScoreSyncRequest) (int, error) {
		got := 0
		err := joiner.cat.readSync(context.Background(), w.peer.ID, protocol.ScoreSyncProtocol, req, protocol.KindScore, protocol.MaxSyncScores, protocol.MaxScoreSize,
			func([]byte) { got++ })
		return got, err
	}
	if got, err := ask(prov, protocol.ScoreSyncRequest{}); got != 0 || err == nil {
		t.Fatalf("a provider answered a sync of every score: %d records, %v", got, err)
	}
	if got, err := ask(prov, protocol.ScoreSyncRequest{Providers: []string{renter.peer.ID.String()}}); got != 0 || err == nil {
		t.Fatalf("a provider answered a sync of another provider's score: %d records, %v", got, err)
	}
	if got, err := ask(prov, protocol.ScoreSyncRequest{Providers: []string{prov.peer.ID.String()}}); got != 1 || err != nil {
		t.Fatalf("a provider asked for its own score: %d records, %v", got, err)
	}
	if got, err := ask(renter, protocol.ScoreSyncRequest{}); got != 1 || err != nil {
		t.Fatalf("a renter asked for every score: %d records, %v", got, err)
	}
}

// TestBusySyncWaitsForASlot: a sync that finds every slot taken waits for one (a burst of
// joins queues instead of each asker backing off for seconds and spending its budget on
// asking again), and is sent away only past syncSlotWait.
func TestBusySyncWaitsForASlot(t *testing.T) {
	a, b := newWorld(t), newWorld(t)
	a.follows(t)
	a.peer.Handle(protocol.OfferSyncProtocol, a.cat.HandleSyncStream)
	p := a.certified()
	if _, _, err := a.book.Accept(a.offer(p, 1, 1_000_000, nil), "gossip"); err != nil {
		t.Fatal(err)
	}
	b.connect(a)
	for range maxSyncServing { // every slot busy with other askers' syncs
		a.cat.offerSyncs.slots <- struct{}{}
	}
	go func() {
		time.Sleep(500 * time.Millisecond) // one of them ends
		<-a.cat.offerSyncs.slots
	}()
	if got, _, err := b.cat.syncFrom(context.Background(), a.peer.ID, protocol.OfferSyncRequest{}); err != nil || got != 1 {
		t.Fatalf("a sync that came while the peer was busy: %d offers, %v", got, err)
	}
	// Still busy past the wait: sent away, and the asker goes to its other peers.
	a.cat.offerSyncs.slots <- struct{}{} // the slot it freed, taken again
	start := time.Now()
	if got, _, err := b.cat.syncFrom(context.Background(), a.peer.ID, protocol.OfferSyncRequest{}); err == nil && got > 0 {
		t.Fatalf("a sync was served with every slot taken: %d offers", got)
	}
	if waited := time.Since(start); waited < syncSlotWait {
		t.Fatalf("sent away after %s, before the %s wait", waited, syncSlotWait)
	}
	served := testutil.ToFloat64(a.metrics.SyncsServed.WithLabelValues("offers", "served"))
	if busy := testutil.ToFloat64(a.metrics.SyncsServed.WithLabelValues("offers", "busy")); served != 1 || busy != 1 {
		t.Fatalf("the peer counted %v offer syncs served and %v sent away busy; want 1 and 1", served, busy)
	}
	// The other kinds have slots of their own: revocations (small, and asked for beside
	// the offers) are answered at once while every offer slot is taken.
	a.peer.Handle(protocol.RevocationSyncProtocol, a.cat.HandleRevocationSync)
	start = time.Now()
	if err := b.cat.syncRevocations(context.Background(), a.peer.ID); err != nil {
		t.Fatalf("a revocation sync while every offer slot was taken: %v", err)
	}
	if waited := time.Since(start); waited >= syncSlotWait {
		t.Fatalf("a revocation sync waited %s behind the offer syncs", waited)
	}
}

// TestWarmWhileGossipFlows: a renter's book is warm (a search answers from it after a short
// walk, without syncing) within 1.5 x republish of its last sync, and after it for as long as
// its gossip flowed without a gap since before that sync; after a gap, from the next sync,
// or once gossip has flowed for 1.5 x republish again. Before, a renter went cold 4.5
// minutes after its last sync, and a person's searches, minutes apart, each synced and
// walked the DHT to its end.
func TestWarmWhileGossipFlows(t *testing.T) {
	renter, coord, stranger := newWorld(t), newWorld(t), newWorld(t)
	renter.follows(t)
	coord.follows(t)
	stranger.follows(t)
	renter.cat.boot = []peer.AddrInfo{{ID: coord.peer.ID}}
	stale := renter.cat.staleAfter()
	t0 := renter.clock.Now()
	warmAt := func(after time.Duration, want bool) {
		t.Helper()
		if got := renter.cat.warm("", t0.Add(after)); got != want {
			t.Fatalf("after %s: warm %v, want %v", after, got, want)
		}
	}
	gossiping := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); renter.peer.GossipsWith(coord.peer.ID)[protocol.OffersTopic] != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gossiping with the coordinator: want %v", want)
			}
		}
	}
	check := func(after time.Duration) { renter.cat.checkGossip(t0.Add(after)) }

	// Alone, or gossiping with a stranger only: cold until it syncs, warm within stale of
	// the sync, cold after it.
	renter.connect(stranger)
	for deadline := time.Now().Add(5 * time.Second); renter.peer.GossipPeerCounts()[protocol.OffersTopic] == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stranger's subscription never reached the renter")
		}
	}
	check(0)
	check(stale)
	warmAt(stale, false)
	warmAt(0, false)
	renter.book.markSynced(t0)
	warmAt(stale, true)
	warmAt(stale+time.Second, false)

	// Gossiping with the coordinator since before the sync: warm as long as it lasts.
	renter.connect(coord)
	gossiping(true)
	check(time.Second)
	renter.book.markSynced(t0.Add(2 * time.Second))
	check(time.Minute)
	warmAt(time.Hour, true)

	// A gap: cold once the sync is older than stale, until gossip has flowed for stale again.
	// The coordinator's end may dial the renter back within milliseconds (its DHT learns
	// the renter's address from the stranger): close until a check falls in the gap.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		coord.peer.Host.Network().ClosePeer(renter.peer.ID)
		if !renter.peer.GossipsWith(coord.peer.ID)[protocol.OffersTopic] {
			if check(time.Hour); !renter.cat.warm("", t0.Add(time.Hour)) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no check saw the coordinator out of the renter's gossip")
		}
	}
	renter.connect(coord)
	gossiping(true)
	check(time.Hour + time.Minute)
	warmAt(time.Hour+time.Minute+stale-time.Second, false)
	warmAt(time.Hour+time.Minute+stale, true)

	// A book emptied (benchmarks force cold searches so) is cold whatever its gossip did.
	renter.book.Reset()
	warmAt(time.Hour+time.Minute+stale, false)
	check(time.Hour + 2*time.Minute)
	warmAt(time.Hour+2*time.Minute+stale, true)

	// A model followed since is cold until its topic has gossiped for stale too.
	if err := renter.cat.Follow([]string{"L4-24GB"}); err != nil {
		t.Fatal(err)
	}
	warmAt(2*time.Hour, false)
}

// TestColdSearchAnsweredByCoordinator: a cold search whose sync a coordinator answered
// gives the DHT walk the warm budget (the coordinator's answer is the market the walk
// would find) and shows the offers the sync brought; when only another peer answered (it
// may hold a part of the market), or the coordinator answered nothing (a book filling
// after a restart), the walk keeps the whole search budget.
func TestColdSearchAnsweredByCoordinator(t *testing.T) {
	for _, tc := range []struct {
		name        string
		coordinator bool
		offers      int // the answering book holds
		short       bool
	}{
		{"answered by a coordinator", true, 1, true},
		{"answered by another peer", false, 1, false},
		// A coordinator whose book is still filling after a restart answers nothing.
		{"answered empty by a coordinator", true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			market, renter := newWorld(t), newWorld(t)
			market.follows(t)
			renter.follows(t)
			market.peer.Handle(protocol.OfferSyncProtocol, market.cat.HandleSyncStream)
			prov := market.certified()
			if tc.offers > 0 {
				if _, _, err := market.book.Accept(market.offer(prov, 1, 1_000_000, nil), "gossip"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.coordinator {
				renter.cat.boot = []peer.AddrInfo{{ID: market.peer.ID}}
			}
			renter.connect(market)
			for deadline := time.Now().Add(10 * time.Second); renter.peer.RoutingTableSize() == 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the peer never entered the renter's routing table")
				}
			}
			renter.cat.cfg.SearchTimeout.Duration = time.Hour
			renter.cat.cfg.WarmSearch.Duration = 50 * time.Millisecond
			var budget atomic.Int64 // what the walk was given
			renter.cat.findProviders = func(ctx context.Context, _ cid.Cid) <-chan peer.AddrInfo {
				if dl, ok := ctx.Deadline(); ok {
					budget.Store(int64(time.Until(dl)))
				}
				ch := make(chan peer.AddrInfo)
				close(ch)
				return ch
			}
			rows, err := renter.cat.Search(context.Background(), api.SearchFilter{Model: "L4-24GB", Unbenchmarked: true})
			if err != nil || len(rows) != tc.offers || (tc.offers > 0 && rows[0].Provider != prov.id.String()) {
				t.Fatalf("the search: %d offers, %v; want the %d the sync brought", len(rows), err, tc.offers)
			}
			if short := time.Duration(budget.Load()) <= time.Second; short != tc.short {
				t.Fatalf("the walk was given %s; want the warm budget: %v", time.Duration(budget.Load()), tc.short)
			}
		})
	}
}

// TestSyncStopsCopiesOnceACoordinatorAnswered: a sync asks its coordinators and other peers
// at once; once a coordinator has answered whole, a peer still trickling its copy (slow, or
// stalling on purpose) has its stream reset, and the sync is done without waiting for it;
// the stop is not counted against the peer. Another coordinator still answering is not
// stopped: the first may have answered from a book still filling after its restart.
func TestSyncStopsCopiesOnceACoordinatorAnswered(t *testing.T) {
	coord, later, slow, renter := newWorld(t), newWorld(t), newWorld(t), newWorld(t)
	// The coordinator answers once the slow peer has started its answer; the other
	// coordinator once the slow peer's stream was reset.
	started, stopped := make(chan struct{}), make(chan struct{})
	answerAfter := func(w *world, after chan struct{}) {
		w.follows(t) // and serves no revocation sync: its offers alone stop the copies
		w.peer.Handle(protocol.OfferSyncProtocol, func(s network.Stream) {
			select {
			case <-after:
			case <-time.After(10 * time.Second):
			}
			w.cat.HandleSyncStream(s)
		})
	}
	answerAfter(coord, started)
	answerAfter(later, stopped)
	prov, other := coord.certified(), later.certified()
	if _, _, err := coord.book.Accept(coord.offer(prov, 1, 1_000_000, nil), "gossip"); err != nil {
		t.Fatal(err)
	}
	for _, raw := range [][]byte{later.offer(prov, 1, 1_000_000, nil), later.offer(other, 1, 1_000_000, nil)} {
		if _, _, err := later.book.Accept(raw, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	// The slow peer announces a 100-byte record and sends one byte of it every 100 ms: the
	// whole would take 10 s. It gives up after 8 s, and says whether its stream was reset.
	reset := make(chan bool, 1)
	slow.peer.Handle(protocol.OfferSyncProtocol, func(s network.Stream) {
		defer s.Close()
		if _, err := readSyncRequest(s); err != nil {
			reset <- false
			return
		}
		_, err := s.Write([]byte{100})
		close(started)
		for i := 0; err == nil && i < 80; i++ {
			time.Sleep(100 * time.Millisecond)
			_, err = s.Write([]byte{'x'})
		}
		close(stopped)
		reset <- err != nil
	})
	renter.cat.boot = []peer.AddrInfo{{ID: coord.peer.ID}, {ID: later.peer.ID}}
	renter.connect(coord)
	renter.connect(later)
	renter.connect(slow)
	if !renter.cat.SyncOffers(context.Background(), protocol.OfferSyncRequest{}) {
		t.Fatal("the coordinators' answers did not make the sync done")
	}
	waitStopped(t, reset, "offers")
	for _, p := range []provider{prov, other} {
		if so, _ := renter.book.Get(p.id); so == nil {
			t.Fatal("an offer of the coordinators' answers did not come by the sync: the later one was stopped")
		}
	}
	if n := testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues("offer", "sync", "malformed")); n != 0 {
		t.Fatalf("the copy the renter stopped was counted malformed (%v)", n)
	}
}

// TestSyncNotDoneByGarbage: records that fail their checks do not make a sync done, however
// well framed: a stranger answering first with garbage would otherwise leave the book warm,
// and searches without a sync, for 1.5 x republish.
func TestSyncNotDoneByGarbage(t *testing.T) {
	stranger, joiner := newWorld(t), newWorld(t)
	stranger.peer.Handle(protocol.OfferSyncProtocol, func(s network.Stream) {
		defer s.Close()
		if _, err := readSyncRequest(s); err == nil {
			s.Write(append([]byte{5}, "hello"...))
		}
	})
	joiner.follows(t)
	joiner.connect(stranger)
	if joiner.cat.SyncOffers(context.Background(), protocol.OfferSyncRequest{}) {
		t.Fatal("a stranger's garbage made the sync done")
	}
	if n := testutil.ToFloat64(joiner.metrics.RecordsRejected.WithLabelValues("offer", "sync", "malformed")); n != 1 {
		t.Fatalf("the garbage record counted as malformed %v times, want 1", n)
	}
}

// TestColdSearchSyncsWhatItSearches: a cold search for one model asks its peers for that
// model's offers only, and leaves the book warm for that model alone (the next search for
// it does not sync again); a cold search for every offer asks for them all, and leaves the
// book warm.
func TestColdSearchSyncsWhatItSearches(t *testing.T) {
	_, renter, _, a100 := twoModelMarket(t)
	for deadline := time.Now().Add(10 * time.Second); renter.peer.RoutingTableSize() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the coordinator never entered the renter's routing table")
		}
	}
	renter.cat.cfg.WarmSearch.Duration = 50 * time.Millisecond
	rows, err := renter.cat.Search(context.Background(), api.SearchFilter{Model: "L4-24GB", Unbenchmarked: true})
	if err != nil || len(rows) != 1 {
		t.Fatalf("the L4 search: %d offers, %v", len(rows), err)
	}
	if so, _ := renter.book.Get(a100.id); so != nil {
		t.Fatal("a cold search for L4 synced the A100 offers too")
	}
	if renter.cat.warm("", renter.clock.Now()) || renter.cat.warm("A100-80GB", renter.clock.Now()) {
		t.Fatal("a sync of one model made the book warm for other models")
	}
	synced := testutil.ToFloat64(renter.metrics.OfferSyncRecords)
	if rows, err := renter.cat.Search(context.Background(), api.SearchFilter{Model: "l4-24gb", Unbenchmarked: true}); err != nil || len(rows) != 1 {
		t.Fatalf("the L4 search again: %d offers, %v", len(rows), err)
	}
	if n := testutil.ToFloat64(renter.metrics.OfferSyncRecords); n != synced {
		t.Fatalf("a second search for the model just synced synced again (%v records)", n-synced)
	}
	rows, err = renter.cat.Search(context.Background(), api.SearchFilter{Unbenchmarked: true})
	if err != nil || len(rows) != 2 {
		t.Fatalf("the search of every offer: %d offers, %v; want both", len(rows), err)
	}
	if !renter.cat.warm("", renter.clock.Now()) {
		t.Fatal("a sync of every offer left the book cold")
	}
	// A model followed since came by neither gossip nor that sync.
	if err := renter.cat.Follow([]string{"H100-80GB"}); err != nil {
		t.Fatal(err)
	}
	if renter.cat.warm("", renter.clock.Now()) {
		t.Fatal("following a new model left the book warm for every model")
	}
}

// TestRevokedOfferFromASyncDropped: a node syncs revocations and offers side by side; an
// offer of a revoked provider from a peer that missed the revocation is gone from its book
// once the sync is over, whichever came first.
func TestRevokedOfferFromASyncDropped(t *testing.T) {
	coord, stale, joiner := newWorld(t), newWorld(t), newWorld(t)
	// The offers come first: the coordinator hands its revocations over once the stale
	// peer has answered the offer sync.
	offered := make(chan struct{})
	for _, w := range []*world{coord, stale} {
		w.follows(t)
		w.peer.Handle(protocol.RevocationSyncProtocol, w.cat.HandleRevocationSync)
	}
	coord.peer.Handle(protocol.OfferSyncProtocol, coord.cat.HandleSyncStream)
	coord.peer.Handle(protocol.RevocationSyncProtocol, func(s network.Stream) {
		select {
		case <-offered:
		case <-time.After(5 * time.Second):
		}
		coord.cat.HandleRevocationSync(s)
	})
	stale.peer.Handle(protocol.OfferSyncProtocol, func(s network.Stream) {
		stale.cat.HandleSyncStream(s)
		close(offered)
	})
	revoked, live := coord.certified(), coord.certified()
	for _, raw := range [][]byte{coord.offer(revoked, 1, 1_000_000, nil), coord.offer(live, 1, 1_000_000, nil)} {
		if _, _, err := stale.book.Accept(raw, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	if err := coord.cat.TakeRevocation(coord.revocation(testCoordinatorKey, revoked, 0), "gossip"); err != nil {
		t.Fatal(err)
	}
	joiner.follows(t)
	joiner.cat.boot = []peer.AddrInfo{{ID: coord.peer.ID}}
	joiner.connect(coord)
	joiner.connect(stale)
	if !joiner.cat.SyncOffers(context.Background(), protocol.OfferSyncRequest{}) {
		t.Fatal("the sync found no peer answering")
	}
	if so, _ := joiner.book.Get(revoked.id); so != nil {
		t.Fatal("the revoked provider's offer stayed in the book after the sync")
	}
	if so, _ := joiner.book.Get(live.id); so == nil {
		t.Fatal("the live offer did not come by the sync")
	}
}

// TestSearchSyncsBeforeTheRoutingTableFills: a node connected to its coordinator whose
// routing table is still empty (it joined moments ago) syncs at a cold search, and finds
// the coordinator's offers; before, it answered from its empty book.
func TestSearchSyncsBeforeTheRoutingTableFills(t *testing.T) {
	coord, renter := newWorld(t), newWorld(t)
	coord.follows(t)
	renter.follows(t)
	coord.peer.Handle(protocol.OfferSyncProtocol, coord.cat.HandleSyncStream)
	// The coordinator does not answer the DHT: the renter's routing table stays empty.
	coord.peer.Host.RemoveStreamHandler(libp2pprotocol.ID(protocol.DHTProtocolPrefix + "/kad/1.0.0"))
	prov := coord.certified()
	if _, _, err := coord.book.Accept(coord.offer(prov, 1, 1_000_000, nil), "gossip"); err != nil {
		t.Fatal(err)
	}
	renter.cat.boot = []peer.AddrInfo{{ID: coord.peer.ID}}
	renter.connect(coord)
	rows, err := renter.cat.Search(context.Background(), api.SearchFilter{Model: "L4-24GB", Unbenchmarked: true})
	if n := renter.peer.RoutingTableSize(); n != 0 {
		t.Fatalf("the routing table holds %d peers: the test needs it empty", n)
	}
	if err != nil || len(rows) != 1 {
		t.Fatalf("the search found %d offers, %v; want the coordinator's", len(rows), err)
	}
}

// TestSearchesOfSeveralModelsAfterAGap: a renter whose gossip had a gap searches four
// models within a minute, each search cold and syncing its model: every search is
// answered (none refused, none counted towards a ban), and revocations are asked for once,
// not at every search.
func TestSearchesOfSeveralModelsAfterAGap(t *testing.T) {
	coord, renter, _, _ := twoModelMarket(t)
	var revocationSyncs atomic.Int32
	coord.peer.Handle(protocol.RevocationSyncProtocol, func(s network.Stream) {
		revocationSyncs.Add(1)
		coord.cat.HandleRevocationSync(s)
	})
	renter.cat.cfg.WarmSearch.Duration = 50 * time.Millisecond
	for _, search := range []struct {
		model string
		want  int
	}{{"L4-24GB", 1}, {"A100-80GB", 1}, {"H100-80GB", 0}, {"L40S-48GB", 0}} {
		if renter.cat.warm(search.model, renter.clock.Now()) {
			t.Fatalf("the book is warm for %s before its search", search.model)
		}
		rows, err := renter.cat.Search(context.Background(), api.SearchFilter{Model: search.model, Unbenchmarked: true})
		if err != nil || len(rows) != search.want {
			t.Fatalf("the %s search: %d offers, %v; want %d", search.model, len(rows), err, search.want)
		}
		if !renter.cat.warm(search.model, renter.clock.Now()) {
			t.Fatalf("the %s search's sync was not answered", search.model)
		}
	}
	if n := testutil.ToFloat64(coord.metrics.RecordsRejected.WithLabelValues("sync", "stream", "rate_limited")); n != 0 {
		t.Fatalf("the coordinator refused %v of the renter's syncs", n)
	}
	if n := revocationSyncs.Load(); n != 1 {
		t.Fatalf("revocations were asked for %d times in four searches; want once", n)
	}
	// Past sideSyncFresh, a search's sync asks for them again.
	renter.clock.Advance(sideSyncFresh)
	if _, err := renter.cat.Search(context.Background(), api.SearchFilter{Model: "T4-16GB", Unbenchmarked: true}); err != nil {
		t.Fatal(err)
	}
	if n := revocationSyncs.Load(); n != 2 {
		t.Fatalf("revocations asked for %d times after %s; want twice", n, sideSyncFresh)
	}
}

// twoModelMarket is a coordinator that follows every model and serves offer syncs, holding
// an L4 offer and an A100 offer, and a renter following every model, connected to it and
// taking it for its bootstrap peer, whose book is empty.
func twoModelMarket(t *testing.T) (coord, renter *world, l4, a100 provider) {
	coord, renter = newWorld(t), newWorld(t)
	coord.follows(t)
	renter.follows(t)
	coord.peer.Handle(protocol.OfferSyncProtocol, coord.cat.HandleSyncStream)
	l4, a100 = coord.certified(), coord.certified()
	a100.cert = testCertificate(t, testCoordinatorKey, a100.id, []protocol.CertifiedGPU{{Model: "A100-80GB", Count: 2}}, coord.clock.Now())
	for _, raw := range [][]byte{
		coord.offer(l4, 1, 1_000_000, nil),
		coord.offer(a100, 1, 2_000_000, func(o *protocol.Offer) {
			o.GPUs = []protocol.OfferGPUs{{Model: "A100-80GB", Count: 2, VRAMGB: 80, PricePerGPUHour: 2_000_000}}
		}),
	} {
		if _, _, err := coord.book.Accept(raw, "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	renter.cat.boot = []peer.AddrInfo{{ID: coord.peer.ID}}
	renter.connect(coord)
	return coord, renter, l4, a100
}

// TestSyncStopsSlowSideCopies: once a coordinator answered the whole sync (offers,
// revocations), another peer's revocation stream still running is stopped too: a search
// waited for it to its 2 s bound after the coordinator had answered in 60 to 200 ms.
func TestSyncStopsSlowSideCopies(t *testing.T) {
	coord, slow, renter := newWorld(t), newWorld(t), newWorld(t)
	coord.follows(t)
	coord.peer.Handle(protocol.OfferSyncProtocol, coord.cat.HandleSyncStream)
	coord.peer.Handle(protocol.RevocationSyncProtocol, coord.cat.HandleRevocationSync)
	if _, _, err := coord.book.Accept(coord.offer(coord.certified(), 1, 1_000_000, nil), "gossip"); err != nil {
		t.Fatal(err)
	}
	// The slow peer announces a 100-byte revocation and sends one byte of it every 100 ms
	// (8 s in all), and says whether its stream was reset.
	reset := make(chan bool, 1)
	slow.peer.Handle(protocol.RevocationSyncProtocol, func(s network.Stream) {
		defer s.Close()
		_, err := s.Write([]byte{100})
		for i := 0; err == nil && i < 80; i++ {
			time.Sleep(100 * time.Millisecond)
			_, err = s.Write([]byte{'x'})
		}
		reset <- err != nil
	})
	renter.cat.boot = []peer.AddrInfo{{ID: coord.peer.ID}}
	renter.connect(coord)
	renter.connect(slow)
	if !renter.cat.SyncOffers(context.Background(), protocol.OfferSyncRequest{}) {
		t.Fatal("the coordinator's answer did not make the sync done")
	}
	waitStopped(t, reset, "revocations")
	if n := testutil.ToFloat64(renter.metrics.RecordsRejected.WithLabelValues("revocation", "sync", "malformed")); n != 0 {
		t.Fatalf("the stopped copy was counted malformed (%v)", n)
	}
}

// TestStrangerDoesNotStartTheSideSkip: a search skips revocations within 30 s of a sync in
// which a coordinator brought them, and only then: a stranger's empty revocation answer,
// when the coordinator's failed, must not hide a revocation lost in a gap of the gossip
// from the next searches.
func TestStrangerDoesNotStartTheSideSkip(t *testing.T) {
	coord, renter, _, _ := twoModelMarket(t)
	stranger := newWorld(t)
	stranger.peer.Handle(protocol.RevocationSyncProtocol, stranger.cat.HandleRevocationSync) // none held: an empty answer
	var refused atomic.Int32
	coord.peer.Handle(protocol.RevocationSyncProtocol, func(s network.Stream) {
		refused.Add(1) // busy, say
		s.Reset()
	})
	renter.connect(stranger)
	renter.cat.cfg.WarmSearch.Duration = 50 * time.Millisecond
	for _, model := range []string{"L4-24GB", "A100-80GB"} {
		if rows, err := renter.cat.Search(context.Background(), api.SearchFilter{Model: model, Unbenchmarked: true}); err != nil || len(rows) != 1 {
			t.Fatalf("the %s search: %d offers, %v", model, len(rows), err)
		}
	}
	if n := refused.Load(); n != 2 {
		t.Fatalf("the coordinator was asked for its revocations %d times in two searches; want at each (its first answer failed)", n)
	}
}

// waitStopped fails the test unless a slow peer, asked for what (offers, revocations),
// reports on reset that the asker reset its stream before the whole answer.
func waitStopped(t *testing.T, reset chan bool, what string) {
	t.Helper()
	select {
	case wasReset := <-reset:
		if !wasReset {
			t.Fatalf("the sync waited for the slow peer's whole %s: its stream was never reset", what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the slow peer was never asked for its %s", what)
	}
}

// TestJoinSyncTraced: a join sync asks for revocations and scores at once and for the
// offers only once the model catalogues came (ready), and the node keeps it with the
// traces of its coordinator's streams (the scale harness's account of where a new renter's
// time to its scores went): each stream opened, brought its records and ended, in that
// order, and its records are counted.
func TestJoinSyncTraced(t *testing.T) {
	coord, renter, _, _ := twoModelMarket(t)
	coord.cat.scores, renter.cat.scores = heldScores{[]byte("a score record")}, heldScores{}
	coord.peer.Handle(protocol.ScoreSyncProtocol, coord.cat.HandleScoreSync)
	coord.peer.Handle(protocol.RevocationSyncProtocol, coord.cat.HandleRevocationSync)
	ready, answered := make(chan struct{}), make(chan bool)
	go func() {
		ok, _ := renter.cat.SyncJoined(context.Background(), ready, true)
		answered <- ok
	}()
	// The scores come while the catalogues are still awaited; the offers wait for them.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if j := renter.cat.JoinSyncs(); len(j) == 1 && j[0].Coordinator[protocol.KindScore].Ended() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the join's scores did not come before the model catalogues")
		}
	}
	if j := renter.cat.JoinSyncs()[0]; j.Coordinator[protocol.KindOffer].Opened() != 0 || len(renter.book.Live(renter.clock.Now())) != 0 {
		t.Fatalf("the offers were asked for before the model catalogues came: %s", j.Coordinator[protocol.KindOffer])
	}
	close(ready)
	if !<-answered {
		t.Fatal("the join sync was not answered")
	}
	joins := renter.cat.JoinSyncs()
	if len(joins) != 1 || !joins[0].Answered || joins[0].Took <= 0 {
		t.Fatalf("join syncs kept: %+v; want one, answered, timed", joins)
	}
	for kind, want := range map[protocol.Kind]int64{protocol.KindOffer: 2, protocol.KindScore: 1, protocol.KindRevocation: 0} {
		tr := joins[0].Coordinator[kind]
		if tr.Records() != want || tr.Opened() <= 0 || tr.Ended() < tr.Opened() || tr.Ended() > joins[0].Took {
			t.Fatalf("the coordinator's %s stream: %s; want %d records, opened, then ended within the sync's %s", kind, tr, want, joins[0].Took)
		}
		if want > 0 && (tr.First() < tr.Opened() || tr.First() > tr.Ended()) {
			t.Fatalf("the coordinator's %s stream: %s; its first record outside the stream's life", kind, tr)
		}
	}
}

// TestSyncStreamGivenUpOnlyWhenStalled: a sync's answer that keeps bringing records is read
// to its end however long it takes in all (a score answer of 10,000 providers over a slow
// link; the scale harness's join score syncs were cut at 10 s while still reading), and
// one that stops bringing records is given up after syncStreamIdle, counted as stalled,
// keeping what came.
func TestSyncStreamGivenUpOnlyWhenStalled(t *testing.T) {
	peer, asker := newWorld(t), newWorld(t)
	asker.cat.streamIdle = 500 * time.Millisecond
	// The peer sends records, one every 100 ms, then stalls for 2 s before the rest.
	serve := func(proto string, records int, stallAfter int) {
		peer.peer.Handle(proto, func(s network.Stream) {
			defer s.Close()
			for i := range records {
				if i == stallAfter {
					time.Sleep(2 * time.Second)
				}
				time.Sleep(100 * time.Millisecond)
				if err := protocol.WriteFrame(s, []byte(fmt.Sprintf("record %d", i))); err != nil {
					return
				}
			}
		})
	}
	asker.connect(peer)
	read := func(proto string) (int, error) {
		got := 0
		err := asker.cat.readSync(context.Background(), peer.peer.ID, proto, nil, protocol.KindScore, 100, 100, func([]byte) { got++ })
		return got, err
	}
	serve("/test/steady", 10, -1)
	if got, err := read("/test/steady"); got != 10 || err != nil {
		t.Fatalf("an answer bringing a record every 100 ms for 1 s, past the 500 ms idle bound: %d records of 10, %v", got, err)
	}
	serve("/test/stalls", 10, 3)
	start := time.Now()
	got, err := read("/test/stalls")
	if got != 3 || err == nil {
		t.Fatalf("an answer that stalled after 3 records: %d records, %v; want the 3, then given up", got, err)
	}
	if took := time.Since(start); took >= 2*time.Second {
		t.Fatalf("a stalled answer was given up after %s, once its 2 s stall was over; want after %s of silence", took, asker.cat.streamIdle)
	}
	if n := testutil.ToFloat64(asker.metrics.RecordsRejected.WithLabelValues(string(protocol.KindScore), "sync", "stalled")); n != 1 {
		t.Fatalf("stalled answers counted: %v; want 1", n)
	}
	// An offer sync's answer that stalls, the same.
	peer.peer.Handle(protocol.OfferSyncProtocol, func(s network.Stream) {
		defer s.Close()
		protocol.WriteFrame(s, []byte("an offer"))
		time.Sleep(2 * time.Second)
	})
	start = time.Now()
	if _, _, err := asker.cat.syncFrom(context.Background(), peer.peer.ID, protocol.OfferSyncRequest{}); err == nil || time.Since(start) >= 2*time.Second {
		t.Fatalf("a stalled offer sync answer ended after %s with %v; want given up after %s of silence", time.Since(start), err, asker.cat.streamIdle)
	}
	if n := testutil.ToFloat64(asker.metrics.RecordsRejected.WithLabelValues(string(protocol.KindOffer), "sync", "stalled")); n != 1 {
		t.Fatalf("stalled offer sync answers counted: %v; want 1", n)
	}
	// A bound of this node's own (a search's) that ends the answer is not the peer's stall.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := asker.cat.syncFrom(ctx, peer.peer.ID, protocol.OfferSyncRequest{}); err == nil {
		t.Fatal("an offer sync answer outlived its context")
	}
	if n := testutil.ToFloat64(asker.metrics.RecordsRejected.WithLabelValues(string(protocol.KindOffer), "sync", "stalled")); n != 1 {
		t.Fatalf("stalled offer sync answers counted after this node's own bound: %v; want still 1", n)
	}
}

// TestOneNetworkHoldsHalfTheSlots: the syncs of one network (answered, or waiting for a
// slot) hold half a kind's slots at most: a host that asks and does not read, whose answers
// wait on it until their deadline, would otherwise hold them all within its budget, and
// every other asker would be sent away busy. Another network is still served.
func TestOneNetworkHoldsHalfTheSlots(t *testing.T) {
	coord := newWorld(t)
	coord.follows(t)
	coord.peer.Handle(protocol.OfferSyncProtocol, coord.cat.HandleSyncStream)
	if _, _, err := coord.book.Accept(coord.offer(coord.certified(), 1, 1_000_000, nil), "gossip"); err != nil {
		t.Fatal(err)
	}
	greedy, other := newWorldAt(t, "127.0.0.2"), newWorldAt(t, "127.0.0.3")
	greedy.connect(coord)
	other.connect(coord)
	// The greedy host's network already has answers being written to it, as many as its
	// share.
	for range maxSyncHeld {
		if !coord.cat.offerSyncs.hold("127.0.0.2") {
			t.Fatal("a network was refused a slot before its share")
		}
	}
	if got, _, err := greedy.cat.syncFrom(context.Background(), coord.peer.ID, protocol.OfferSyncRequest{}); err == nil && got > 0 {
		t.Fatalf("a network past its share of the slots was served: %d offers", got)
	}
	if busy := testutil.ToFloat64(coord.metrics.SyncsServed.WithLabelValues("offers", "busy")); busy != 1 {
		t.Fatalf("syncs sent away busy: %v; want 1", busy)
	}
	if got, _, err := other.cat.syncFrom(context.Background(), coord.peer.ID, protocol.OfferSyncRequest{}); err != nil || got != 1 {
		t.Fatalf("another network, with slots free, was not served: %d offers, %v", got, err)
	}
	coord.cat.offerSyncs.unhold("127.0.0.2") // one of its answers ends
	if got, _, err := greedy.cat.syncFrom(context.Background(), coord.peer.ID, protocol.OfferSyncRequest{}); err != nil || got != 1 {
		t.Fatalf("the network, back within its share, was not served: %d offers, %v", got, err)
	}
	// Every sync served or refused gave its hold back: only the one held by hand is left.
	coord.cat.offerSyncs.mu.Lock()
	held := maps.Clone(coord.cat.offerSyncs.held)
	coord.cat.offerSyncs.mu.Unlock()
	if !maps.Equal(held, map[string]int{"127.0.0.2": 1}) {
		t.Fatalf("slots held by network after the syncs ended: %v; want only the one held by hand", held)
	}
}

// TestJoinAskedAgainForWhatLacked: a join whose scores did not come is asked again for them
// alone: the offers that came (the largest answer by far) are not asked for again.
func TestJoinAskedAgainForWhatLacked(t *testing.T) {
	coord, renter, _, _ := twoModelMarket(t)
	coord.cat.scores, renter.cat.scores = heldScores{[]byte("a score record")}, heldScores{}
	coord.peer.Handle(protocol.RevocationSyncProtocol, coord.cat.HandleRevocationSync)
	// The coordinator serves no score sync yet: the join's scores fail.
	answered, offersCame := renter.cat.SyncJoined(context.Background(), nil, true)
	if answered || !offersCame || len(renter.book.Live(renter.clock.Now())) != 2 {
		t.Fatalf("a join without its scores: answered %v, offers came %v (%d held); want not answered, the 2 offers in",
			answered, offersCame, len(renter.book.Live(renter.clock.Now())))
	}
	// Asked again without offers, an empty score answer from a peer that is not a
	// coordinator (a renter that joined moments ago) does not make the join done.
	newcomer := newWorld(t)
	newcomer.follows(t)
	newcomer.cat.scores = heldScores{}
	newcomer.peer.Handle(protocol.ScoreSyncProtocol, newcomer.cat.HandleScoreSync)
	renter.connect(newcomer)
	if answered, _ := renter.cat.SyncJoined(context.Background(), nil, false); answered {
		t.Fatal("a join asked again was done by a newcomer's empty score answer")
	}
	coord.peer.Handle(protocol.ScoreSyncProtocol, coord.cat.HandleScoreSync)
	if answered, _ := renter.cat.SyncJoined(context.Background(), nil, false); !answered {
		t.Fatal("the join asked again for its scores was not answered")
	}
	offerSyncs := testutil.ToFloat64(coord.metrics.SyncsServed.WithLabelValues("offers", "served"))
	scoreSyncs := testutil.ToFloat64(coord.metrics.SyncsServed.WithLabelValues("scores", "served"))
	if offerSyncs != 1 || scoreSyncs != 1 {
		t.Fatalf("the coordinator served %v offer syncs and %v score syncs; want the offers once, then the scores", offerSyncs, scoreSyncs)
	}
}
