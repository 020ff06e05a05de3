package offers

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/metrics"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/recordtest"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// A world is one node's offer subsystem built from its Deps: an in-memory ledger, a fake
// clock (Monday 2026-11-30 09:00 UTC, before the tests were written: the trust store loads revocations at the system clock), the trust store of the test coordinator, the book,
// and the catalogue on a real peer on loopback (searches, syncs and the offer stream need
// one; it has no DHT peers unless connected).
type world struct {
	t       testing.TB
	clock   *clock.Fake
	ledger  *ledger.Ledger
	metrics *metrics.Metrics
	trust   *Trust
	book    *Book
	key     crypto.PrivKey
	peer    *p2p.Peer
	cat     *Catalogue
}

var monday = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

type acceptAll struct{}

func (acceptAll) Validate(string, []byte) error        { return nil }
func (acceptAll) Select(string, [][]byte) (int, error) { return 0, nil }

func newWorld(t testing.TB) *world {
	t.Helper()
	return newWorldAt(t, "127.0.0.1")
}

// newWorldAt is newWorld listening on ip (another loopback address than 127.0.0.1 is a
// network of its own to the per-network limits).
func newWorldAt(t testing.TB, ip string) *world {
	t.Helper()
	w := &world{t: t, clock: clock.NewFake(monday), metrics: metrics.New(nil, nil)}
	var err error
	if w.ledger, err = ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.ledger.Close() })
	if w.trust, err = NewTrust(w.ledger.Offers, []peer.ID{testCoordinatorID}, nil); err != nil {
		t.Fatal(err)
	}
	w.book = NewBook(w.ledger.Offers, w.trust, w.metrics, quietLogger(), w.clock)
	w.key, _ = recordtest.NewKey()
	if w.peer, err = p2p.New(p2p.Options{Key: w.key, Listen: []string{"/ip4/" + ip + "/tcp/0"}, OfferValidator: w.book.DHTValidator()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.peer.Close() })
	offers := config.Defaults(config.RoleRenter).Offers
	offers.SearchTimeout.Duration = time.Second
	w.cat = New(Deps{Base: subsystem.Base{Peer: w.peer, Metrics: w.metrics, Log: quietLogger(), Clock: w.clock}, Book: w.book, Trust: w.trust, Offers: offers,
		Models: func() []string { return []string{"L4-24GB", "A100-80GB"} }})
	return w
}

// connect makes w and v peers of each other.
//
// A dial that meets the other host's own dial to it (the DHT and gossipsub dial peers they
// learn of) can fail: both use their listening port on TCP, so the two dials become one
// connection where both ends start TLS as its client. A node dials again; so does the test,
// a few times, past the dial backoff the failure set, before it fails.
func (w *world) connect(v *world) {
	w.t.Helper()
	var err error
	for range 3 {
		if err = w.peer.Host.Connect(context.Background(), peer.AddrInfo{ID: v.peer.ID, Addrs: v.peer.Host.Addrs()}); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
		if sw, ok := w.peer.Host.Network().(*swarm.Swarm); ok {
			sw.Backoff().Clear(v.peer.ID)
		}
	}
	w.t.Fatal(err)
}

// provider is a provider's key, and the certificate the test coordinator gave it.
type provider struct {
	key  crypto.PrivKey
	id   peer.ID
	cert []byte
}

// certified returns a provider with a certificate for 2 L4-24GB, issued a minute before now.
func (w *world) certified() provider {
	sk, id := recordtest.NewKey()
	return provider{key: sk, id: id, cert: testCertificate(w.t, testCoordinatorKey, id, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 2}}, w.clock.Now())}
}

// offer signs p's offer of seq at the world's time, valid a minute, for 2 L4s at price;
// change, when set, edits it before signing.
func (w *world) offer(p provider, seq uint64, price protocol.MicroUSDC, change func(o *protocol.Offer)) []byte {
	w.t.Helper()
	now := w.clock.Now().UTC()
	o := protocol.Offer{Version: protocol.OfferVersion, Provider: p.id.String(), Seq: seq, IssuedAt: now, ExpiresAt: now.Add(time.Minute),
		Region: "eu-west", Availability: "24/7", Certificate: p.cert,
		GPUs: []protocol.OfferGPUs{{Model: "L4-24GB", Count: 2, VRAMGB: 24, PricePerGPUHour: price}}}
	if change != nil {
		change(&o)
	}
	raw, err := protocol.Seal(protocol.KindOffer, o, p.key)
	if err != nil {
		w.t.Fatal(err)
	}
	return raw
}

// revocation signs the test coordinator's revocation of p at the world's time plus skew.
func (w *world) revocation(key crypto.PrivKey, p provider, skew time.Duration) []byte {
	w.t.Helper()
	by, _ := peer.IDFromPrivateKey(key)
	raw, err := protocol.Seal(protocol.KindRevocation, protocol.Revocation{Version: protocol.RevocationVersion, Coordinator: by.String(),
		Provider: p.id.String(), IssuedAt: w.clock.Now().Add(skew).UTC(), Reason: "benchmarks faked"}, key)
	if err != nil {
		w.t.Fatal(err)
	}
	return raw
}
