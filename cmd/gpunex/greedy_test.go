//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// The greedy provider: certified by the coordinator like any other, it takes a renter's
// job, runs nothing, and bills the renter for minutes that never passed (a receipt ending
// as far ahead as the clock skew allows). The renter's node countersigns only what it saw,
// so it disputes the receipt; the coordinator charges nothing until a decision.

type greedyProvider struct {
	*attacker
	mu      sync.Mutex
	lease   []byte
	leaseCS []byte
	receipt []byte
	job     string
	// What its offers carry.
	addrs       []string
	certificate []byte
}

func greedyScenario() scenario {
	var g *greedyProvider
	var jobID string
	return scenario{
		name: "inflated-receipt", victim: "coordinator", honest: honestBalance,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			g = newGreedyProvider(t, e)
			jobID = g.rentedAndBilled(t, e)
			return 1
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			ctx := context.Background()
			claimed, _, _ := protocol.OpenReceipt(g.receipt)
			var got api.DisputeView
			deadline := time.Now().Add(20 * time.Second)
			for {
				ds, err := e.clients["coordinator"].Disputes(ctx, false)
				found := false
				for _, d := range ds {
					if d.Job == jobID {
						got, found = d, true
					}
				}
				if found || err != nil || time.Now().After(deadline) {
					break
				}
				e.clients["renter-1"].Job(ctx, jobID) // the renter asks for news: it takes the receipt
				time.Sleep(300 * time.Millisecond)
			}
			if got.Job == "" {
				t.Fatalf("the renter did not dispute a receipt of %d s for a job it saw run for seconds", claimed.Seconds)
			}
			b, _ := e.clients["renter-1"].Balance(ctx, "")
			for _, h := range b.Holds {
				if h.Job == jobID && h.State != "disputed" {
					t.Errorf("the greedy provider's hold is %s, not disputed", h.State)
				}
			}
			return fmt.Sprintf("billed %s USDC for %d s; disputed, renter says %s USDC, charged 0 until a decision", got.ClaimedUSDC, claimed.Seconds, got.RenterSaysUSDC)
		},
	}
}

// newGreedyProvider applies, has the coordinator approve it, and publishes an offer.
func newGreedyProvider(t *testing.T, e *advEnv) *greedyProvider {
	ctx := context.Background()
	g := &greedyProvider{attacker: newAttackerOn(t, e, "127.0.0.3", "renter-1", "coordinator")}
	t.Cleanup(g.close)
	g.h.SetStreamHandler(libp2pprotocol.ID(protocol.JobProtocol), g.handleJob)
	g.h.SetStreamHandler(libp2pprotocol.ID(protocol.JobControlProtocol), g.handleControl)
	app := protocol.Application{Version: protocol.ApplicationVersion, ID: randomHex(6), Provider: g.h.ID().String(), Seq: 1, IssuedAt: time.Now().UTC(),
		Name: "Greedy GPUs", Email: "greedy@example.org", CommitmentMonths: 12,
		GPUs: []protocol.ApplicationGPU{{Model: "H100-80GB", Count: 1, HostRAMGB: 512, UpGbps: 1, DownGbps: 1, Availability: "24/7",
			Location: protocol.Location{City: "Lyon", Country: "FR", Region: "eu-west"}}}}
	g.apply(t, protocol.ApplyRequest{Op: "submit", Record: g.seal(protocol.KindApplication, app)})
	if _, err := e.clients["coordinator"].Decide(ctx, app.ID, api.Decision{Action: "approve", Tier: protocol.TierCommunity, Actor: "adversary test"}); err != nil {
		t.Fatalf("approve the greedy provider: %v", err)
	}
	resp := g.apply(t, protocol.ApplyRequest{Op: "status"})
	env, err := protocol.Open(resp.Notification)
	if err != nil {
		t.Fatal(err)
	}
	n, err := protocol.CheckNotification(env.Raw, time.Now(), protocol.NewTrust(e.id("coordinator")), g.h.ID())
	if err != nil || len(n.Certificate) == 0 {
		t.Fatalf("no certificate for the greedy provider: %v", err)
	}
	var addrs []string
	for _, a := range g.h.Addrs() {
		addrs = append(addrs, a.String()+"/p2p/"+g.h.ID().String())
	}
	g.addrs, g.certificate = addrs, n.Certificate
	now := time.Now().UTC()
	offer := g.seal(protocol.KindOffer, protocol.Offer{Version: protocol.OfferVersion, Provider: g.h.ID().String(), Seq: uint64(now.UnixMilli()), IssuedAt: now,
		ExpiresAt: now.Add(10 * time.Minute), Region: "eu-west", Availability: "24/7", Addrs: addrs, Certificate: n.Certificate,
		GPUs: []protocol.OfferGPUs{{Model: "H100-80GB", Count: 1, VRAMGB: 80, PricePerGPUHour: 3_600_000}}})
	deadline := time.Now().Add(15 * time.Second)
	for {
		g.publish(ctx, protocol.ModelTopic("H100-80GB"), offer)
		seen := 0
		for _, node := range []string{"renter-1", "coordinator"} { // the coordinator holds money only for certified offers it holds
			// Its offer carries no benchmark attestation: searches pass it over unless asked.
			rows, _ := e.clients[node].Search(ctx, url.Values{"model": {"H100-80GB"}, "unbenchmarked": {"true"}})
			for _, r := range rows {
				if r.Provider == g.h.ID().String() {
					seen++
				}
			}
		}
		if seen == 2 {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatal("the renter never saw the greedy provider's offer")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (g *greedyProvider) apply(t *testing.T, req protocol.ApplyRequest) protocol.ApplyResponse {
	s, err := g.stream(context.Background(), "coordinator", protocol.ApplyProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	protocol.WriteJSONFrame(s, req)
	var resp protocol.ApplyResponse
	if err := protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxApplyFrame, &resp); err != nil || resp.Error != "" {
		t.Fatalf("apply %s: %v %s", req.Op, err, resp.Error)
	}
	return resp
}

// rentedAndBilled has the renter run a job on the greedy provider, which then reports a
// receipt ending 4 minutes from now to the coordinator; it returns the job ID.
func (g *greedyProvider) rentedAndBilled(t *testing.T, e *advEnv) string {
	ctx := context.Background()
	v, err := e.clients["renter-1"].ProposeJob(ctx, api.JobRequest{Offer: protocol.OfferID(g.h.ID(), "H100-80GB"), GPUs: 1, MaxSeconds: 3600,
		Image: "example.org/greedy:1", Args: []string{"true"}})
	if err != nil {
		t.Fatalf("the renter's job on the greedy provider: %v", err)
	}
	time.Sleep(2 * time.Second)
	g.mu.Lock()
	l, _, _ := protocol.OpenLease(g.lease)
	end := time.Now().UTC().Add(4 * time.Minute) // as far ahead as the clock skew lets it
	secs := int64(end.Sub(l.IssuedAt) / time.Second)
	g.receipt = g.seal(protocol.KindReceipt, protocol.Receipt{Version: 1, Job: l.Job, Lease: protocol.RecordSHA256(g.lease), Provider: l.Provider,
		Renter: l.Renter, Model: l.Model, GPUs: l.GPUs, StartedAt: l.IssuedAt, EndedAt: end, Seconds: secs, Price: l.Price,
		Amount: protocol.Cost(l.Price, l.GPUs, secs), Reason: "exited"})
	report := protocol.JobReport{Lease: g.lease, LeaseCountersig: g.leaseCS, Receipt: g.receipt}
	g.mu.Unlock()
	s, err := g.stream(ctx, "coordinator", protocol.JobReportProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	protocol.WriteJSONFrame(s, report)
	var answer map[string]string
	protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxJobReportAnswer, &answer)
	if answer["ok"] != "true" || answer["pending"] != "true" {
		t.Errorf("the coordinator's answer to the uncountersigned receipt: %v (want it recorded, its charge pending)", answer)
	}
	return v.ID
}

// handleJob accepts any proposal at its maximum price and says the job started.
func (g *greedyProvider) handleJob(s network.Stream) {
	defer s.Close()
	if job, leasedAt, ok := g.takeLease(s, bufio.NewReader(s)); ok {
		protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "started", Status: &protocol.JobStatus{ID: job, State: "running", StartedAt: leasedAt, GPUUUIDs: []string{"GPU-greedy"}}})
	}
}

// takeLease answers a proposal with a lease at its maximum price, says it holds the image,
// and keeps the renter's countersignature; ok once the lease binds.
func (g *greedyProvider) takeLease(s network.Stream, in *bufio.Reader) (job string, leasedAt time.Time, ok bool) {
	var m protocol.JobMsg
	if protocol.ReadJSONFrame(in, protocol.MaxJobFrame, &m) != nil {
		return "", time.Time{}, false
	}
	p, err := protocol.CheckProposal(m.Record, time.Now())
	if err != nil {
		return "", time.Time{}, false
	}
	now := time.Now().UTC()
	lease := g.seal(protocol.KindLease, protocol.Lease{Version: 1, Job: p.Job, Proposal: protocol.RecordSHA256(m.Record), Renter: p.Renter,
		Provider: p.Provider, Model: p.Model, GPUs: p.GPUs, Price: p.MaxPrice, IssuedAt: now, EndsAt: now.Add(time.Duration(p.MaxSeconds) * time.Second),
		Limits: protocol.Limits{MemoryBytes: 1 << 30, CPUMillis: 1000, Pids: 64, ScratchBytes: 1 << 30}})
	protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "accept", Record: lease, ImageCached: true})
	if protocol.ReadJSONFrame(in, protocol.MaxJobFrame, &m) != nil || m.Type != "countersign" {
		return "", time.Time{}, false
	}
	g.mu.Lock()
	g.lease, g.leaseCS, g.job = lease, m.Record, p.Job
	g.mu.Unlock()
	return p.Job, now, true
}

// handleControl answers every request about the job with its end and the inflated receipt
// (once it is written).
func (g *greedyProvider) handleControl(s network.Stream) {
	defer s.Close()
	var m protocol.JobMsg
	if protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxJobFrame, &m) != nil {
		return
	}
	g.mu.Lock()
	receipt, job := g.receipt, g.job
	g.mu.Unlock()
	switch {
	case m.Op == "receipt-countersign":
		protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "ok"})
	case len(receipt) == 0:
		protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "status", Status: &protocol.JobStatus{ID: job, State: "running"}})
	default:
		protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "end", Status: &protocol.JobStatus{ID: job, State: "ended", ExitReason: "exited"}, Record: receipt})
	}
}

// forgedNetworkScenario: a certified provider with a real challenge attaches benchmark
// attestations that claim a fast link: with a receipt it signed itself, and with the
// coordinator's real receipt of a run that moved nothing but no delisting reason. Renters
// refuse every such offer: none shows the forged figures.
func forgedNetworkScenario() scenario {
	var g *greedyProvider
	return scenario{
		name: "forged-network-figures", victim: "renter-1", honest: honestSearch,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			g = newGreedyProvider(t, e)
			challenge, receipt := g.benchNet(t)
			self := g.seal(protocol.KindNetworkReceipt, protocol.NetworkReceipt{Version: 1, Coordinator: e.id("coordinator").String(),
				Provider: g.h.ID().String(), Nonce: challengeNonce(t, challenge), MeasuredAt: time.Now().UTC(),
				RTTMilli: 1, RTTSamples: 16, UpMbps: 10_000, DownMbps: 10_000, Bytes: 64 << 20, Minimum: protocol.ListingMinimum})
			var n int64
			for ctx.Err() == nil {
				for _, r := range [][]byte{self, receipt} {
					g.publishOffer(ctx, e, g.attestation(challenge, r))
					n++
				}
				time.Sleep(50 * time.Millisecond)
			}
			return n
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			rows, _ := e.clients["renter-1"].Search(context.Background(), url.Values{"unbenchmarked": {"true"}})
			found := 0
			for _, r := range rows {
				if r.Provider == g.h.ID().String() {
					found++
					if r.Bench != nil {
						t.Errorf("a forged attestation's figures are shown: %+v", r.Bench)
					}
				}
			}
			return fmt.Sprintf("%d offers with forged network figures: none accepted (%d row of its earlier offer, no figures)", ops, found)
		},
	}
}

// forgedCatalogueScenario: a certified provider signs model catalogues that give the H100
// tiny reference figures (one in its own name, one in the coordinator's), gossips them, and
// attaches attestations whose weak figures score 100 under them. Renters keep their coordinator's
// catalogue and refuse every such attestation: no row shows the inflated score.
func forgedCatalogueScenario() scenario {
	var g *greedyProvider
	return scenario{
		name: "forged-catalogue", victim: "renter-1", honest: honestSearch,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			g = newGreedyProvider(t, e)
			challenge, receipt := g.benchNet(t)
			models := append([]protocol.ModelEntry(nil), protocol.FirstModels().Models...)
			for i := range models {
				if models[i].Model == "H100-80GB" {
					models[i].FP32TFLOPS, models[i].FP16TFLOPS, models[i].TensorTFLOPS, models[i].MemBandwidth = 1, 1, 1, 1
				}
			}
			var n int64
			for seq := uint64(1); ctx.Err() == nil; seq++ {
				// Its own catalogue, and one that claims to be the coordinator's.
				for _, c := range []string{g.h.ID().String(), e.id("coordinator").String()} {
					g.publish(ctx, protocol.ModelsTopic, g.seal(protocol.KindModelCatalogue, protocol.ModelCatalogue{Version: 1, Coordinator: c,
						Seq: seq, IssuedAt: time.Now().UTC(), Models: models}))
					n++
				}
				weak := protocol.GPUBenchmark{UUID: "GPU-greedy", Model: "H100-80GB", FP32TFLOPS: 5, FP16TFLOPS: 10, TensorTFLOPS: 70, MemBandwidth: 200, PerfScore: 100}
				now := time.Now().UTC()
				g.publishOffer(ctx, e, g.seal(protocol.KindAttestation, protocol.Attestation{Version: 1, Provider: g.h.ID().String(), Seq: uint64(now.UnixNano()),
					IssuedAt: now, Challenge: challenge, GPUs: []protocol.GPUBenchmark{weak}, NetworkReceipt: receipt,
					Storage: protocol.StorageBenchmark{SeqWriteMBps: 5000, SeqReadMBps: 10000, RandReadIOPS: 1e6, BytesMeasured: 1 << 30}}))
				n++
				time.Sleep(50 * time.Millisecond)
			}
			return n
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			v, err := e.clients["renter-1"].Models(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range v.Models {
				if m.Model == "H100-80GB" && m.TensorTFLOPS != 756.5 {
					t.Errorf("the renter's catalogue took forged figures: %+v (catalogue %d of %s)", m, v.Seq, v.Coordinator)
				}
			}
			rows, _ := e.clients["renter-1"].Search(context.Background(), url.Values{"unbenchmarked": {"true"}})
			for _, r := range rows {
				if r.Provider == g.h.ID().String() && r.Bench != nil {
					t.Errorf("an attestation scored with a forged catalogue is shown: %+v", r.Bench)
				}
			}
			return fmt.Sprintf("%d forged catalogues and attestations scored with them: the renter's catalogue and search unchanged", ops)
		},
	}
}

// benchNet asks the coordinator for a challenge and, without any transfer, its receipt.
func (g *greedyProvider) benchNet(t *testing.T) (challenge, receipt []byte) {
	s, err := g.stream(context.Background(), "coordinator", protocol.BenchNetProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := bufio.NewReader(s)
	for _, op := range []string{"challenge", "receipt"} {
		protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: op})
		var m protocol.BenchNetMsg
		if err := protocol.ReadJSONFrame(in, protocol.MaxBenchNetAnswer, &m); err != nil || m.Error != "" {
			t.Fatalf("bench-net %s: %v %s", op, err, m.Error)
		}
		if op == "challenge" {
			challenge = m.Record
		} else {
			receipt = m.Record
		}
	}
	return challenge, receipt
}

// attestation signs a perfect H100's figures with the challenge and the receipt given,
// and no delisting reason.
func (g *greedyProvider) attestation(challenge, receipt []byte) []byte {
	d, _ := protocol.FirstModels().Datasheet("H100-80GB")
	gpu := protocol.GPUBenchmark{UUID: "GPU-greedy", Model: "H100-80GB", FP32TFLOPS: d.FP32TFLOPS, FP16TFLOPS: d.FP16TFLOPS,
		TensorTFLOPS: d.TensorTFLOPS, MemBandwidth: d.MemBandwidth}
	gpu.PerfScore = protocol.FirstModels().Score(gpu)
	now := time.Now().UTC()
	return g.seal(protocol.KindAttestation, protocol.Attestation{Version: 1, Provider: g.h.ID().String(), Seq: uint64(now.UnixNano()), IssuedAt: now,
		Challenge: challenge, GPUs: []protocol.GPUBenchmark{gpu}, NetworkReceipt: receipt,
		Storage: protocol.StorageBenchmark{SeqWriteMBps: 5000, SeqReadMBps: 10000, RandReadIOPS: 1e6, BytesMeasured: 1 << 30}})
}

// publishOffer gossips a new offer of the greedy provider's H100 carrying attestation.
func (g *greedyProvider) publishOffer(ctx context.Context, e *advEnv, attestation []byte) {
	now := time.Now().UTC()
	g.publish(ctx, protocol.ModelTopic("H100-80GB"), g.seal(protocol.KindOffer, protocol.Offer{Version: protocol.OfferVersion, Provider: g.h.ID().String(),
		Seq: uint64(now.UnixNano()), IssuedAt: now, ExpiresAt: now.Add(10 * time.Minute), Region: "eu-west", Availability: "24/7",
		Addrs: g.addrs, Certificate: g.certificate, Attestation: attestation,
		GPUs: []protocol.OfferGPUs{{Model: "H100-80GB", Count: 1, VRAMGB: 80, PricePerGPUHour: 3_600_000}}}))
}

func challengeNonce(t *testing.T, raw []byte) string {
	env, err := protocol.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	var c protocol.Challenge
	if err := json.Unmarshal(env.Payload, &c); err != nil {
		t.Fatal(err)
	}
	return c.Nonce
}
