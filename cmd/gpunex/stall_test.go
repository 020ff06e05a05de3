//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// stalledStartScenario: a certified provider takes the renter's job (a signed lease, the
// image "already held") and never starts it, to hold the renter's request and escrow hold
// for as long as the renter waits: 11 minutes before the renter's start deadline. The
// renter's node gives up 2 minutes after the lease (the image needs no transfer), records
// the job failed and asks the provider to cancel it.
func stalledStartScenario() scenario {
	var g *greedyProvider
	var cancels atomic.Int64
	return scenario{
		name: "stalled-start", victim: "renter-1", honest: honestSearch,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			g = newGreedyProvider(t, e)
			g.h.SetStreamHandler(libp2pprotocol.ID(protocol.JobProtocol), g.leaseAndStall)
			g.h.SetStreamHandler(libp2pprotocol.ID(protocol.JobControlProtocol), func(s network.Stream) {
				defer s.Close()
				var m protocol.JobMsg
				if protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxJobFrame, &m) == nil && m.Op == "cancel" {
					cancels.Add(1) // and no answer: a greedy provider confirms nothing
				}
			})
			archive := filepath.Join(t.TempDir(), "busybox.tar")
			f, err := os.Create(archive)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sandbox.BusyboxImage(f, "gpunex.test/busybox:1"); err != nil {
				t.Fatal(err)
			}
			f.Close()
			// The API client gives up on the answer after a minute; the renter's node goes
			// on waiting, and its ledger says when it stopped.
			go e.clients["renter-1"].ProposeJob(context.Background(), api.JobRequest{Offer: protocol.OfferID(g.h.ID(), "H100-80GB"),
				GPUs: 1, MaxSeconds: 3600, ImageArchive: archive, Args: []string{"true"}})
			<-ctx.Done()
			return 1
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			var job string
			var leased time.Time
			var j api.JobView
			for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
				g.mu.Lock()
				var raw []byte
				job, raw = g.job, g.lease
				g.mu.Unlock()
				if l, _, err := protocol.OpenLease(raw); err == nil {
					leased = l.IssuedAt
					if j, err = e.clients["renter-1"].Job(context.Background(), job); err == nil && j.State == "failed" {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("the renter still waits for job %q (%s) 3 minutes after the attack began: leased at %s, never started", job, j.State, leased)
				}
			}
			took := time.Since(leased)
			if !strings.Contains(j.Error, "the provider did not start the job in time") {
				t.Errorf("the renter's record of the stalled job: %s: %s", j.State, j.Error)
			}
			deadline := time.Now().Add(10 * time.Second)
			for cancels.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if cancels.Load() == 0 {
				t.Error("the renter did not ask the stalling provider to cancel the job")
			}
			return fmt.Sprintf("held the renter's request %s after the lease (the renter's start deadline), then cancelled", took.Round(time.Second))
		},
	}
}

// leaseAndStall takes the lease (takeLease) and then says nothing until the renter gives up.
func (g *greedyProvider) leaseAndStall(s network.Stream) {
	defer s.Close()
	in := bufio.NewReader(s)
	if _, _, ok := g.takeLease(s, in); ok {
		io.Copy(io.Discard, in) // until the renter cuts the stream
	}
}
