package jobs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// A job tunnel against a plain TCP connection, over one link of two real libp2p hosts on the
// loopback (libp2p's defaults, as the node's): 1 GiB written to a sink that
// stands for the job's port (the renter's DialPort, the provider's dial of the sink), and a
// small HTTP request on a new connection each time (as a forward makes one per
// connection), p50 of 200. The plain copy and the tunnel cross the same namespace, this
// machine's one, both ends in this process: the plain copy is one loopback TCP connection
// (writer to sink), the tunnel is the libp2p connection (renter to provider) and then the
// provider's own TCP connection to the sink. The provider's dial into a job's namespace
// (sandbox.Runtime.Dial) costs only at the opening; a renter's forward (the CLI's listener,
// the local API's upgrade) adds its own loopback legs, not measured here.
//
// Two links: tcp (TCP, TLS, yamux) and quic, the one two nodes with the default listen
// addresses end up on (libp2p dials QUIC first).
//
//	go test ./node/internal/jobs -run XXX -bench Tunnel -benchtime 1x
//
// The targets (issue 29): at least 50% of the plain copy's rate; under 2 ms added to the
// request's p50. Besides the rates, the CPU time (user and system, every thread of the
// process) each GiB took: the rates swing with the machine's load, these less.
func BenchmarkTunnel(b *testing.B) {
	b.Run("tcp", func(b *testing.B) { benchTunnel(b, "/ip4/127.0.0.1/tcp/0") })
	b.Run("quic", func(b *testing.B) { benchTunnel(b, "/ip4/127.0.0.1/udp/0/quic-v1") })
}

// benchTunnel is BenchmarkTunnel over a link of hosts listening on listen.
func benchTunnel(b *testing.B, listen string) {
	const size = 1 << 30
	sink := serveSink(b)
	page := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })}
	pageLn, _ := net.Listen("tcp", "127.0.0.1:0")
	go page.Serve(pageLn)
	b.Cleanup(func() { page.Close() })

	pkey, ppeer := benchHostOn(b, listen)
	rkey, rpeer := benchHostOn(b, listen)
	if err := rpeer.Host.Connect(context.Background(), peer.AddrInfo{ID: ppeer.ID, Addrs: ppeer.Host.Addrs()}); err != nil {
		b.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	pl, _ := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	defer pl.Close()
	rl, _ := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	defer rl.Close()
	cfg := testJobsConfig()
	cfg.MaxTunnels, cfg.TunnelsPerMinute = 64, 1<<20
	rt := newFakeRuntime()
	rt.listen(8000, sink)
	rt.listen(8001, pageLn.Addr().String())
	r, err := NewRunner(Deps{Base: subsystem.Base{Peer: ppeer, Clock: clk, Log: quiet(), Metrics: newMetrics()}, Ledger: pl.Jobs, Jobs: cfg, Runtime: rt,
		Dir: filepath.Join(b.TempDir(), "jobs"),
		Probe: func() (bench.Probe, error) {
			return bench.NewSimulated(ppeer.ID.String(), []bench.SimulatedGPU{{Model: "L4-24GB"}}), nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	ppeer.Handle(protocol.JobTunnelProtocol, r.HandleTunnel)
	rn := NewRenter(RenterDeps{Base: subsystem.Base{Peer: rpeer, Clock: clk, Log: quiet(), Metrics: newMetrics()}, Ledger: rl.Jobs})
	job := benchRunningJob(b, pl, rl, pkey, rkey, ppeer.ID, rpeer.ID)
	rt.run(job)

	var plain, tunnel, plainCPU, tunnelCPU time.Duration
	buf := make([]byte, 256<<10)
	send := func(c net.Conn, cpu *time.Duration) time.Duration {
		t0, cpu0 := time.Now(), processCPU()
		defer func() { *cpu += processCPU() - cpu0 }()
		for n := 0; n < size; n += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		closeWrite(c)
		if _, err := c.Read(make([]byte, 1)); err != nil { // the sink's word that it has it all
			b.Fatal(err)
		}
		c.Close()
		return time.Since(t0)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", sink)
		if err != nil {
			b.Fatal(err)
		}
		plain += send(c, &plainCPU)
		t, err := rn.DialPort(context.Background(), job, 8000)
		if err != nil {
			b.Fatal(err)
		}
		tunnel += send(t, &tunnelCPU)
	}
	b.StopTimer()
	plainRate := float64(b.N) * size / plain.Seconds() / (1 << 20)
	tunnelRate := float64(b.N) * size / tunnel.Seconds() / (1 << 20)
	b.ReportMetric(plainRate, "plain-MiB/s")
	b.ReportMetric(tunnelRate, "tunnel-MiB/s")
	b.ReportMetric(100*tunnelRate/plainRate, "tunnel/plain-%")
	// What each GiB cost (both ends, user and system): what bounds the tunnel's rate where
	// its stages share fewer cores than they would keep busy, as on a 2-core machine.
	gib := float64(b.N) * size / (1 << 30)
	b.ReportMetric(plainCPU.Seconds()/gib, "plain-cpu-s/GiB")
	b.ReportMetric(tunnelCPU.Seconds()/gib, "tunnel-cpu-s/GiB")

	plainP50 := requestP50(b, func() (net.Conn, error) { return net.Dial("tcp", pageLn.Addr().String()) })
	tunnelP50 := requestP50(b, func() (net.Conn, error) { return rn.DialPort(context.Background(), job, 8001) })
	b.ReportMetric(float64(plainP50.Microseconds())/1000, "plain-p50-ms")
	b.ReportMetric(float64(tunnelP50.Microseconds())/1000, "tunnel-p50-ms")
	b.ReportMetric(float64((tunnelP50-plainP50).Microseconds())/1000, "added-p50-ms")
}

// serveSink serves a sink on the loopback: it reads a connection to its end, then writes
// one byte and closes it.
func serveSink(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c)
				c.Write([]byte{1})
			}()
		}
	}()
	return ln.Addr().String()
}

// requestP50 is the median time of 200 small HTTP requests, each on a new connection.
func requestP50(b *testing.B, dial func() (net.Conn, error)) time.Duration {
	var times []time.Duration
	for range 200 {
		t0 := time.Now()
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: job\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatal(err)
		}
		io.ReadAll(resp.Body)
		c.Close()
		times = append(times, time.Since(t0))
	}
	slices.Sort(times)
	return times[len(times)/2]
}

// benchRunningJob records a running job declaring ports 8000 and 8001 in both ledgers: the
// provider's (its lease) and the renter's (its proposal).
func benchRunningJob(b *testing.B, pl, rl *ledger.Ledger, pkey, rkey crypto.PrivKey, provider, renter peer.ID) string {
	b.Helper()
	now := time.Now().UTC()
	p := protocol.Proposal{Version: protocol.JobVersion, Job: newJobID(), Renter: renter.String(), Provider: provider.String(), IssuedAt: now,
		Model: "L4-24GB", GPUs: 1, MaxSeconds: 3600, MaxPrice: 1_000_000, Image: protocol.Image{Ref: "example.org/job:1"}, Ports: []int{8000, 8001}}
	praw, err := protocol.Seal(protocol.KindProposal, p, rkey)
	if err != nil {
		b.Fatal(err)
	}
	lraw, err := protocol.Seal(protocol.KindLease, protocol.Lease{Version: protocol.JobVersion, Job: p.Job, Proposal: protocol.RecordSHA256(praw),
		Renter: p.Renter, Provider: p.Provider, Model: p.Model, GPUs: 1, Price: 1_000_000, IssuedAt: now, EndsAt: now.Add(time.Hour),
		Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}, Ports: p.Ports}, pkey)
	if err != nil {
		b.Fatal(err)
	}
	for _, j := range []ledger.Job{
		{ID: p.Job, Side: "provider", Peer: renter.String(), State: ledger.JobRunning, CreatedAt: now, UpdatedAt: now, Proposal: praw, Lease: lraw},
		{ID: p.Job, Side: "renter", Peer: provider.String(), State: ledger.JobRunning, CreatedAt: now, UpdatedAt: now, Proposal: praw, Lease: lraw},
	} {
		l := pl
		if j.Side == "renter" {
			l = rl
		}
		if err := l.Jobs.CreateJob(j); err != nil {
			b.Fatal(err)
		}
	}
	return p.Job
}
