package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
	// The offer carries the window and the rule's occurrences within the horizon: one or
	// two, depending on the day (on a first Sunday after 03:00 UTC, the next two are 28 and
	// 63 days away, and only the first is within 62 days).
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "coordinator holds the offer with the window and the rule's next occurrence", func() (bool, string) {
		so, _ := tn.boot.book.Get(prov.ID())
		if so == nil {
			return false, "no offer"
		}
		ruled := 0
		for _, w := range so.Offer.Maintenance {
			if local := w.From.In(paris); local.Weekday() == time.Sunday && local.Day() <= 7 && local.Hour() == 2 && w.To.Sub(w.From) == 2*time.Hour {
				ruled++
			}
		}
		return protocol.InMaintenance(so.Offer.Maintenance, time.Now()) && ruled >= 1, fmt.Sprintf("%+v", so.Offer.Maintenance)
	})
	prov.Close(context.Background())
	prov.Host().Close()
	time.Sleep(2 * time.Second) // about ten probe rounds
	st, _ := tn.boot.ledger.Reliability.UpdateReliability(prov.ID().String(), func(*ledger.ReliabilityState) error { return nil })
	for _, e := range st.Events {
		if strings.Contains(e, "missed probe") {
			t.Fatalf("a probe inside the maintenance window counted: %v", st.Events)
		}
	}
}

// TestProviderHistory: what a provider's charts draw is what happened to it: the scores
// its coordinator signed, its benchmark runs, and the probes it answered in the hours its
// availability declares.
func TestProviderHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn, prov, _ := scoredNet(t)
	cl := apiClient(t, prov)
	if _, err := prov.bench.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	var h api.HistoryView
	eventually(t, 15*time.Second, "the provider's history holds scores, a benchmark run and answered probes", func() (bool, string) {
		h = api.HistoryView{}
		if err := cl.Do(context.Background(), "GET", "/v1/provider/history?days=7", nil, &h); err != nil {
			return false, err.Error()
		}
		return len(h.Scores) >= 2 && len(h.Bench) >= 1 && h.Week.Answered >= 1, fmt.Sprintf("%d scores, %d runs, week %d/%d", len(h.Scores), len(h.Bench), h.Week.Answered, h.Week.Declared)
	})
	var first api.ScorePoint
	json.Unmarshal(h.Scores[0].Value, &first)
	if first.Coordinator != tn.boot.ID().String() || first.Score < 1 || first.Uptime <= 0 {
		t.Fatalf("first score point: %+v", first)
	}
	var run api.BenchPoint
	json.Unmarshal(h.Bench[len(h.Bench)-1].Value, &run)
	if len(run.GPUs) == 0 || run.GPUs[0].PerfScore == 0 || run.UpMbps <= 0 {
		t.Fatalf("benchmark point: %+v", run)
	}
	last := h.Week.Hours[len(h.Week.Hours)-1]
	if len(h.Week.Hours) != 168 || !last.Declared || last.Probes < 1 || h.Week.Timezone == "" {
		t.Fatalf("week: %d hours, current %+v, tz %q", len(h.Week.Hours), last, h.Week.Timezone)
	}
	// The hours before its first probe are not held against it.
	if h.Week.Since == nil || h.Week.Declared != h.Week.Answered || h.Week.Declared > 2 {
		t.Fatalf("week: since %v, %d declared hours, %d answered; the hours before the first probe count", h.Week.Since, h.Week.Declared, h.Week.Answered)
	}
	// A provider half an hour off UTC gets its own hours: each starts on its zone's hour
	// (minute 30 in UTC), and the probes of the current one are counted in it.
	var av api.AvailabilityView
	if err := cl.Do(context.Background(), "PUT", "/v1/provider/availability", api.Availability{Timezone: "Asia/Kolkata", Windows: []string{"24/7"}}, &av); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the week in Kolkata's hours", func() (bool, string) {
		h = api.HistoryView{}
		cl.Do(context.Background(), "GET", "/v1/provider/history?days=1", nil, &h)
		last := h.Week.Hours[len(h.Week.Hours)-1]
		for _, hr := range h.Week.Hours {
			if hr.Start.UTC().Minute() != 30 {
				return false, fmt.Sprintf("an hour starts at %s", hr.Start)
			}
		}
		return h.Week.Timezone == "Asia/Kolkata" && last.Declared && last.Probes > 0, fmt.Sprintf("%s, current %+v", h.Week.Timezone, last)
	})
	var bad map[string]any
	if err := cl.Do(context.Background(), "GET", "/v1/provider/history?days=900", nil, &bad); err == nil || !strings.Contains(err.Error(), "1 to 180") {
		t.Fatalf("days=900: %v", err)
	}
}

// TestScoresSyncAtJoin: a renter that joins after the provider was scored takes the score
// records from its peers at once (the score sync), as it does the offers, rather than
// waiting for the coordinator's next publication; a search ranks the provider by it.
func TestScoresSyncAtJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	tn, prov, renter := scoredNet(t)
	eventually(t, 15*time.Second, "the first renter holds a score", func() (bool, string) {
		return renter.scores.Score(prov.ID(), tn.boot.ID()) != nil, ""
	})
	late := tn.add(testConfig(config.RoleRenter), nil)
	eventually(t, 15*time.Second, "the renter that joined took scores from a sync", func() (bool, string) {
		n := testutil.ToFloat64(late.metrics.RecordsAccepted.WithLabelValues(string(protocol.KindScore), "sync"))
		return n >= 1 && late.scores.Score(prov.ID(), tn.boot.ID()) != nil, fmt.Sprintf("%v from a sync", n)
	})
	rows := search(t, late, api.SearchFilter{Unbenchmarked: true})
	for _, r := range rows {
		if r.Provider == prov.ID().String() && r.Score == nil {
			t.Fatalf("the renter that joined lists the provider without its score: %+v", r)
		}
	}
}
