package node

import (
	"bytes"
	"context"
	"errors"
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

// TestJobPlacedByModel: a renter asks for a model, not a provider. Of the offers matching
// its search (model and region), best merit first, the best one's provider is busy (its
// one GPU is leased) and refuses, the next one does not answer (it serves no job
// protocol), and the third takes the job; the offer of another region, better ranked
// than the third, is never asked. The job view of POST /v1/jobs says where the job went
// and why, and why the others did not take it. With a limit of two tries, the job is
// refused with both reasons; a search matching nothing and a renter's own mistake fail at
// once, saying so.
func TestJobPlacedByModel(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	tn := newTestNet(t)
	provider := func(price, region string, gpus int, d Deps) *Node {
		cfg := providerConfig(0)
		cfg.Provider.GPUs[0].Count, cfg.Provider.GPUs[0].PriceUSDC, cfg.Provider.Region = gpus, price, region
		cfg.Jobs.MemoryMBPerGPU, cfg.Jobs.ScratchMB, cfg.Jobs.Pids = 64, 16, 64
		cfg.Jobs.RequireEscrow = true
		return tn.addWith(cfg, d)
	}
	busy := provider("1.00", "eu-west", 1, Deps{Sandbox: testRuntime(t), JobsDir: t.TempDir()})
	mute := provider("1.50", "eu-west", 1, Deps{})
	mute.peer.Host.RemoveStreamHandler(protocol.JobProtocol)
	free := provider("3.00", "eu-west", 2, Deps{Sandbox: testRuntime(t), JobsDir: t.TempDir()})
	elsewhere := provider("0.50", "us-east", 1, Deps{})
	renter := tn.add(testConfig(config.RoleRenter), nil)
	model := declaredModel(busy)
	// (Each offer benchmarked too: placement passes over offers no fresh attestation
	// vouches for, and the providers' first runs may still be under way.)
	eventually(t, 30*time.Second, "the four offers found, benchmarked, ranked busy, mute, free in eu-west", func() (bool, string) {
		_, all := searchHas(t, renter, elsewhere.ID())
		rows := search(t, renter, api.SearchFilter{Model: model, Region: "eu-west"})
		var got []string
		benchmarked := true
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%s %.3f %s", r.Provider, r.Rank.Merit, r.Unbenchmarked))
			benchmarked = benchmarked && r.Unbenchmarked == ""
		}
		return all && benchmarked && len(rows) == 3 && rows[0].Provider == busy.ID().String() && rows[1].Provider == mute.ID().String() &&
			rows[2].Provider == free.ID().String(), strings.Join(got, ", ")
	})
	// Every provider requires an escrow hold. The renter's account covers the job that
	// keeps the busy provider's GPU, and the free provider's job, and half of another hold
	// on the busy provider: a try that is refused must give its hold back before the next
	// one asks for its own, and a provider that cannot be reached gets none.
	busyHold := protocol.HoldAmount(1_000_000, 1, 60)
	freeHold := protocol.HoldAmount(3_000_000, 1, 60)
	tn.boot.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "deposit", Renter: renter.ID().String(), Amount: busyHold + freeHold + busyHold/2})
	archive := busyboxArchive(t)
	ctx := context.Background()
	// The best offer's only GPU is leased.
	held, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(busy), GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Args: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	defer renter.renter.CancelJob(ctx, held.ID)

	byModel := api.JobRequest{Model: model, Region: "EU-West", GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Args: []string{"echo", "placed"}}
	two := byModel
	two.Tries = 2
	_, err = renter.renter.ProposeJob(ctx, two)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "no provider took the job: 3 offer(s) match model "+model+", region eu-west, 1 GPU(s) or more; tried 2 (at most 2)") ||
		!strings.Contains(err.Error(), offerOf(busy)+" (1st) refused: proposal refused: capacity: 0 of 1 "+model+" free right now") ||
		!strings.Contains(err.Error(), offerOf(mute)+" (2nd) unreachable: ") {
		t.Fatalf("two tries, on a busy provider and a mute one: %v", err)
	}

	cl := apiClient(t, renter)
	v, err := cl.ProposeJob(ctx, byModel)
	if err != nil {
		t.Fatal(err)
	}
	pl := v.Placement
	if v.Peer != free.ID().String() || pl == nil || pl.Matched != 3 || pl.Tries != api.DefaultTries || len(pl.Attempts) != 3 {
		t.Fatalf("placed job: %+v, placement %+v", v, pl)
	}
	for i, want := range []struct {
		prov          *Node
		outcome, text string
	}{{busy, "refused", "capacity: 0 of 1"}, {mute, "unreachable", "protocols not supported"}, {free, "accepted", ""}} {
		a := pl.Attempts[i]
		if a.Rank != i+1 || a.Provider != want.prov.ID().String() || a.Offer != offerOf(want.prov) || a.Outcome != want.outcome ||
			!strings.Contains(a.Error, want.text) || (want.text == "") != (a.Error == "") || a.Region != "eu-west" || a.Tier == "" ||
			!strings.HasPrefix(a.Why, fmt.Sprintf("ranked %s of 3 by merit %.4f (score %d,", api.Ordinal(i+1), a.Merit, a.Score)) {
			t.Fatalf("attempt %d: %+v", i+1, a)
		}
	}
	if want := free.ID().String() + " took the job: ranked 3rd of 3 by merit"; !strings.HasPrefix(pl.Chosen, want) ||
		!strings.HasSuffix(pl.Chosen, "price 3.00 USDC per GPU-hour = 2.00 x the market), tier "+pl.Attempts[2].Tier+", region eu-west; 2 offer(s) ranked above it did not take it") {
		t.Fatalf("chosen: %q, want %q...", pl.Chosen, want)
	}
	// The refused tries' holds came back; the two running jobs' are held.
	if bal, err := renter.wallet.Balance(ctx, ""); err != nil || bal.Held != busyHold+freeHold {
		t.Fatalf("the renter's account after the placement: %+v %v (want %s held)", bal, err, busyHold+freeHold)
	}
	var out bytes.Buffer
	if final, err := renter.renter.JobLogs(ctx, v.ID, true, &out); err != nil || final.ExitCode != 0 || out.String() != "placed\n" {
		t.Fatalf("the placed job: %+v %v, output %q", final, err, out.String())
	}

	// Nothing matches: 404, saying what was searched.
	nowhere := byModel
	nowhere.Region = "ap-south"
	if _, err := cl.ProposeJob(ctx, nowhere); !errors.Is(err, api.ErrNotFound) ||
		err.Error() != "not found: no live, certified offer matches model "+model+", region ap-south, 1 GPU(s) or more (gpunex offers search lists what is offered)" {
		t.Fatalf("no match: %v", err)
	}
	// The renter's own mistakes: 400 before any provider is asked.
	missing := byModel
	missing.ImageArchive = "/nonexistent/busybox.tar"
	if _, err := cl.ProposeJob(ctx, missing); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "image archive: open /nonexistent/busybox.tar") {
		t.Fatalf("a missing archive: %v", err)
	}
	long := byModel
	long.MaxSeconds = 0
	if _, err := cl.ProposeJob(ctx, long); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "max_seconds 0 out of range") {
		t.Fatalf("no duration: %v", err)
	}
	if n := testutil.ToFloat64(busy.metrics.JobProposals.WithLabelValues("policy")); n != 2 {
		t.Fatalf("the busy provider refused %v proposals; want 2 (the renter's mistakes never reach it)", n)
	}
}
