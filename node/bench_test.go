package node

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// The performance figures of the offer network. They print measurements; they assert
// nothing about time. Run with `make bench`.

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration{}, d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// everyOffer is a search for every offer, benchmarked or not: the harnesses measure how
// offers travel, and not all of their providers are benchmarked.
var everyOffer = api.SearchFilter{Unbenchmarked: true}

// BenchmarkSearch100 measures searches over 100 providers: "warm" is a renter that follows
// gossip; "cold" is a renter whose book is emptied before each search, so every offer comes
// from a catalogue sync and the DHT (FindProviders, then the offer stream or GetValue).
func BenchmarkSearch100(b *testing.B) {
	const nProviders = 100
	tn := newTestNet(b)
	for i := 0; i < nProviders; i++ {
		tn.add(providerConfig(i), nil)
	}
	renter := tn.add(testConfig(config.RoleRenter), nil)
	eventually(b, 120*time.Second, "renter sees every provider", func() (bool, string) {
		rows := search(b, renter, api.SearchFilter{})
		return len(rows) == nProviders, fmt.Sprint(len(rows))
	})
	// Starting 102 nodes on a small machine takes minutes of CPU; measure the steady state,
	// once a renter with an empty book finds every offer.
	settle := time.Now()
	eventually(b, 180*time.Second, "network settled", func() (bool, string) {
		renter.book.Reset()
		rows, st, _ := renter.catalogue.SearchMeasured(context.Background(), everyOffer)
		return len(rows) == nProviders, fmt.Sprintf("%d offers, %+v", len(rows), st)
	})
	b.Logf("network settled %s after the last node joined", time.Since(settle).Round(time.Second))
	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			var lat, syncs, dhts []time.Duration
			for i := 0; i < max(b.N, 20); i++ {
				if mode == "cold" {
					renter.book.Reset()
				}
				start := time.Now()
				rows, st, err := renter.catalogue.SearchMeasured(context.Background(), everyOffer)
				lat = append(lat, time.Since(start))
				syncs, dhts = append(syncs, st.Sync), append(dhts, st.DHT)
				if err != nil || len(rows) != nProviders {
					b.Fatalf("search %d: %d offers, %v (DHT: %d providers found, %d fetched, %d failed)", i, len(rows), err, st.Found, st.Fetched, st.Failed)
				}
			}
			b.ReportMetric(float64(percentile(lat, 0.5).Milliseconds()), "p50-ms")
			b.ReportMetric(float64(percentile(lat, 0.95).Milliseconds()), "p95-ms")
			b.Logf("%s search over %d providers, %d runs: p50 %s, p95 %s, max %s (p95 of phases: sync %s, DHT %s)", mode, nProviders, len(lat),
				percentile(lat, 0.5), percentile(lat, 0.95), percentile(lat, 1), percentile(syncs, 0.95), percentile(dhts, 0.95))
		})
	}
}

// BenchmarkPriceChange50 measures how long a price change takes to reach 95% of a
// 50-node network.
func BenchmarkPriceChange50(b *testing.B) {
	const nNodes = 50 // the coordinator, one provider, 48 renters
	tn := newTestNet(b)
	prov := tn.add(providerConfig(0), nil)
	for len(tn.nodes) < nNodes {
		tn.add(testConfig(config.RoleRenter), nil)
	}
	eventually(b, 60*time.Second, "every node holds the offer", func() (bool, string) {
		n := 0
		for _, x := range tn.nodes {
			if so, _ := x.book.Get(prov.ID()); so != nil {
				n++
			}
		}
		return n == nNodes, fmt.Sprint(n)
	})
	time.Sleep(2 * time.Second) // let the gossip mesh settle
	model := declaredModel(prov)
	var p95s []time.Duration
	for i := 0; i < max(b.N, 10); i++ {
		start := time.Now()
		so, err := prov.publisher.SetPrice(context.Background(), model, protocol.MicroUSDC(1_000_000+i))
		if err != nil {
			b.Fatal(err)
		}
		arrivals := offerArrivals(tn.nodes, so, start, 10*time.Second, 2*time.Millisecond)
		if len(arrivals) < nNodes*95/100 {
			b.Fatalf("change %d reached only %d of %d nodes in 10 s", i, len(arrivals), nNodes)
		}
		p95s = append(p95s, arrivals[nNodes*95/100-1])
	}
	b.ReportMetric(float64(percentile(p95s, 0.5).Milliseconds()), "reach95-median-ms")
	b.ReportMetric(float64(percentile(p95s, 1).Milliseconds()), "reach95-worst-ms")
	b.Logf("price change reaching 95%% of %d nodes, %d changes: median %s, worst %s", nNodes, len(p95s),
		percentile(p95s, 0.5), percentile(p95s, 1))
}

// offerArrivals polls nodes every poll, for at most within from start, until each holds so
// or a newer record of its provider, and returns how long after start each did, shortest
// first.
func offerArrivals(nodes []*Node, so *protocol.SignedOffer, start time.Time, within, poll time.Duration) []time.Duration {
	var arrivals []time.Duration
	got := make([]bool, len(nodes))
	for len(arrivals) < len(nodes) && time.Since(start) < within {
		for k, n := range nodes {
			if got[k] {
				continue
			}
			if cur, _ := n.book.Get(so.Signer); cur != nil && cur.Offer.Seq >= so.Offer.Seq {
				got[k] = true
				arrivals = append(arrivals, time.Since(start))
			}
		}
		time.Sleep(poll)
	}
	slices.Sort(arrivals)
	return arrivals
}

// BenchmarkBenchmarkRun measures a whole benchmark run with the default sizes (256 MiB of
// storage written with fsync and read back, 4 KiB random reads for up to 2 s or 200,000
// reads, 16 MiB each way to
// the coordinator) on a provider with eight simulated GPUs: the part of the suite that does
// not depend on the GPUs (real GPUs add their kernels' time, a few seconds each by design).
func BenchmarkBenchmarkRun(b *testing.B) {
	tn := newTestNet(b)
	cfg := providerConfig(0)
	cfg.Bench.StorageMB, cfg.Bench.NetworkMB = config.Defaults(config.RoleProvider).Bench.StorageMB, config.Defaults(config.RoleProvider).Bench.NetworkMB
	cfg.Provider.GPUs = []config.GPUConfig{{Model: "H100-80GB", Count: 8, VRAMGB: 80, PriceUSDC: "2.00", Simulated: true}}
	prov := tn.add(cfg, nil)
	eventually(b, 60*time.Second, "first run", func() (bool, string) { return prov.bench.Latest() != nil, "" })
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		a, err := prov.bench.Run(context.Background(), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("run of %d GPUs, storage and network: %s (write %.0f MiB/s, read %.0f MiB/s, %.0f IOPS, rtt %.2f ms, up %.0f / down %.0f Mbit/s)",
			len(a.GPUs), time.Since(start).Round(time.Millisecond), a.Storage.SeqWriteMBps, a.Storage.SeqReadMBps, a.Storage.RandReadIOPS,
			a.Network.RTTMilli, a.Network.UpMbps, a.Network.DownMbps)
	}
}
