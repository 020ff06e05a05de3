package offers

import (
	"runtime"
	"testing"

	"github.com/gpunex/gpunex/protocol"
)

// BenchmarkRenterBook1000: the Go heap a renter's offer book keeps for 1,000 providers'
// offers, each verified and held with its certificate, as gossip brings them (issue 31
// bounds the whole renter at 100 MB resident with 1,000 providers). The test offers are
// smaller than real ones (no attestation): the figures are reported per offer, with the
// record's size, so that docs/performance.md can scale them to 5 KB records.
func BenchmarkRenterBook1000(b *testing.B) {
	const providers = 1_000
	models := protocol.FirstModels().Models
	for b.Loop() {
		b.StopTimer()
		w := newWorld(b)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		raw := 0
		for i := range providers {
			m := models[i%len(models)]
			p := w.certified()
			p.cert = testCertificate(b, testCoordinatorKey, p.id, []protocol.CertifiedGPU{{Model: m.Model, Count: 2}}, w.clock.Now())
			rec := w.offer(p, 1, 1_000_000, func(o *protocol.Offer) {
				o.GPUs = []protocol.OfferGPUs{{Model: m.Model, Count: 2, VRAMGB: m.VRAMGB, PricePerGPUHour: 1_000_000}}
			})
			raw += len(rec)
			if _, _, err := w.book.Accept(rec, "gossip"); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := len(w.book.Live(w.clock.Now())); n != providers {
			b.Fatalf("the book holds %d live offers, want %d", n, providers)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/providers/1e3, "heap-KB/offer")
		b.ReportMetric(float64(raw)/providers/1e3, "record-KB/offer")
		b.StartTimer()
	}
}
