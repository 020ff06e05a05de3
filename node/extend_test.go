package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// TestLeaseExtension: leases that grow, with a coordinator, a provider requiring escrow and
// a renter on real hosts, the jobs in containerd. A renter whose balance does not cover a
// longer lease is refused, and its job ends at the first lease's end; a stranger can extend
// neither the job nor its hold; an extension outside the provider's availability is
// refused; a funded extension before the lease's end lets the job run past it, to its own
// end, and its receipt charges the whole run, more than the first hold, countersigned by a
// follower that started before the extension.
func TestLeaseExtension(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	tn, renter, prov := jobNetConfig(t, 1, testRuntime(t), func(c *config.Config) {
		c.Provider.GPUs[0].PriceUSDC = "3.60"
		c.Jobs.RequireEscrow = true
	})
	coord := tn.boot
	waitCertified(t, coord, prov)
	ctx := context.Background()
	cl := apiClient(t, renter)
	const lease = 8 // seconds: each job's --max-hours
	hours := float64(lease) / 3600
	firstHold := protocol.HoldAmount(3_600_000, 1, lease)
	if _, _, err := coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "first", Renter: renter.ID().String(), Amount: firstHold + 1000}); err != nil {
		t.Fatal(err)
	}
	archive := busyboxArchive(t)
	run := func(secs int) api.JobView {
		t.Helper()
		v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: lease, ImageArchive: archive,
			Args: []string{"sleep", fmt.Sprint(secs)}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// The balance covers the first lease only.
	short := run(30)
	if _, err := cl.ExtendJob(ctx, short.ID, hours); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "insufficient funds") {
		t.Fatalf("an extension beyond the balance: %v", err)
	}
	// A stranger: to the provider, and to the coordinator.
	stranger := tn.add(testConfig(config.RoleRenter), nil)
	if err := stranger.Host().Connect(ctx, peer.AddrInfo{ID: prov.ID(), Addrs: prov.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	s, err := stranger.peer.OpenStream(ctx, prov.ID(), protocol.JobControlProtocol)
	if err != nil {
		t.Fatal(err)
	}
	protocol.WriteJSONFrame(s, protocol.JobMsg{Op: "extend", Job: short.ID, Seconds: lease})
	var answer protocol.JobMsg
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), 1<<16, &answer); err != nil || answer.Type != "error" || !strings.Contains(answer.Reason, "of yours") {
		t.Fatalf("a stranger's extension: %+v %v", answer, err)
	}
	s.Close()
	rj, _ := renter.ledger.Jobs.GetJob(short.ID)
	if _, err := stranger.wallet.ExtendHold(ctx, rj, 100*firstHold, time.Now().Add(48*time.Hour)); err == nil || !strings.Contains(err.Error(), "not yours") {
		t.Fatalf("a stranger raised the renter's hold: %v", err)
	}
	final, err := renter.renter.JobLogs(ctx, short.ID, true, io.Discard)
	if err != nil || final.State != "ended" || final.ExitReason != "lease expired" || final.Seconds > lease {
		t.Fatalf("the job whose extension was refused: %+v %v", final, err)
	}

	// Funded now; the provider's availability closed, then open again.
	if _, _, err := coord.ledger.Escrow.CreditDeposit(ledger.Deposit{Signature: "second", Renter: renter.ID().String(), Amount: 100_000_000}); err != nil {
		t.Fatal(err)
	}
	long := run(12)
	// Followed from before the extension, as `gpunex job run` does: the receipt, which
	// follows from the extended lease, is still taken and countersigned.
	type followed struct {
		v   api.JobView
		err error
	}
	follow := make(chan followed, 1)
	go func() {
		v, err := renter.renter.JobLogs(ctx, long.ID, true, io.Discard)
		follow <- followed{v, err}
	}()
	closedDay := time.Now().UTC().Add(72 * time.Hour).Weekday().String()[:3]
	if _, err := prov.publisher.SetAvailability(ctx, &ledger.Availability{Timezone: "UTC", Windows: []string{strings.ToLower(closedDay) + " 00:00-01:00"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ExtendJob(ctx, long.ID, hours); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "availability window") {
		t.Fatalf("an extension outside the provider's availability: %v", err)
	}
	if _, err := prov.publisher.SetAvailability(ctx, nil); err != nil {
		t.Fatal(err)
	}
	v, err := cl.ExtendJob(ctx, long.ID, hours)
	if err != nil {
		t.Fatal(err)
	}
	if want := long.EndsAt.Add(lease * time.Second); !v.EndsAt.Equal(want) {
		t.Fatalf("the lease ends at %s, want %s", v.EndsAt, want)
	}
	f := <-follow
	final, err = f.v, f.err
	if err != nil || final.State != "ended" || final.ExitReason != "exited" || final.Seconds <= lease || !final.Countersign {
		t.Fatalf("the extended job: %+v %v", final, err)
	}
	eventually(t, 20*time.Second, "the extended job charged the whole run", func() (bool, string) {
		h, err := coord.ledger.Escrow.GetHold(long.ID)
		return err == nil && h.State == ledger.HoldCharged && h.Charge == final.Cost && h.Charge > firstHold, fmt.Sprintf("%+v (receipt %s)", h, final.Cost)
	})
}
