package offers

import (
	"context"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/protocol"
)

// TestProviderRecordsAtStartThenEvery6Hours: a provider stores its offer in the DHT at each
// publication, but announces itself under its region's and models' keys (three here) only
// when it starts and every ReprovideEvery after: the records last 48 hours, and each
// announcement walks the DHT, opening connections on the way.
func TestProviderRecordsAtStartThenEvery6Hours(t *testing.T) {
	w, other := newWorld(t), newWorld(t)
	w.connect(other)
	p := newPublisher(t, w, []protocol.CertifiedGPU{{Model: "L4-24GB", Count: 4}, {Model: "A100-80GB", Count: 2}})
	for deadline := time.Now().Add(10 * time.Second); w.peer.RoutingTableSize() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other node never joined the provider's routing table")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { p.announceLoop(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	announced := func(what string) int {
		return int(testutil.ToFloat64(w.metrics.DHTAnnouncements.WithLabelValues(what)))
	}
	publish := func(offers, providers int) {
		t.Helper()
		if err := p.publish(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for (announced("offer") < offers || announced("provider") < providers) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // nothing more comes
		if got, gotP := announced("offer"), announced("provider"); got != offers || gotP != providers {
			t.Fatalf("after a publication: %d offer records stored (want %d), %d provider records (want %d)", got, offers, gotP, providers)
		}
	}
	publish(1, 3) // at start: the offer, and under eu-west, L4-24GB and A100-80GB
	publish(2, 3) // a republish: the offer only
	later := func(d time.Duration) { w.clock.Advance(d); other.clock.Advance(d) }
	later(3 * time.Hour)
	publish(3, 3)
	later(ReprovideEvery - 3*time.Hour)
	publish(4, 6) // 6 hours on: every key again
	if stored, err := other.peer.StoredProviders(ctx, []cid.Cid{protocol.ModelKey("L4-24GB")}); err != nil || stored != 1 {
		t.Fatalf("the other DHT node holds %d provider records under L4-24GB: %v", stored, err)
	}
}
