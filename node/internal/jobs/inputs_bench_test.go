package jobs

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/node/internal/subsystem"
	"github.com/gpunex/gpunex/protocol"
)

// The input's upload against the image archive's transfer, over one loopback link of two
// real libp2p hosts (TCP, the node's default security and multiplexer): the archive as the
// job stream carries it (the renter copies the file, the provider hashes it into the job's
// folder), the input as the job-input stream does (only the chunks the provider lacks, each
// hashed into the cache, then the files written from it), each timed from its first byte to
// the provider's having it all. The import of the archive is left out (containerd's time,
// not the link's). Then the same input again: the bytes it takes on the wire.
//
//	go test ./node/internal/jobs -run XXX -bench InputUpload -benchtime 3x
//
// The targets (issue 29): the input's rate at least 80% of the archive's; a repeated input
// under 1% of its bytes.
func BenchmarkInputUpload(b *testing.B) {
	const size = 256 << 20
	dir := b.TempDir()
	blob := make([]byte, size)
	rand.Read(blob)
	archive := filepath.Join(dir, "image.tar")
	os.WriteFile(archive, blob, 0o600)
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o755)
	rand.Read(blob) // other bytes: nothing the provider holds from the archive
	os.WriteFile(filepath.Join(data, "train.bin"), blob[:size/2], 0o644)
	os.WriteFile(filepath.Join(data, "valid.bin"), blob[size/2:], 0o644)
	blob = nil

	pkey, ppeer := benchHost(b)
	rkey, rpeer := benchHost(b)
	rpeer.Host.Peerstore().AddAddrs(ppeer.ID, ppeer.Host.Addrs(), time.Hour)
	if err := rpeer.Host.Connect(context.Background(), peer.AddrInfo{ID: ppeer.ID, Addrs: ppeer.Host.Addrs()}); err != nil {
		b.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	cfg := testJobsConfig()
	cfg.MaxInputMB, cfg.InputCacheGB, cfg.MaxImageMB = 1<<10, 2, 1<<10
	r, err := NewRunner(Deps{Base: subsystem.Base{Peer: ppeer, Clock: clk, Log: quiet(), Metrics: newMetrics()}, Ledger: l.Jobs, Jobs: cfg,
		Runtime: noImport{newFakeRuntime()}, Dir: filepath.Join(dir, "jobs"),
		Probe: func() (bench.Probe, error) {
			return bench.NewSimulated(ppeer.ID.String(), []bench.SimulatedGPU{{Model: "L4-24GB"}}), nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	var inputWire atomic.Int64
	ppeer.Handle(protocol.JobInputProtocol, func(s network.Stream) { r.HandleInput(&wireCount{s, &inputWire}) })
	imageDone := make(chan error, 1)
	var imageProposal *protocol.Proposal
	ppeer.Handle("/gpunex/bench-image/1", func(s network.Stream) {
		defer s.Close()
		_, err := r.receiveImage(s, bufio.NewReader(s), imageProposal)
		imageDone <- err
		s.Write([]byte{1})
	})
	rl, err := ledger.Open(ledger.Options{InMemory: true, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer rl.Close()
	rn := NewRenter(RenterDeps{Base: subsystem.Base{Peer: rpeer, Clock: clk, Log: quiet(), Metrics: newMetrics()}, Ledger: rl.Jobs})
	set, err := buildInput([]string{data}, nil)
	if err != nil {
		b.Fatal(err)
	}

	var imageTime, inputTime time.Duration
	var repeatWire int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// The image archive.
		f, _ := os.Open(archive)
		sha, n, _ := fileSHA256(f)
		f.Seek(0, io.SeekStart)
		imageProposal = &protocol.Proposal{Job: newJobID(), Image: protocol.Image{ArchiveSHA256: sha, ArchiveSize: n}}
		t0 := time.Now()
		s, err := rpeer.OpenStream(context.Background(), ppeer.ID, "/gpunex/bench-image/1")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(s, f)
		s.Read(make([]byte, 1))
		imageTime += time.Since(t0)
		s.Close()
		f.Close()
		if err := <-imageDone; err != nil {
			b.Fatal(err)
		}

		// The input, to a provider holding none of it.
		r.input = newProviderInputs(filepath.Join(dir, "jobs", ".inputs-"+newJobID()), cfg.InputCacheGB<<30, r)
		p := benchInputJob(b, r, l, pkey, rkey, ppeer.ID, rpeer.ID, set)
		t0 = time.Now()
		if err := rn.uploadInput(context.Background(), ppeer.ID, p, set, &inputProgress{}); err != nil {
			b.Fatal(err)
		}
		inputTime += time.Since(t0)

		// The same input, for the next job.
		p = benchInputJob(b, r, l, pkey, rkey, ppeer.ID, rpeer.ID, set)
		before := inputWire.Load()
		if err := rn.uploadInput(context.Background(), ppeer.ID, p, set, &inputProgress{}); err != nil {
			b.Fatal(err)
		}
		repeatWire = inputWire.Load() - before
		os.RemoveAll(filepath.Join(dir, "jobs"))
		os.MkdirAll(filepath.Join(dir, "jobs"), 0o700)
	}
	b.StopTimer()
	imageRate := float64(b.N) * size / imageTime.Seconds() / (1 << 20)
	inputRate := float64(b.N) * size / inputTime.Seconds() / (1 << 20)
	b.ReportMetric(imageRate, "image-MiB/s")
	b.ReportMetric(inputRate, "input-MiB/s")
	b.ReportMetric(100*inputRate/imageRate, "input/image-%")
	b.ReportMetric(100*float64(repeatWire)/size, "repeat-sent-%")
}

// benchHost is a libp2p host on the loopback, TCP only, as a peer.
func benchHost(b *testing.B) (crypto.PrivKey, *p2p.Peer) {
	return benchHostOn(b, "/ip4/127.0.0.1/tcp/0")
}

// benchHostOn is a libp2p host listening on listen only, as a peer.
func benchHostOn(b *testing.B, listen string) (crypto.PrivKey, *p2p.Peer) {
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings(listen))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	id, _ := peer.IDFromPrivateKey(key)
	return key, &p2p.Peer{Host: h, Key: key, ID: id}
}

// benchInputJob records a job of renter's leased on the provider whose proposal names set
// as its input, as HandleJob does before the input arrives.
func benchInputJob(b *testing.B, r *Runner, l *ledger.Ledger, pkey, rkey crypto.PrivKey, provider, renter peer.ID, set *inputSet) *protocol.Proposal {
	now := time.Now().UTC()
	ref := set.ref
	p := protocol.Proposal{Version: protocol.JobVersion, Job: newJobID(), Renter: renter.String(), Provider: provider.String(), IssuedAt: now,
		Model: "L4-24GB", GPUs: 1, MaxSeconds: 3600, MaxPrice: 1_000_000, Image: protocol.Image{Ref: "example.org/job:1"}, Input: &ref}
	praw, err := protocol.Seal(protocol.KindProposal, p, rkey)
	if err != nil {
		b.Fatal(err)
	}
	lraw, err := protocol.Seal(protocol.KindLease, protocol.Lease{Version: protocol.JobVersion, Job: p.Job, Proposal: protocol.RecordSHA256(praw),
		Renter: p.Renter, Provider: p.Provider, Model: p.Model, GPUs: 1, Price: 1_000_000, IssuedAt: now, EndsAt: now.Add(time.Hour),
		Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}, pkey)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Jobs.CreateJob(ledger.Job{ID: p.Job, Side: "provider", Peer: renter.String(), State: ledger.JobLeased, CreatedAt: now, UpdatedAt: now,
		Proposal: praw, Lease: lraw}); err != nil {
		b.Fatal(err)
	}
	return &p
}

func newJobID() string {
	var id [8]byte
	rand.Read(id[:])
	return hex.EncodeToString(id[:])
}

// noImport is a sandbox whose import takes no time: the benchmark times the link.
type noImport struct{ *fakeRuntime }

func (noImport) ImportImage(context.Context, io.Reader) (string, string, error) {
	return "import/bench", "sha256:00", nil
}

// wireCount counts the bytes the provider reads on a stream.
type wireCount struct {
	network.Stream
	n *atomic.Int64
}

func (w *wireCount) Read(b []byte) (int, error) {
	n, err := w.Stream.Read(b)
	w.n.Add(int64(n))
	return n, err
}
