package offers

import (
	"bufio"
	"context"
	"fmt"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// BenchmarkCoordinatorSync10k: what a coordinator whose book holds 10,000 providers' offers
// (spread over the compiled-in catalogue's models) spends on one catalogue sync, served by the real handler
// over a stream on loopback TCP: the whole catalogue (a renter that follows every model, or
// a node of the previous release), and one model. The asker reads the frames and drops
// them: verifying them is the asker's cost, not the coordinator's. A provider's join asks
// for no offer (its book holds its own). docs/performance.md, "The coordinator for 10,000
// providers", turns the figures into a share of a core.
func BenchmarkCoordinatorSync10k(b *testing.B) {
	const providers = 10_000
	models := len(protocol.FirstModels().Models)
	coord, asker := newWorld(b), newWorld(b)
	coord.follows(b)
	coord.peer.Handle(protocol.OfferSyncProtocol, coord.cat.HandleSyncStream)
	coord.cat.offerSyncs.budget = p2p.NewSources(1e12, 1e12, 1) // one asker, asking again and again
	// first counts the offers of the catalogue's first model.
	first := 0
	for i := range providers {
		m := protocol.FirstModels().Models[i%models]
		if i%models == 0 {
			first++
		}
		p := coord.certified()
		p.cert = testCertificate(b, testCoordinatorKey, p.id, []protocol.CertifiedGPU{{Model: m.Model, Count: 2}}, coord.clock.Now())
		raw := coord.offer(p, 1, 1_000_000, func(o *protocol.Offer) {
			o.GPUs = []protocol.OfferGPUs{{Model: m.Model, Count: 2, VRAMGB: m.VRAMGB, PricePerGPUHour: 1_000_000}}
		})
		if _, _, err := coord.book.Accept(raw, "gossip"); err != nil {
			b.Fatal(err)
		}
	}
	asker.connect(coord)
	for _, c := range []struct {
		name string
		req  protocol.OfferSyncRequest
		want int
	}{
		{"whole-catalogue", protocol.OfferSyncRequest{}, min(providers, protocol.MaxSyncOffers)},
		{"one-model", protocol.OfferSyncRequest{Models: []string{protocol.FirstModels().Models[0].Model}}, first},
	} {
		b.Run(c.name, func(b *testing.B) {
			var bytes int
			for b.Loop() {
				bytes = syncOnce(b, asker, coord.peer.ID, c.req, c.want)
			}
			b.ReportMetric(float64(bytes), "bytes/sync")
		})
	}
}

// syncOnce asks p for the offers of req and reads the answer, which must hold want offers;
// it returns the bytes of offers received.
func syncOnce(b *testing.B, asker *world, p peer.ID, req protocol.OfferSyncRequest, want int) int {
	s, err := asker.peer.OpenStream(context.Background(), p, protocol.OfferSyncProtocol)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := protocol.WriteJSONFrame(s, req); err != nil {
		b.Fatal(err)
	}
	s.CloseWrite()
	n, bytes := 0, 0
	if err := protocol.ReadSyncFrames(bufio.NewReader(s), func(raw []byte) { n, bytes = n+1, bytes+len(raw) }); err != nil || n != want {
		b.Fatalf("%d offers of %d, %v", n, want, err)
	}
	return bytes
}

// BenchmarkAcceptSynced: what an asker spends on the offers of one sync answer (300 and
// 3,000 providers', a batch of 64 at a time, as syncFrom reads them) into a book that holds
// none of them (the first answer of a cold search) and into one that already holds them all
// (the answers of the other peers asked, and every answer of a warm node's sync). The cost
// of an offer should not grow with the answer.
func BenchmarkAcceptSynced(b *testing.B) {
	for _, providers := range []int{300, 3000} {
		b.Run(fmt.Sprint(providers), func(b *testing.B) {
			w := newWorld(b)
			var raws [][]byte
			for range providers {
				raws = append(raws, w.offer(w.certified(), 1, 1_000_000, nil))
			}
			accept := func() {
				for i := 0; i < len(raws); i += 64 {
					w.book.acceptBatch(raws[i:min(i+64, len(raws))], "sync")
				}
			}
			b.Run("fresh", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					w.book.Reset()
					b.StartTimer()
					accept()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*providers), "µs/offer")
			})
			b.Run("held", func(b *testing.B) {
				accept()
				for b.Loop() {
					accept()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*providers), "µs/offer")
			})
		})
	}
}
