package models

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// The book is built from its Deps: an in-memory ledger, a fake clock, catalogues signed with
// test coordinator keys, and peers on loopback for the sync stream.

var (
	coordKey, coordID     = recordtest.NewKey()
	strangerKey, strangID = recordtest.NewKey()
	t0                    = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type testBook struct {
	*Book
	ledger  *ledger.Ledger
	clock   *clock.Fake
	metrics *metrics.Metrics
}

func newTestBook(t *testing.T, l *ledger.Ledger, clk *clock.Fake, p *p2p.Peer, trusted ...peer.ID) *testBook {
	t.Helper()
	if l == nil {
		var err error
		if l, err = ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	if clk == nil {
		clk = clock.NewFake(t0)
	}
	m := metrics.New(nil, nil)
	return &testBook{Book: New(Deps{Base: subsystem.Base{Peer: p, Clock: clk, Log: quietLogger(), Metrics: m}, Models: l.Models, Serials: l.Serials, Trusted: trusted}), ledger: l, clock: clk, metrics: m}
}

// catalogue signs a catalogue of seq issued at, with the first catalogue's models and, when
// extra is set, one more model.
func catalogue(t *testing.T, sk crypto.PrivKey, seq uint64, at time.Time, extra string) []byte {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(sk)
	models := append([]protocol.ModelEntry(nil), protocol.FirstModels().Models...)
	if extra != "" {
		models = append(models, protocol.ModelEntry{Model: extra, Aliases: []string{"B200"}, VRAMGB: 192, FP32TFLOPS: 80, TensorTFLOPS: 2250, MemBandwidth: 8000})
		protocol.SortModels(models)
	}
	raw, err := protocol.Seal(protocol.KindModelCatalogue, protocol.ModelCatalogue{Version: protocol.ModelsVersion, Coordinator: id.String(),
		Seq: seq, IssuedAt: at.UTC(), Models: models}, sk)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (b *testBook) rejected(source, reason string) float64 {
	return testutil.ToFloat64(b.metrics.RecordsRejected.WithLabelValues(string(protocol.KindModelCatalogue), source, reason))
}

// TestBookTrustsItsCoordinatorsOnly: a trusted coordinator's newer catalogue becomes its
// current one (the hooks hear of the change from the first catalogue); a stranger's is
// refused as untrusted and ignored by gossip; the catalogue held, sent again, is a repeat.
func TestBookTrustsItsCoordinatorsOnly(t *testing.T) {
	b := newTestBook(t, nil, nil, nil, coordID)
	var changes []string
	b.OnChange(func(c peer.ID, old, cur *protocol.ModelCatalogue) {
		changes = append(changes, c.String()+":"+string(rune('0'+old.Seq))+"->"+string(rune('0'+cur.Seq)))
	})
	if b.Current(coordID).Seq != 0 || b.Latest(coordID) != nil {
		t.Fatal("a book with no catalogue does not answer with the first one")
	}
	raw := catalogue(t, coordKey, 1, t0, "B200-192GB")
	if err := b.Take(raw, "gossip"); err != nil {
		t.Fatal(err)
	}
	if cur := b.Current(coordID); cur.Seq != 1 || !has(cur, "B200-192GB") {
		t.Fatalf("current after the first catalogue: seq %d", cur.Seq)
	}
	if len(changes) != 1 || changes[0] != coordID.String()+":0->1" {
		t.Fatalf("changes heard: %q", changes)
	}
	if v := b.Validate(context.Background(), coordID, raw); v != p2p.Repeat {
		t.Fatalf("the catalogue held, gossiped again: verdict %v", v)
	}
	foreign := catalogue(t, strangerKey, 5, t0, "")
	if err := b.Take(foreign, "gossip"); protocol.Reason(err) != "untrusted" || b.Latest(strangID) != nil {
		t.Fatalf("a stranger's catalogue: %v", err)
	}
	if v := b.Validate(context.Background(), strangID, foreign); v != p2p.Ignore {
		t.Fatalf("a stranger's catalogue, gossiped: verdict %v", v)
	}
	if n := b.rejected("gossip", "untrusted"); n != 2 {
		t.Fatalf("untrusted catalogues counted: %v", n)
	}
	garbage := append([]byte(nil), raw...)
	garbage[len(garbage)-1] ^= 1
	if v := b.Validate(context.Background(), coordID, garbage); v != p2p.Reject {
		t.Fatalf("a forged catalogue: verdict %v", v)
	}
	if len(changes) != 1 {
		t.Fatalf("changes heard: %q", changes)
	}
}

// TestBookRefusesEquivocation: a second catalogue of a sequence held, with other contents,
// is a replay (counted) and the first stays current.
func TestBookRefusesEquivocation(t *testing.T) {
	b := newTestBook(t, nil, nil, nil, coordID)
	if err := b.Take(catalogue(t, coordKey, 7, t0, ""), "gossip"); err != nil {
		t.Fatal(err)
	}
	err := b.Take(catalogue(t, coordKey, 7, t0, "B200-192GB"), "gossip")
	if !errors.Is(err, protocol.ErrReplay) || errors.Is(err, ErrHeld) {
		t.Fatalf("another catalogue of seq 7: %v", err)
	}
	if has(b.Current(coordID), "B200-192GB") || b.rejected("gossip", "replay") != 1 {
		t.Fatal("the equivocating catalogue replaced the one held, or went uncounted")
	}
}

// TestBookKeepsWhatAttestationsName: an older catalogue that arrives late never becomes
// current; it is kept, for Lookup, while its successor is younger than
// protocol.MaxAttestationAge, and refused after. The book keeps at most
// ledger.KeptModelCatalogues of a coordinator, the newest, across a restart; Lookup finds a
// catalogue by its sequence, seq 0 being the first.
func TestBookKeepsWhatAttestationsName(t *testing.T) {
	b := newTestBook(t, nil, nil, nil, coordID)
	var changes int
	b.OnChange(func(peer.ID, *protocol.ModelCatalogue, *protocol.ModelCatalogue) { changes++ })
	if err := b.Take(catalogue(t, coordKey, 10, t0, "B200-192GB"), "gossip"); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(catalogue(t, coordKey, 9, t0.Add(-time.Hour), ""), "sync"); err != nil {
		t.Fatal(err)
	}
	if b.Current(coordID).Seq != 10 || changes != 1 {
		t.Fatalf("an older catalogue became current (seq %d, %d changes)", b.Current(coordID).Seq, changes)
	}
	if c := b.Lookup(coordID, 9); c == nil || c.Seq != 9 {
		t.Fatal("the older catalogue an attestation may name is not found")
	}
	if c := b.Lookup(coordID, 0); c == nil || c.Seq != 0 || len(c.Models) != len(protocol.FirstModels().Models) {
		t.Fatal("seq 0 is not the first catalogue")
	}
	b.clock.Advance(protocol.MaxAttestationAge)
	if err := b.Take(catalogue(t, coordKey, 8, t0.Add(-2*time.Hour), ""), "sync"); !errors.Is(err, protocol.ErrReplay) {
		t.Fatalf("a catalogue replaced 8 days ago: %v", err)
	}

	// Many catalogues in a day: the newest KeptModelCatalogues are kept, across a restart.
	for i := range ledger.KeptModelCatalogues + 6 {
		b.clock.Advance(time.Minute)
		if err := b.Take(catalogue(t, coordKey, uint64(100+i), b.clock.Now(), ""), "gossip"); err != nil {
			t.Fatal(err)
		}
	}
	last := uint64(100 + ledger.KeptModelCatalogues + 5)
	oldest := last - ledger.KeptModelCatalogues + 1
	if b.Lookup(coordID, oldest) == nil || b.Lookup(coordID, oldest-1) != nil || b.Lookup(coordID, 10) != nil {
		t.Fatalf("after %d catalogues: not the newest %d kept", ledger.KeptModelCatalogues+6, ledger.KeptModelCatalogues)
	}
	again := newTestBook(t, b.ledger, b.clock, nil, coordID)
	if again.Current(coordID).Seq != last || again.Lookup(coordID, oldest) == nil || again.Lookup(coordID, oldest-1) != nil {
		t.Fatal("the catalogues kept differ after a restart")
	}
	// A coordinator no longer trusted: its catalogues stay stored but count no more.
	if untrusted := newTestBook(t, b.ledger, b.clock, nil); untrusted.Latest(coordID) != nil {
		t.Fatal("a catalogue of a coordinator no longer trusted is used")
	}
}

// TestEdit: a coordinator's edit is checked, sorted, signed under a sequence at least the
// time in milliseconds and above the current one, and becomes its current catalogue; an
// invalid edit changes nothing.
func TestEdit(t *testing.T) {
	b := newTestBook(t, nil, nil, &p2p.Peer{ID: coordID, Key: coordKey}, coordID)
	add := func(models []protocol.ModelEntry) ([]protocol.ModelEntry, error) {
		return append(models, protocol.ModelEntry{Model: "B200-192GB", Aliases: []string{"B200"}, VRAMGB: 192, FP32TFLOPS: 80, TensorTFLOPS: 2250, MemBandwidth: 8000}), nil
	}
	c, err := b.Edit(context.Background(), add)
	if err != nil {
		t.Fatal(err)
	}
	if c.Seq < uint64(t0.UnixMilli()) || c.Signer != coordID || !c.Supported("H100-80GB") || !has(&c.ModelCatalogue, "B200-192GB") || c.Supported("B200-192GB") {
		t.Fatalf("the edited catalogue: seq %d, signer %s", c.Seq, c.Signer)
	}
	for i := 1; i < len(c.Models); i++ {
		if c.Models[i-1].Model > c.Models[i].Model {
			t.Fatalf("models not sorted: %s before %s", c.Models[i-1].Model, c.Models[i].Model)
		}
	}
	_, err = b.Edit(context.Background(), func(models []protocol.ModelEntry) ([]protocol.ModelEntry, error) {
		models[0].Aliases[0] = "CHANGED IN PLACE"
		return append(models, models[0]), nil // a model twice
	})
	if !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("an edit listing a model twice: %v", err)
	}
	if cur := b.Latest(coordID); cur.Seq != c.Seq || cur.Models[0].Aliases[0] == "CHANGED IN PLACE" {
		t.Fatal("a refused edit changed the current catalogue")
	}
	next, err := b.Edit(context.Background(), func(models []protocol.ModelEntry) ([]protocol.ModelEntry, error) { return models, nil })
	if err != nil || next.Seq <= c.Seq {
		t.Fatalf("a second edit in the same millisecond: %v, seq %d after %d", err, next.Seq, c.Seq)
	}
}

// TestSync: a node that misses a catalogue an attestation names asks the coordinator in the
// background and takes it; the sync stream serves a peer syncsPerMinute times a minute.
func TestSync(t *testing.T) {
	newPeer := func(sk crypto.PrivKey) *p2p.Peer {
		p, err := p2p.New(p2p.Options{Key: sk, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, OfferValidator: acceptAll{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	cp := newPeer(coordKey)
	coord := newTestBook(t, nil, nil, cp, coordID)
	cp.Handle(protocol.ModelsSyncProtocol, coord.HandleSync)
	for i := range 3 {
		if err := coord.Take(catalogue(t, coordKey, uint64(20+i), t0.Add(time.Duration(i)*time.Minute), ""), "self"); err != nil {
			t.Fatal(err)
		}
	}
	nodeKey, _ := recordtest.NewKey()
	np := newPeer(nodeKey)
	if err := np.Host.Connect(context.Background(), peer.AddrInfo{ID: cp.ID, Addrs: cp.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	node := newTestBook(t, nil, nil, np, coordID)
	if node.Lookup(coordID, 21) != nil {
		t.Fatal("found a catalogue never received")
	}
	deadline := time.Now().Add(10 * time.Second)
	for node.Lookup(coordID, 21) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the missing catalogue never came by sync")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if node.Current(coordID).Seq != 22 {
		t.Fatalf("after the sync the current catalogue is %d", node.Current(coordID).Seq)
	}
	served := 0
	for range syncsPerMinute + 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := node.Sync(ctx, coordID); err == nil {
			served++
		}
		cancel()
	}
	if served != syncsPerMinute-1 { // the background sync took one
		t.Fatalf("%d syncs served in a minute; want %d", served, syncsPerMinute-1)
	}
}

func has(c *protocol.ModelCatalogue, model string) bool {
	_, ok := c.Entry(model)
	return ok
}

type acceptAll struct{}

func (acceptAll) Validate(string, []byte) error        { return nil }
func (acceptAll) Select(string, [][]byte) (int, error) { return 0, nil }
