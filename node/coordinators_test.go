package node

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// TestTwoCoordinators: two coordinators each certify their own provider through the apply
// flow. A renter trusting both sees both offers, each naming its coordinator. A job on each
// provider is held and charged by that provider's coordinator, from the renter's account
// there, and reported there only. Scores and market statistics are kept and shown per
// coordinator. A coordinator's revocation removes its own provider and cannot touch the
// other's.
func TestTwoCoordinators(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	fastOnboarding(t)
	rt := testRuntime(t)
	ccfg := testConfig(config.RoleCoordinator)
	ccfg.Coordinator.ProbeInterval = config.Duration{Duration: 200 * time.Millisecond}
	ccfg.Coordinator.HalfLife = config.Duration{Duration: time.Minute}
	ccfg.Settlement.MarketInterval = config.Duration{Duration: time.Second}
	tn := newTestNetWith(t, ccfg)
	a := tn.boot
	b := tn.add(ccfg, nil) // it also trusts A: it sees A's offers, but probes only its own providers
	ctx := context.Background()

	// Each provider trusts and applies to its own coordinator, and joins through both.
	both := []string{a.Addrs()[0], b.Addrs()[0]}
	provider := func(i int, coord *Node) *Node {
		cfg := providerConfig(i)
		cfg.Provider.GPUs[0].Count, cfg.Provider.GPUs[0].PriceUSDC = 1, "3.60"
		cfg.Jobs.MemoryMBPerGPU, cfg.Jobs.ScratchMB, cfg.Jobs.Pids = 64, 16, 64
		cfg.Jobs.RequireEscrow = true
		cfg.Trust.Coordinators = []string{coord.ID().String()}
		cfg.P2P.Bootstrap = both
		p := tn.addNode(cfg, Deps{Sandbox: rt, JobsDir: t.TempDir()}, false)
		applyApproved(t, coord, p)
		return p
	}
	pa, pb := provider(0, a), provider(1, b)
	rcfg := testConfig(config.RoleRenter)
	rcfg.Trust.Coordinators = []string{a.ID().String(), b.ID().String()}
	rcfg.P2P.Bootstrap = both
	renter := tn.add(rcfg, nil)

	// Both sets of offers, told apart by coordinator.
	coordOf := map[peer.ID]peer.ID{pa.ID(): a.ID(), pb.ID(): b.ID()}
	eventually(t, 20*time.Second, "the renter sees both providers, with their scores", func() (bool, string) {
		rows := providersIn(search(t, renter, api.SearchFilter{}))
		for p, c := range coordOf {
			r, ok := rows[p.String()]
			if !ok || r.Coordinator != c.String() || r.Score == nil {
				return false, fmt.Sprintf("%+v", rows)
			}
		}
		return true, ""
	})
	if rows := search(t, renter, api.SearchFilter{Coordinator: b.ID().String()}); len(rows) != 1 || rows[0].Provider != pb.ID().String() {
		t.Fatalf("offers of coordinator B: %+v", rows)
	}
	for p, c := range coordOf {
		other := a.ID()
		if c == a.ID() {
			other = b.ID()
		}
		if renter.scores.Score(p, c) == nil || renter.scores.Score(p, other) != nil {
			t.Fatalf("scores of %s: by its coordinator %v, by the other %v", p, renter.scores.Score(p, c), renter.scores.Score(p, other))
		}
	}
	eventually(t, 10*time.Second, "market statistics of both coordinators", func() (bool, string) {
		adv, _ := renter.market.RecommendPrice("", "")
		var by []string
		for _, x := range adv {
			if !slices.Contains(by, x.Coordinator) {
				by = append(by, x.Coordinator)
			}
		}
		return len(by) == 2, fmt.Sprint(by)
	})

	// The renter has an account at each coordinator; a job is held and charged where its
	// provider was certified.
	a.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "deposit-a", Renter: renter.ID().String(), Amount: 10_000_000})
	b.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "deposit-b", Renter: renter.ID().String(), Amount: 20_000_000})
	archive := busyboxArchive(t)
	run := func(p *Node) (string, protocol.MicroUSDC) {
		v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(p), GPUs: 1, MaxSeconds: 60, ImageArchive: archive,
			Args: []string{"sh", "-c", "sleep 2"}})
		if err != nil {
			t.Fatal(err)
		}
		final, err := renter.renter.JobLogs(ctx, v.ID, true, io.Discard)
		if err != nil || final.State != "ended" || final.Cost <= 0 {
			t.Fatalf("job on %s: %+v %v", p.ID(), final, err)
		}
		return v.ID, final.Cost
	}
	jobA, costA := run(pa)
	jobB, costB := run(pb)
	for _, c := range []struct {
		coord                   *Node
		mine, theirs            string
		start, charge           protocol.MicroUSDC
		provider, theirProvider *Node
	}{{a, jobA, jobB, 10_000_000, costA, pa, pb}, {b, jobB, jobA, 20_000_000, costB, pb, pa}} {
		eventually(t, 20*time.Second, "the job charged at its provider's coordinator", func() (bool, string) {
			bal, err := renter.wallet.Balance(ctx, c.coord.ID().String())
			return err == nil && bal.Coordinator == c.coord.ID().String() && bal.Held == 0 && bal.Available == c.start-c.charge,
				fmt.Sprintf("%+v %v", bal, err)
		})
		if h, err := c.coord.ledger.Escrow.GetHold(c.mine); err != nil || h.State != ledger.HoldCharged || h.Provider != c.provider.ID().String() {
			t.Fatalf("hold of job %s at its coordinator: %+v %v", c.mine, h, err)
		}
		if _, err := c.coord.ledger.Escrow.GetHold(c.theirs); err == nil {
			t.Fatalf("coordinator %s holds money for a job of the other's provider", c.coord.ID())
		}
		if _, err := c.coord.ledger.Escrow.GetJobReport(c.mine, c.provider.ID().String()); err != nil {
			t.Fatalf("the report of job %s at its coordinator: %v", c.mine, err)
		}
		if _, err := c.coord.ledger.Escrow.GetJobReport(c.theirs, c.theirProvider.ID().String()); err == nil {
			t.Fatalf("coordinator %s got the report of a job it did not hold", c.coord.ID())
		}
	}
	// The home coordinator's balance is A's.
	if bal, _ := renter.wallet.Balance(ctx, ""); bal.Coordinator != a.ID().String() {
		t.Fatalf("default balance from %s, want the first trusted coordinator", bal.Coordinator)
	}

	// A revokes B's provider: a record it may sign, but it cannot touch a certificate B
	// signed. Then A revokes its own provider, which leaves every search.
	if _, err := a.coord.Revoke(ctx, pb.ID(), "not ours to revoke", "mallory"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.coord.Revoke(ctx, pa.ID(), "failed audit", "alice"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "A's provider gone, B's still listed", func() (bool, string) {
		rows := providersIn(search(t, renter, api.SearchFilter{}))
		_, hasA := rows[pa.ID().String()]
		_, hasB := rows[pb.ID().String()]
		return !hasA && hasB, fmt.Sprintf("A's listed %v, B's listed %v", hasA, hasB)
	})
	if _, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(pb), GPUs: 1, MaxSeconds: 60, ImageArchive: archive,
		Args: []string{"true"}}); err != nil {
		t.Fatalf("B's provider after A's revocations: %v", err)
	}
}
