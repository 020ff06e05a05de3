package devnet

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	chain "github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/config"
)

// The soak's faults: a schedule drawn from the seed, and what applies each.

// The kinds of fault.
const (
	FaultKill    = "kill -9"       // a node killed, restarted on its home after a while
	FaultRPCSlow = "rpc slow"      // every Solana RPC call answered 1 to 4 s late
	FaultRPCFail = "rpc failing"   // every Solana RPC call answered 503
	FaultRPCDrop = "rpc drops txs" // transactions acknowledged and never sent
	FaultDisk    = "disk full"     // a provider's file system filled to its last MiB, then freed
	// FaultPartition: two nodes cut apart (a provider and the coordinator, a renter and a
	// provider, or a renter and the coordinator), then healed.
	FaultPartition = "partition"
	// FaultClock: a node restarted with its clock Offset by 1 to 5 minutes either way
	// (config debug.clock_offset), then restarted with the right time.
	FaultClock = "clock skew"
)

// FaultKinds are the kinds of fault, in the order of the soak's table.
var FaultKinds = []string{FaultKill, FaultRPCSlow, FaultRPCFail, FaultRPCDrop, FaultDisk, FaultPartition, FaultClock}

// maxSkew is the largest clock offset the soak gives a node: protocol.MaxClockSkew, at
// which the other nodes begin to refuse its records.
const maxSkew = 5 * time.Minute

// Fault is one fault of the schedule: its kind, from At after the start for For, on
// Target (a node's name, for every kind but the RPC's) and, for a partition, from Peer;
// a clock skew moves Target's clock by Offset.
type Fault struct {
	At     time.Duration `json:"at"`
	Kind   string        `json:"kind"`
	Target string        `json:"target,omitempty"`
	Peer   string        `json:"peer,omitempty"`
	Offset time.Duration `json:"offset,omitempty"`
	For    time.Duration `json:"for"`
}

func (f Fault) String() string {
	on := ""
	if f.Target != "" {
		on = " " + f.Target
	}
	if f.Peer != "" {
		on += " from " + f.Peer
	}
	if f.Offset != 0 {
		on += fmt.Sprintf(" by %+.0f min", f.Offset.Minutes())
	}
	return fmt.Sprintf("at %6s: %s%s for %s", f.At.Round(time.Second), f.Kind, on, f.For.Round(time.Second))
}

// drawSchedule draws the faults of a soak from its seed: one every 0.5 to 1.5 FaultEvery
// (at least 5 s apart), each kind in turn, then kills and partitions again; each lasts
// 2 s to MaxDown, a partition twice that (a TCP connection outlives a short one), a clock
// skew four times (a restart takes some of it, and leases and checkpoints need a while).
func drawSchedule(o SoakOptions, nodes []string) []Fault {
	rng := rand.New(rand.NewPCG(o.Seed, 0x50a4))
	kinds := []string{FaultKill, FaultPartition, FaultClock, FaultRPCSlow, FaultRPCFail, FaultDisk, FaultRPCDrop, FaultKill, FaultPartition, FaultKill}
	var providers, renters []string
	for _, n := range nodes {
		switch {
		case strings.HasPrefix(n, "provider-"):
			providers = append(providers, n)
		case strings.HasPrefix(n, "renter-"):
			renters = append(renters, n)
		}
	}
	var out []Fault
	at := time.Duration(0)
	for i := 0; ; i++ {
		at += max(5*time.Second, o.FaultEvery/2+time.Duration(rng.Int64N(int64(o.FaultEvery)+1)))
		if at >= o.Duration {
			return out
		}
		f := Fault{At: at, Kind: kinds[i%len(kinds)], For: 2*time.Second + time.Duration(rng.Int64N(int64(o.MaxDown-2*time.Second)+1))}
		switch f.Kind {
		case FaultKill:
			f.Target = nodes[rng.IntN(len(nodes))]
		case FaultDisk:
			if len(providers) == 0 {
				continue
			}
			f.Target = providers[rng.IntN(len(providers))]
		case FaultClock:
			f.For *= 4
			f.Target = nodes[rng.IntN(len(nodes))]
			f.Offset = time.Duration(1+rng.IntN(int(maxSkew/time.Minute))) * time.Minute
			if rng.IntN(2) == 0 {
				f.Offset = -f.Offset
			}
		case FaultPartition:
			if len(providers) == 0 || len(renters) == 0 {
				continue
			}
			f.For *= 2
			provider, renter := providers[rng.IntN(len(providers))], renters[rng.IntN(len(renters))]
			switch rng.IntN(3) {
			case 0:
				f.Target, f.Peer = provider, "coordinator"
			case 1:
				f.Target, f.Peer = renter, provider
			default:
				f.Target, f.Peer = renter, "coordinator"
			}
		}
		out = append(out, f)
	}
}

// faults applies the schedule until ctx ends; each fault runs on its own, so that they
// may overlap as they would in life.
func (s *soak) faults(ctx context.Context) {
	start := time.Now()
	done := make(chan struct{}, len(s.report.Schedule))
	started := 0
	for _, f := range s.report.Schedule {
		if !sleepCtx(ctx, time.Until(start.Add(f.At))) {
			break
		}
		started++
		go func() {
			defer func() { done <- struct{}{} }()
			s.apply(ctx, f)
		}()
	}
	for ; started > 0; started-- {
		<-done
	}
}

// apply applies one fault and undoes it after its time, even past the soak's end.
func (s *soak) apply(ctx context.Context, f Fault) {
	switch f.Kind {
	case FaultKill:
		s.kill(ctx, f)
	case FaultDisk:
		s.fillDisk(ctx, f)
	case FaultPartition:
		s.partition(ctx, f)
	case FaultClock:
		s.skewClock(ctx, f)
	default:
		mode := map[string]int32{FaultRPCSlow: rpcSlow, FaultRPCFail: rpcFail, FaultRPCDrop: rpcDrop}[f.Kind]
		s.rpc.SetMode(mode)
		s.count(s.report.Applied, f.Kind)
		sleepCtx(context.WithoutCancel(ctx), f.For)
		s.rpc.mode.CompareAndSwap(mode, rpcNormal)
	}
}

// kill kills a node with SIGKILL, as in a power cut, and restarts it on its home after
// the fault's time. A node already down is left alone.
func (s *soak) kill(ctx context.Context, f Fault) {
	s.procMu.Lock()
	var p *devnetProc
	for _, q := range s.procs {
		if q.Name == f.Target && !q.Offline {
			p = q
		}
	}
	if p == nil {
		s.procMu.Unlock()
		return
	}
	p.cmd.Process.Kill()
	err := <-p.done
	p.done <- err
	p.Offline = true
	config.Home{Dir: p.Home}.RemoveAPIAddr()
	s.procMu.Unlock()
	s.count(s.report.Applied, f.Kind)
	sleepCtx(context.WithoutCancel(ctx), f.For)
	s.procMu.Lock()
	defer s.procMu.Unlock()
	if err := s.launch(context.WithoutCancel(ctx), p, true); err != nil {
		s.breaks("restart", fmt.Sprintf("%s did not come back after kill -9: %v", p.Name, err))
	}
}

// skewClock restarts a node with its clock moved by the fault's offset, and after the
// fault's time restarts it with the right time. A node a kill has down takes the offset
// at the kill's restart.
func (s *soak) skewClock(ctx context.Context, f Fault) {
	ctx = context.WithoutCancel(ctx) // the soak's end waits for the clock to be right again
	if err := s.restartSkewed(ctx, f.Target, f.Offset); err != nil {
		s.breaks("restart", fmt.Sprintf("%s with its clock %s off: %v", f.Target, f.Offset, err))
		return
	}
	s.count(s.report.Applied, f.Kind)
	sleepCtx(ctx, f.For)
	if err := s.restartSkewed(ctx, f.Target, 0); err != nil {
		s.breaks("restart", fmt.Sprintf("%s with its clock right again: %v", f.Target, err))
	}
}

// restartSkewed writes a node's clock offset into its config and restarts it (SIGTERM,
// as an operator would, then SIGKILL after 15 s), unless it is down.
func (s *soak) restartSkewed(ctx context.Context, name string, offset time.Duration) error {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	var p *devnetProc
	for _, q := range s.procs {
		if q.Name == name {
			p = q
		}
	}
	if p == nil {
		return fmt.Errorf("no node %s", name)
	}
	h := config.Home{Dir: p.Home}
	cfg, err := h.Config()
	if err != nil {
		return err
	}
	cfg.Debug.ClockOffset = config.Duration{Duration: offset}
	if err := h.WriteConfig(cfg); err != nil {
		return err
	}
	if p.Offline {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		p.done <- <-p.done
	}
	p.Offline = true
	h.RemoveAPIAddr()
	return s.launch(ctx, p, true)
}

// The RPC proxy's modes.
const (
	rpcNormal int32 = iota
	rpcSlow
	rpcFail
	rpcDrop
)

// rpcProxy stands between the nodes and the local Solana runtime, passing JSON-RPC calls
// on, or slowing them, failing them, or acknowledging transactions it never sends.
type rpcProxy struct {
	URL      string
	upstream string
	mode     atomic.Int32
	srv      *http.Server
	dropped  atomic.Int64
}

func newRPCProxy(upstream string) (*rpcProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &rpcProxy{URL: "http://" + ln.Addr().String(), upstream: upstream}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

func (p *rpcProxy) SetMode(m int32) { p.mode.Store(m) }

func (p *rpcProxy) Close() { p.srv.Close() }

func (p *rpcProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch p.mode.Load() {
	case rpcSlow:
		time.Sleep(time.Second + time.Duration(rand.Int64N(int64(3*time.Second))))
	case rpcFail:
		http.Error(w, "the soak's RPC proxy fails this call", http.StatusServiceUnavailable)
		return
	case rpcDrop:
		if answer, ok := dropTransaction(body); ok {
			p.dropped.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Write(answer)
			return
		}
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, p.upstream, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// dropTransaction answers a sendTransaction call as the runtime would (the transaction's
// first signature) without sending it; other calls are not its business.
func dropTransaction(body []byte) ([]byte, bool) {
	var call struct {
		ID     json.RawMessage   `json:"id"`
		Method string            `json:"method"`
		Params []json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &call) != nil || call.Method != "sendTransaction" || len(call.Params) == 0 {
		return nil, false
	}
	var encoded string
	if json.Unmarshal(call.Params[0], &encoded) != nil {
		return nil, false
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, false // base58-encoded: pass it on
	}
	sig, err := chain.TransactionSignature(raw)
	if err != nil {
		return nil, false
	}
	answer, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": call.ID, "result": sig.String()})
	return answer, true
}
