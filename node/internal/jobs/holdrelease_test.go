package jobs

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// TestReleaseAnswer: a job that never got a lease here may have its hold released (and is
// then refused for good); one that ran may not.
func TestReleaseAnswer(t *testing.T) {
	r := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}})
	if a := r.ReleaseAnswer("00000000000000aa"); !a.Release {
		t.Fatalf("unknown job: %+v", a)
	}
	if a := r.ReleaseAnswer("00000000000000aa"); !a.Release {
		t.Fatalf("released job asked again: %+v", a)
	}
	_, renter := newKey(t)
	p := &protocol.Proposal{Job: "00000000000000aa", Renter: renter.String(), Model: "L4-24GB", GPUs: 1, MaxSeconds: 60, MaxPrice: 1_000_000}
	if _, _, _, err := r.decide(p, nil, r.clk.Now()); err == nil || !strings.Contains(err.Error(), "was proposed before") {
		t.Fatalf("a job whose hold was released, proposed later: %v", err)
	}
	now := r.clock.Now()
	if err := r.ledger.CreateJob(ledger.Job{ID: "00000000000000bb", Side: "provider", State: ledger.JobRunning, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if a := r.ReleaseAnswer("00000000000000bb"); a.Release || !strings.Contains(a.Reason, "its final receipt settles the hold") {
		t.Fatalf("running job: %+v", a)
	}
}

// TestHoldReleaseStream: only a trusted coordinator is answered.
func TestHoldReleaseStream(t *testing.T) {
	net := newTestNet(t)
	coord, stranger := net.peer(t), net.peer(t)
	pv := newProvider(t, net.peer(t), nil, func(d *Deps) { d.Trusted = []peer.ID{coord.ID} })
	net.connect(t)
	pv.peer.Handle(protocol.HoldReleaseProtocol, pv.HandleHoldRelease)
	askRelease := func(from *p2p.Peer) protocol.HoldRelease {
		s, err := from.OpenStream(context.Background(), pv.peer.ID, protocol.HoldReleaseProtocol)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.SetDeadline(time.Now().Add(10 * time.Second))
		go protocol.WriteJSONFrame(s, protocol.HoldRelease{Job: "00000000000000cc"})
		var a protocol.HoldRelease
		if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxHoldReleaseFrame, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := askRelease(stranger); a.Release || a.Reason != "only a trusted coordinator may ask" {
		t.Fatalf("a stranger asking: %+v", a)
	}
	if _, err := pv.ledger.GetJob("00000000000000cc"); err == nil {
		t.Fatal("a stranger's question marked the job")
	}
	if a := askRelease(coord); !a.Release || a.Job != "00000000000000cc" {
		t.Fatalf("the coordinator asking: %+v", a)
	}
}
