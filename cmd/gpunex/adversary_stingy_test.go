//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// stingyScenario (security review, finding 5): renter-1 turned hostile (its own identity,
// its own funds) starts a job on provider-2 and never countersigns a usage checkpoint. The
// provider stops the job 70 s after its start (one checkpoint interval and the meter's
// tolerance; the receipt counts the stop's few seconds too), of which the renter pays a
// minute, and refuses the renter's next proposal
// (jobs.unmetered_renter_ban). provider-2 is the victim so that renter-1 stays welcome on
// provider-1, which the input scenarios use.
func stingyScenario() scenario {
	var job string
	var started time.Time
	return scenario{
		name: "stingy-renter", victim: "provider-2", honest: honestSearch,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			key, err := config.Home{Dir: e.nodes["renter-1"].Home}.Identity()
			if err != nil {
				t.Fatal(err)
			}
			a := newAttackerKeyed(t, e, key, "127.0.0.2", "coordinator", "provider-2")
			defer a.close()
			msg, id := stingyPropose(ctx, t, a, e)
			if msg.Type != "accept" {
				t.Fatalf("the stingy renter's job was not leased: %s %s", msg.Type, msg.Reason)
			}
			job, started = id, time.Now()
			<-ctx.Done()
			return 1
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			var ran int64
			deadline := started.Add(protocol.CheckpointInterval + protocol.MeterTolerance + 20*time.Second)
			for {
				views, _ := e.clients["provider-2"].Jobs(context.Background())
				done := false
				for _, v := range views {
					if v.ID == job && v.State == "ended" {
						if v.ExitReason != "renter stopped countersigning usage" {
							t.Fatalf("the stingy renter's job ended %q", v.ExitReason)
						}
						ran, done = v.Seconds, true
					}
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the stingy renter's job still runs %s after its lease", time.Since(started).Round(time.Second))
				}
				time.Sleep(time.Second)
			}
			// The stop itself takes a few seconds (SIGTERM, then its grace): the receipt
			// counts them.
			if most := int64((protocol.CheckpointInterval + protocol.MeterTolerance + 5*time.Second) / time.Second); ran > most {
				t.Errorf("the stingy renter's job ran %d s, over %d s", ran, most)
			}
			key, _ := config.Home{Dir: e.nodes["renter-1"].Home}.Identity()
			a := newAttackerKeyed(t, e, key, "127.0.0.2", "coordinator", "provider-2")
			defer a.close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			again, _ := stingyPropose(ctx, t, a, e)
			if again.Type != "reject" || !strings.Contains(again.Reason, "stopped countersigning") {
				t.Errorf("the stingy renter's next proposal: %s %q; want it refused", again.Type, again.Reason)
			}
			return fmt.Sprintf("its job stopped after %d s, %d s paid at most; its next proposal refused", ran, min(ran, int64(protocol.CheckpointAllowance/time.Second)))
		},
	}
}

// stingyPropose has the attacker propose provider-2 a 10-minute busybox job under an
// escrow hold from its funds, countersign the lease and send the archive. It returns the
// provider's answer to the proposal (accept, reject) and the job's ID.
func stingyPropose(ctx context.Context, t *testing.T, a *attacker, e *advEnv) (protocol.JobMsg, string) {
	const lease = 600
	var model string
	var price protocol.MicroUSDC
	for ctx.Err() == nil && model == "" {
		rows, _ := e.clients["renter-1"].Search(ctx, nil)
		for _, r := range rows {
			if r.Provider == e.nodes["provider-2"].PeerID {
				model, price = r.Model, r.PriceMicroUSDC
			}
		}
		if model == "" {
			time.Sleep(200 * time.Millisecond)
		}
	}
	var archive bytes.Buffer
	sandbox.BusyboxImage(&archive, "gpunex.devnet/busybox:1")
	sum := sha256.Sum256(archive.Bytes())
	p := protocol.Proposal{Version: protocol.JobVersion, Job: randomHex(8), Renter: a.h.ID().String(), Provider: e.nodes["provider-2"].PeerID,
		IssuedAt: time.Now().UTC(), Model: model, GPUs: 1, MaxSeconds: lease, MaxPrice: price, Args: []string{"sleep", "600"},
		Image: protocol.Image{ArchiveSHA256: hex.EncodeToString(sum[:]), ArchiveSize: int64(archive.Len())}}
	ws, err := a.stream(ctx, "coordinator", protocol.WalletProtocol)
	if err != nil {
		t.Fatalf("wallet stream: %v", err)
	}
	protocol.WriteJSONFrame(ws, protocol.WalletRequest{Op: "hold", Job: p.Job, Provider: p.Provider, Amount: protocol.HoldAmount(price, 1, lease),
		ExpiresAt: p.IssuedAt.Add(protocol.ProposalTTL + lease*time.Second + protocol.HoldGrace + time.Minute)})
	var hold protocol.WalletResponse
	protocol.ReadJSONFrame(bufio.NewReader(ws), protocol.MaxWalletResponse, &hold)
	ws.Close()
	if hold.Error != "" || len(hold.Hold) == 0 {
		t.Fatalf("no hold for the stingy renter: %s", hold.Error)
	}
	p.Hold = hold.Hold
	s, err := a.stream(ctx, "provider-2", protocol.JobProtocol)
	if err != nil {
		t.Fatalf("job stream: %v", err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(time.Minute))
	in := bufio.NewReader(s)
	protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "propose", Record: a.seal(protocol.KindProposal, p)})
	var acc protocol.JobMsg
	if err := protocol.ReadJSONFrame(in, protocol.MaxJobFrame, &acc); err != nil || acc.Type != "accept" {
		return acc, p.Job
	}
	protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "countersign", Record: a.seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindLease, SHA256: protocol.RecordSHA256(acc.Record), Job: p.Job,
		Signer: a.h.ID().String(), SignedAt: time.Now().UTC()})})
	if !acc.ImageCached {
		s.Write(archive.Bytes())
	}
	var st protocol.JobMsg
	if err := protocol.ReadJSONFrame(in, protocol.MaxJobFrame, &st); err != nil || st.Type != "started" {
		t.Fatalf("the stingy renter's job did not start: %s %s %v", st.Type, st.Reason, err)
	}
	return acc, p.Job
}
