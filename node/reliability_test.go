package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// TestReliabilityScore: the coordinator probes a certified provider; renters receive signed
// score records; when the provider goes offline the misses lower its score and say when.
func TestReliabilityScore(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn, prov, renter := scoredNet(t)
	eventually(t, 15*time.Second, "renter holds a score with probes behind it", func() (bool, string) {
		s := renter.scores.Score(prov.ID(), tn.boot.ID())
		return s != nil && s.Probes >= 1 && s.Score >= 90, ""
	})
	before := renter.scores.Score(prov.ID(), tn.boot.ID())
	if before.Uptime < 0.9 || before.Signer != tn.boot.ID() {
		t.Fatalf("score while online: %+v", before.ScoreRecord)
	}
	prov.Close(context.Background())
	prov.Host().Close() // offline: nobody answers the probes
	eventually(t, 30*time.Second, "score drops while the provider is offline", func() (bool, string) {
		s := renter.scores.Score(prov.ID(), tn.boot.ID())
		if s == nil {
			return false, "no score"
		}
		return s.Score < before.Score-5 && len(s.Why) > 0 && strings.Contains(s.Why[len(s.Why)-1], "missed probe"), fmt.Sprintf("%+v", s.ScoreRecord)
	})
	if forged := renter.scores.Take(before.Raw, "gossip"); protocol.Reason(forged) != "replay" {
		t.Fatalf("old score record accepted again: %v", forged)
	}
}

// scoredNet is a network whose coordinator probes every 200 ms, with one provider it
// approved and a renter.
func scoredNet(t *testing.T) (*testNet, *Node, *Node) {
	t.Helper()
	fastOnboarding(t)
	ccfg := testConfig(config.RoleCoordinator)
	ccfg.Coordinator.ProbeInterval = config.Duration{Duration: 200 * time.Millisecond}
	ccfg.Coordinator.HalfLife = config.Duration{Duration: time.Minute}
	tn := newTestNetWith(t, ccfg)
	cfg := providerConfig(0)
	prov := tn.addUncertified(cfg)
	renter := tn.add(testConfig(config.RoleRenter), nil)
	own, err := prov.applicant.Submit(applicationForm(cfg, true, 12))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusPending)
	if _, err := tn.boot.coord.Decide(own.ID, api.Decision{Action: "approve", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	return tn, prov, renter
}

// TestMaintenanceExcusesProbes: probes missed inside a declared maintenance window do not
// count against the provider.
func TestMaintenanceExcusesProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn, prov, _ := scoredNet(t)
	now := time.Now()
	if _, err := prov.publisher.AddMaintenance(ledger.Maintenance{From: now.Add(-time.Minute), To: now.Add(time.Hour), Note: "new PSU"}); err != nil {
		t.Fatal(err)
	}
	if _, err := prov.publisher.AddMaintenance(ledger.Maintenance{Rule: "first sunday 02:00 2h Europe/Paris"}); err != nil {
		t.Fatal(err)
	}
	if _, err := prov.publisher.AddMaintenance(ledger.Maintenance{Rule: "fifth sunday 02:00 2h"}); err == nil {
		t.Fatal("bad rule accepted")
	}
	eventually(t, 10*time.Second, "coordinator holds the offer with the window", func() (bool, string) {
		so, _ := tn.boot.book.Get(prov.ID())
		return so != nil && protocol.InMaintenance(so.Offer.Maintenance, time.Now()) && len(so.Offer.Maintenance) >= 3, ""
	})
	prov.Close(context.Background())
	prov.Host().Close()
	time.Sleep(2 * time.Second) // about ten probe rounds
	st, _ := tn.boot.ledger.UpdateReliability(prov.ID().String(), func(*ledger.ReliabilityState) error { return nil })
	for _, e := range st.Events {
		if strings.Contains(e, "missed probe") {
			t.Fatalf("a probe inside the maintenance window counted: %v", st.Events)
		}
	}
}
