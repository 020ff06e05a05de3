//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	varint "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// Data in under attack (docs/protocols/jobs.md, "Data in"): a paying renter whose input
// never finishes (it trickles, or stops mid-way), and strangers sending chunks for jobs
// that are not theirs. The victim's memory and CPU are the harness's budgets; its disk is
// what it stored of the inputs (gpunex_job_input_bytes_total{outcome="received"}): no
// chunk of an input that never finishes is complete, so nothing.

// inputLease is a short lease's length: the provider waits for an input until its end.
const inputLease = 3

// Results the input scenarios' checks read.
var (
	inputJobsMu     sync.Mutex
	inputJobs       []string // jobs the hostile renter had leased
	inputCutLate    atomic.Int64
	inputCutAfter   atomic.Int64 // longest time from a lease to the provider's cut, in ms
	inputReceived0  float64
	strangerReady   atomic.Int64
	strangerRefused atomic.Int64
	strangerBytes0  float64
)

func inputScenarios() []scenario {
	return []scenario{
		{
			// renter-1 turned hostile (its own identity, its own funds): each job it leases
			// with a 64 MiB input gets one chunk, trickled at 20 KiB/s or stopped half-way.
			name: "input-never-finishes", victim: "provider-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				inputReceived0 = inputBytes(t, e, "provider-1", "received")
				key, err := config.Home{Dir: e.nodes["renter-1"].Home}.Identity()
				if err != nil {
					t.Fatal(err)
				}
				a := newAttackerKeyed(t, e, key, "127.0.0.2", "coordinator", "provider-1")
				defer a.close()
				var n int64
				for round := 0; ctx.Err() == nil; round++ {
					if hostileInput(ctx, t, a, e, round%2 == 0) {
						n++
					}
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				inputJobsMu.Lock()
				jobs := append([]string(nil), inputJobs...)
				inputJobsMu.Unlock()
				if len(jobs) == 0 {
					t.Fatal("no job was leased to the hostile renter: the scenario tested nothing")
				}
				// The provider's word on each job: failed at the lease's end, its GPU free.
				var views []api.JobView
				deadline := time.Now().Add(20 * time.Second)
				for {
					views, _ = e.clients["provider-1"].Jobs(context.Background())
					if pending := waitingInputs(views, jobs); pending == 0 || time.Now().After(deadline) {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				failed := 0
				for _, v := range views {
					for _, id := range jobs {
						if v.ID != id {
							continue
						}
						if v.State != "failed" || !strings.Contains(v.Error, "did not arrive") {
							t.Errorf("job %s of an input that never finished is %s (%s), not failed at its deadline", id, v.State, v.Error)
						} else {
							failed++
						}
					}
				}
				if inputCutLate.Load() > 0 {
					t.Errorf("%d input streams were not cut within 5 s of their lease's end", inputCutLate.Load())
				}
				stored := inputBytes(t, e, "provider-1", "received") - inputReceived0
				if stored != 0 {
					t.Errorf("the provider stored %.0f bytes of inputs that never finished", stored)
				}
				return fmt.Sprintf("%d jobs leased, %d failed at their lease's end (%d s), each input stream cut within %.1f s of the lease; 0 bytes stored",
					len(jobs), failed, inputLease, float64(inputCutAfter.Load())/1000)
			},
		},
		{
			// Identities rotating to send chunks for jobs they do not rent, without waiting
			// for an answer.
			name: "input-stranger", victim: "provider-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				strangerBytes0 = inputBytes(t, e, "provider-1", "received")
				chunk := make([]byte, 64<<10)
				return sybil(ctx, t, e, "provider-1", protocol.JobInputProtocol, 10, func(a *attacker, s network.Stream) {
					s.SetDeadline(time.Now().Add(5 * time.Second))
					protocol.WriteJSONFrame(s, protocol.InputMsg{Type: "open", Job: randomHex(8)})
					protocol.WriteInputChunk(s, 0, chunk)
					var m protocol.InputMsg
					protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxInputMsgFrame, &m)
					switch {
					case m.Type == "ready" || m.Type == "missing":
						strangerReady.Add(1)
					case strings.Contains(m.Reason, "no job of yours"):
						strangerRefused.Add(1)
					}
				})
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				if strangerReady.Load() != 0 {
					t.Errorf("the provider took %d strangers' input streams further than their first frame", strangerReady.Load())
				}
				if got := inputBytes(t, e, "provider-1", "received") - strangerBytes0; got != 0 {
					t.Errorf("the provider stored %.0f bytes from strangers", got)
				}
				return fmt.Sprintf("%d of %d streams refused at their first frame (no job of theirs), 0 bytes stored", strangerRefused.Load(), ops)
			},
		},
	}
}

// waitingInputs counts the jobs among ids still leased on the provider.
func waitingInputs(views []api.JobView, ids []string) int {
	n := 0
	for _, v := range views {
		for _, id := range ids {
			if v.ID == id && v.State == "leased" {
				n++
			}
		}
	}
	return n
}

// hostileInput has the attacker lease a job on provider-1 with a 64 MiB input and send one
// chunk of it, trickling (1 KiB every 50 ms) or stopping half-way, until the provider cuts
// the stream. It says whether the job was leased.
func hostileInput(ctx context.Context, t *testing.T, a *attacker, e *advEnv, trickle bool) bool {
	var model string
	var price protocol.MicroUSDC
	rows, _ := e.clients["renter-1"].Search(ctx, nil)
	for _, r := range rows {
		if r.Provider == e.nodes["provider-1"].PeerID {
			model, price = r.Model, r.PriceMicroUSDC
		}
	}
	if model == "" {
		time.Sleep(200 * time.Millisecond)
		return false
	}
	var archive bytes.Buffer
	sandbox.BusyboxImage(&archive, "gpunex.devnet/busybox:1") // the devnet's demo image: cached for renter-1
	archiveSum := sha256.Sum256(archive.Bytes())
	m := protocol.InputManifest{Version: protocol.InputVersion, ChunkSize: protocol.InputChunkSize,
		Entries: []protocol.InputEntry{{Path: "data.bin", Type: protocol.InputFile, Mode: 0o644, Size: 16 * protocol.InputChunkSize}}}
	for range 16 {
		m.Entries[0].Chunks = append(m.Entries[0].Chunks, randomHex(32))
	}
	manifest, _ := json.Marshal(m)
	sum := sha256.Sum256(manifest)
	p := protocol.Proposal{Version: protocol.JobVersion, Job: randomHex(8), Renter: a.h.ID().String(), Provider: e.nodes["provider-1"].PeerID,
		IssuedAt: time.Now().UTC(), Model: model, GPUs: 1, MaxSeconds: inputLease, MaxPrice: price,
		Image: protocol.Image{ArchiveSHA256: hex.EncodeToString(archiveSum[:]), ArchiveSize: int64(archive.Len())},
		Input: &protocol.InputRef{Manifest: hex.EncodeToString(sum[:]), ManifestSize: int64(len(manifest)), Bytes: m.Bytes()}}

	// The escrow hold, from renter-1's own funds.
	ws, err := a.stream(ctx, "coordinator", protocol.WalletProtocol)
	if err != nil {
		return false
	}
	protocol.WriteJSONFrame(ws, protocol.WalletRequest{Op: "hold", Job: p.Job, Provider: p.Provider, Amount: protocol.HoldAmount(price, 1, inputLease),
		ExpiresAt: p.IssuedAt.Add(protocol.ProposalTTL + inputLease*time.Second + protocol.HoldGrace + time.Minute)})
	var hold protocol.WalletResponse
	protocol.ReadJSONFrame(bufio.NewReader(ws), protocol.MaxWalletResponse, &hold)
	ws.Close()
	if hold.Error != "" || len(hold.Hold) == 0 {
		t.Logf("no hold for the hostile renter: %s", hold.Error)
		time.Sleep(time.Second)
		return false
	}
	p.Hold = hold.Hold

	// The job stream, up to the lease and the provider's word that it takes the input.
	s, err := a.stream(ctx, "provider-1", protocol.JobProtocol)
	if err != nil {
		return false
	}
	defer s.Reset()
	s.SetDeadline(time.Now().Add(30 * time.Second))
	in := bufio.NewReader(s)
	protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "propose", Record: a.seal(protocol.KindProposal, p)})
	var acc protocol.JobMsg
	if err := protocol.ReadJSONFrame(in, protocol.MaxJobFrame, &acc); err != nil || acc.Type != "accept" {
		t.Logf("the hostile renter's proposal was not leased: %s %s", acc.Type, acc.Reason)
		time.Sleep(time.Second)
		return false
	}
	leased := time.Now()
	inputJobsMu.Lock()
	inputJobs = append(inputJobs, p.Job)
	inputJobsMu.Unlock()
	protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "countersign", Record: a.seal(protocol.KindCountersignature, protocol.Countersignature{
		Version: protocol.JobVersion, Of: protocol.KindLease, SHA256: protocol.RecordSHA256(acc.Record), Job: p.Job,
		Signer: a.h.ID().String(), SignedAt: time.Now().UTC()})})
	var welcome protocol.JobMsg
	if err := protocol.ReadJSONFrame(in, protocol.MaxJobFrame, &welcome); err != nil || welcome.Type != "input" {
		t.Errorf("the provider did not take the input: %s %s %v", welcome.Type, welcome.Reason, err)
		return true
	}
	if !acc.ImageCached {
		s.Write(archive.Bytes())
	}

	// The input stream: the manifest, then one chunk that never ends.
	is, err := a.stream(ctx, "provider-1", protocol.JobInputProtocol)
	if err != nil {
		return true
	}
	defer is.Reset()
	is.SetDeadline(time.Now().Add(inputLease*time.Second + 15*time.Second))
	iin := bufio.NewReader(is)
	var msg protocol.InputMsg
	protocol.WriteJSONFrame(is, protocol.InputMsg{Type: "open", Job: p.Job})
	if protocol.ReadJSONFrame(iin, protocol.MaxInputMsgFrame, &msg); msg.Type != "ready" {
		t.Errorf("the provider did not ask for the manifest: %+v", msg)
		return true
	}
	protocol.WriteFrame(is, manifest)
	if protocol.ReadJSONFrame(iin, protocol.MaxInputMsgFrame, &msg); msg.Type != "missing" {
		t.Errorf("the provider did not ask for chunks: %+v", msg)
		return true
	}
	var hdr [2 * varint.MaxVarintLen64]byte
	n := varint.PutUvarint(hdr[:], uint64(1+protocol.InputChunkSize))
	hdr[n] = 0 // chunk 0
	is.Write(hdr[:n+1])
	if trickle {
		for err == nil {
			_, err = is.Write(make([]byte, 1<<10))
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		is.Write(make([]byte, protocol.InputChunkSize/2))
		_, err = io.Copy(io.Discard, iin) // nothing comes until the provider gives up
	}
	took := time.Since(leased)
	if took > inputLease*time.Second+5*time.Second {
		inputCutLate.Add(1)
	}
	if ms := took.Milliseconds(); ms > inputCutAfter.Load() {
		inputCutAfter.Store(ms)
	}
	return true
}

// inputBytes reads a node's gpunex_job_input_bytes_total{outcome} from its /metrics.
func inputBytes(t *testing.T, e *advEnv, name, outcome string) float64 {
	t.Helper()
	return nodeMetric(t, e, name, `gpunex_job_input_bytes_total{outcome="`+outcome+`"}`)
}
