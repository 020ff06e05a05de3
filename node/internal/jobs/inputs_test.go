package jobs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// inputMarket is a market whose provider takes inputs of up to 64 MiB, says so in its
// offer, and whose job-input streams go through a test's hands.
type inputMarket struct {
	*market
	mu      sync.Mutex
	seen    map[string]map[string]string // job -> its /input as the sandbox got it (inputTree)
	streams []*cutStream
	// cut says, for the n-th input stream (from 1), after how many bytes the provider stops
	// reading it (-1: never) and whether it then stalls (as a renter that stopped sending)
	// rather than breaks (as a cut connection).
	cut func(n int) (after int64, stall bool)
}

func newInputMarket(t *testing.T, edit ...func(*Deps)) *inputMarket {
	t.Helper()
	m := &inputMarket{market: newMarket(t, 2, edit...), seen: map[string]map[string]string{}}
	m.offerInput(t, 64<<20)
	wrote := m.pv.rt.onStart
	m.pv.rt.onStart = func(spec sandbox.Spec) {
		wrote(spec)
		if spec.InputDir != "" {
			tree := inputTree(t, spec.InputDir)
			m.mu.Lock()
			m.seen[spec.ID] = tree
			m.mu.Unlock()
		}
	}
	m.pv.peer.Handle(protocol.JobInputProtocol, func(s network.Stream) {
		m.mu.Lock()
		cs := &cutStream{Stream: s, after: -1, stalled: make(chan struct{}), reset: make(chan struct{})}
		m.streams = append(m.streams, cs)
		if m.cut != nil {
			cs.after, cs.stall = m.cut(len(m.streams))
		}
		m.mu.Unlock()
		m.pv.HandleInput(cs)
	})
	return m
}

// offerInput makes the renter know the provider's offer with its largest input at max.
func (m *inputMarket) offerInput(t *testing.T, max int64) {
	m.pv.pub.offer.Offer.MaxInputBytes = max
	m.rn.knows(m.pv.pub.offer, m.coord)
}

// wire is the bytes the provider read on its job-input streams from the from-th on.
func (m *inputMarket) wire(from int) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, s := range m.streams[min(from-1, len(m.streams)):] {
		n += s.read()
	}
	return n
}

func (m *inputMarket) received() float64 {
	return testutil.ToFloat64(m.pv.metrics.JobInputBytes.WithLabelValues("received"))
}

// upload is the renter's account of a job's input upload.
func (m *inputMarket) upload(t *testing.T, job string) api.InputProgress {
	t.Helper()
	for _, u := range m.rn.Uploads() {
		if u.Job == job {
			return u
		}
	}
	t.Fatalf("no upload of job %s among %+v", job, m.rn.Uploads())
	return api.InputProgress{}
}

// cutStream is a provider's end of a job-input stream that reads at most after bytes, then
// breaks (a cut connection) or stalls until reset (a renter that stopped sending).
type cutStream struct {
	network.Stream
	mu      sync.Mutex
	n       int64
	after   int64
	stall   bool
	stalled chan struct{} // closed when it stalls
	reset   chan struct{} // closed when reset
	once    sync.Once
	stopped sync.Once
}

func (c *cutStream) Read(b []byte) (int, error) {
	c.mu.Lock()
	left := c.after - c.n
	c.mu.Unlock()
	if c.after >= 0 && left <= 0 {
		if c.stall {
			c.stopped.Do(func() { close(c.stalled) })
			<-c.reset
			return 0, network.ErrReset
		}
		c.Stream.Reset()
		return 0, errors.New("connection cut by the test")
	}
	if c.after >= 0 && int64(len(b)) > left {
		b = b[:left]
	}
	n, err := c.Stream.Read(b)
	c.mu.Lock()
	c.n += int64(n)
	c.mu.Unlock()
	return n, err
}

func (c *cutStream) Reset() error {
	c.once.Do(func() { close(c.reset) })
	return c.Stream.Reset()
}

func (c *cutStream) read() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// randomFile writes n pseudo-random bytes (seeded by seed) at path with mode.
func randomFile(t *testing.T, path string, n int, seed uint64, mode fs.FileMode) {
	t.Helper()
	b := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	rng.Read(b)
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
}

// inputs writes a file notes.txt and a folder data (a file of 2.5 chunks, an executable
// script, an empty file, a sub-folder, a link inside), and returns their paths and the
// bytes they hold.
func inputs(t *testing.T) (file, folder string, total int64) {
	t.Helper()
	dir := t.TempDir()
	file = filepath.Join(dir, "notes.txt")
	os.WriteFile(file, []byte("the notes\n"), 0o600)
	folder = filepath.Join(dir, "data")
	os.MkdirAll(filepath.Join(folder, "sub"), 0o755)
	randomFile(t, filepath.Join(folder, "big.bin"), 2*protocol.InputChunkSize+protocol.InputChunkSize/2, 1, 0o644)
	os.WriteFile(filepath.Join(folder, "sub", "run.sh"), []byte("#!/bin/sh\necho run\n"), 0o755)
	os.WriteFile(filepath.Join(folder, "empty"), nil, 0o644)
	os.Symlink("../big.bin", filepath.Join(folder, "sub", "latest"))
	os.Symlink(filepath.Join(folder, "empty"), filepath.Join(folder, "abs")) // absolute, inside: sent relative
	return file, folder, int64(len("the notes\n") + 2*protocol.InputChunkSize + protocol.InputChunkSize/2 + len("#!/bin/sh\necho run\n"))
}

// inputTree describes the folder the sandbox would mount at /input: each path with its
// type and mode, a file's size and first bytes, a link's target.
func inputTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, _ := d.Info()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			tree[rel] = "link " + target
		case info.IsDir():
			tree[rel] = fmt.Sprintf("dir %o", info.Mode().Perm())
		default:
			b, _ := os.ReadFile(p)
			tree[rel] = fmt.Sprintf("file %o %d %q", info.Mode().Perm(), len(b), b[:min(len(b), 10)])
		}
		return nil
	})
	return tree
}

// TestJobInput: a job's input, a file and a folder, is at /input when it starts, read-only
// for the job (files readable by anyone, executable where the renter's were, no write
// bit), links inside the folder kept (an absolute one made relative); every byte arrived
// once, checked. The renter's second job with the same data sends under 1% of its bytes:
// the provider asks for no chunk. The job's copy of the input goes when it ends; the chunks
// stay cached.
func TestJobInput(t *testing.T) {
	m := newInputMarket(t)
	file, folder, total := inputs(t)
	req := m.request(imageArchive(t, "in"))
	req.Inputs = []string{file, folder}
	v := m.run(t, req)

	spec, _ := m.pv.rt.spec(v.ID)
	if spec.InputDir != m.pv.inputDir(v.ID) {
		t.Fatalf("the sandbox mounts %q at /input, want the job's input folder %q", spec.InputDir, m.pv.inputDir(v.ID))
	}
	m.mu.Lock()
	tree := m.seen[v.ID]
	m.mu.Unlock()
	want := map[string]string{
		"notes.txt":       `file 444 10 "the notes\n"`,
		"data":            "dir 755",
		"data/abs":        "link empty",
		"data/big.bin":    fmt.Sprintf("file 444 %d", 2*protocol.InputChunkSize+protocol.InputChunkSize/2),
		"data/empty":      `file 444 0 ""`,
		"data/sub":        "dir 755",
		"data/sub/latest": "link ../big.bin",
		"data/sub/run.sh": `file 555 19 "#!/bin/sh\n"`,
	}
	for p, w := range want {
		if got := tree[p]; !strings.HasPrefix(got, w) {
			t.Errorf("/input/%s: %q, want %q", p, got, w)
		}
	}
	if len(tree) != len(want) {
		t.Errorf("/input holds %d entries, want %d: %v", len(tree), len(want), tree)
	}
	b, _ := os.ReadFile(filepath.Join(folder, "big.bin"))
	got, err := os.ReadFile(filepath.Join(m.pv.inputDir(v.ID), "data", "big.bin"))
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("data/big.bin differs from the renter's (%v)", err)
	}
	if r := m.received(); r != float64(total) {
		t.Fatalf("the provider received %.0f bytes of chunks for an input of %d", r, total)
	}
	if u := m.upload(t, v.ID); u.Phase != "done" || u.Sent != total || u.Held != 0 || u.Bytes != total {
		t.Fatalf("the renter's account of the upload: %+v", u)
	}

	// The second job with the same data.
	before := m.wire(1)
	v2 := m.run(t, req)
	again := m.wire(1) - before
	if again*100 >= total {
		t.Fatalf("the second job's input took %d bytes on the wire for %d bytes of data (1%%: %d)", again, total, total/100)
	}
	if u := m.upload(t, v2.ID); u.Sent != 0 || u.Held != total {
		t.Fatalf("the second upload: %+v", u)
	}
	if r := m.received(); r != float64(total) {
		t.Fatalf("the provider received %.0f bytes of chunks after the second job, want still %d", r, total)
	}
	m.mu.Lock()
	same := fmt.Sprint(m.seen[v2.ID]) == fmt.Sprint(tree)
	m.mu.Unlock()
	if !same {
		t.Fatal("the second job's /input differs from the first's")
	}

	// The job ends: its copy goes, the renter's chunks stay for its next job.
	m.pv.rt.end(v.ID, sandbox.Exit{Code: 0, Reason: sandbox.ReasonExited, EndedAt: t0.Add(time.Minute)})
	m.pv.ended(t, v.ID)
	eventually(t, "the ended job's input folder deleted", func() bool {
		_, err := os.Lstat(m.pv.inputDir(v.ID))
		return errors.Is(err, os.ErrNotExist)
	})
	if _, held := m.pv.input.cache.bytes(m.rn.peer.ID.String()); held != total {
		t.Fatalf("the renter's cache holds %d bytes after the job ended", held)
	}
}

// TestJobInputResumes: a job-input stream cut after one chunk and a half is followed by
// another for the same job, which the provider asks only for the chunks that did not
// arrive: every chunk is received once, and the job starts.
func TestJobInputResumes(t *testing.T) {
	m := newInputMarket(t)
	file, folder, total := inputs(t)
	m.cut = func(n int) (int64, bool) {
		if n == 1 {
			return 16<<10 + protocol.InputChunkSize + protocol.InputChunkSize/2, false // manifest and 1.5 chunks
		}
		return -1, false
	}
	req := m.request(imageArchive(t, "in"))
	req.Inputs = []string{file, folder}
	v := m.run(t, req)

	if n := len(m.streams); n != 2 {
		t.Fatalf("%d input streams, want the cut one and one more", n)
	}
	u := m.upload(t, v.ID)
	if u.Phase != "done" || u.Held < protocol.InputChunkSize {
		t.Fatalf("the second stream should find the first's chunk held: %+v", u)
	}
	if r := m.received(); r != float64(total) {
		t.Fatalf("the provider received %.0f bytes of chunks for an input of %d: something was sent twice or lost", r, total)
	}
	// What the second stream carried: the manifest and what the first did not deliver whole.
	if second := m.wire(2); second > total-u.Held+64<<10 {
		t.Fatalf("the second stream carried %d bytes; %d were missing", second, total-u.Held)
	}
}

// TestJobInputStopsMidway: a renter whose upload stops mid-way holds the provider's GPU
// only until the input's deadline: then the job fails, its GPU is free, its partial files
// are gone and its stream is cut; the chunks that arrived stay cached, so the renter's next
// job with the same data sends only the rest. A stranger naming the job meanwhile is
// refused and counted.
func TestJobInputStopsMidway(t *testing.T) {
	m := newInputMarket(t)
	file, folder, total := inputs(t)
	m.cut = func(n int) (int64, bool) {
		if n == 1 {
			return 16<<10 + protocol.InputChunkSize + protocol.InputChunkSize/2, true
		}
		return -1, false
	}
	req := m.request(imageArchive(t, "in"))
	req.Inputs = []string{file, folder}
	done := make(chan error, 1)
	go func() { _, err := m.rn.ProposeJob(context.Background(), req); done <- err }()
	eventually(t, "the upload stalls", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.streams) == 0 {
			return false
		}
		select {
		case <-m.streams[0].stalled:
			return true
		default:
			return false
		}
	})
	var job ledger.Job
	js, _ := m.pv.ledger.Jobs()
	for _, j := range js {
		job = j
	}
	if job.State != ledger.JobLeased || !m.pv.Busy(job.GPUs[0]) {
		t.Fatalf("while its input arrives the job is %s, its GPU busy %v", job.State, m.pv.Busy(job.GPUs[0]))
	}

	// A stranger names the job on the input stream.
	stranger := m.renter(t)
	s, err := stranger.peer.OpenStream(context.Background(), m.pv.peer.ID, protocol.JobInputProtocol)
	if err != nil {
		t.Fatal(err)
	}
	protocol.WriteJSONFrame(s, protocol.InputMsg{Type: "open", Job: job.ID})
	var answer protocol.InputMsg
	protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxInputMsgFrame, &answer)
	s.Close()
	if answer.Type != "error" || !strings.Contains(answer.Reason, ErrNotYourJob.Error()) {
		t.Fatalf("a stranger's input stream was answered %+v", answer)
	}
	if n := testutil.ToFloat64(m.pv.metrics.JobSessions.WithLabelValues("input", "not_renter")); n != 1 {
		t.Fatalf("%v strangers' input streams counted", n)
	}

	// The lease's clock runs: past the input's deadline the job fails.
	p, _ := openProposal(job.Proposal)
	l, _, _ := protocol.OpenLease(job.Lease)
	waitTimer(t, m.pv.clk, 1)
	m.pv.clk.Advance(protocol.InputDeadline(l, p).Sub(m.pv.clk.Now()) + time.Second)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the job started without its input")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the renter's proposal did not end after the input's deadline")
	}
	if j := m.pv.job(t, job.ID); j.State != ledger.JobFailed || !strings.Contains(j.Error, "did not arrive") {
		t.Fatalf("after the deadline the job is %s (%s)", j.State, j.Error)
	}
	eventually(t, "the GPU free again", func() bool { return !m.pv.Busy(job.GPUs[0]) })
	if _, err := os.Lstat(m.pv.inputDir(job.ID) + ".part"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("partial input left: %v", err)
	}
	held := m.received()
	if held < protocol.InputChunkSize {
		t.Fatalf("the chunk that arrived before the stall was not kept: %.0f bytes", held)
	}

	// The next job with the same data sends only the rest.
	m.cut = nil
	from := len(m.streams) + 1
	v := m.run(t, req)
	if u := m.upload(t, v.ID); u.Held != int64(held) || u.Sent != total-int64(held) {
		t.Fatalf("the next job's upload: %+v; %.0f bytes were held", u, held)
	}
	if r := m.received(); r != float64(total) {
		t.Fatalf("%.0f chunk bytes received in all for %d bytes of input", r, total)
	}
	if w := m.wire(from); w > total-int64(held)+64<<10 {
		t.Fatalf("the next job's input took %d bytes on the wire; %d were missing", w, total-int64(held))
	}
}

// TestJobInputTooLarge: an input larger than the offer says is refused by the renter's node
// before anything is sent; one larger than the provider takes now (its offer was older) is
// refused by the provider from the proposal, before any chunk. An offer without the field
// (a provider taking none, or an older build) is passed over too.
func TestJobInputTooLarge(t *testing.T) {
	m := newInputMarket(t, func(d *Deps) { d.Jobs.MaxInputMB = 1 })
	dir := t.TempDir()
	big := filepath.Join(dir, "big.bin")
	randomFile(t, big, 3<<19, 2, 0o644) // 1.5 MiB
	req := m.request(imageArchive(t, "in"))
	req.Inputs = []string{big}

	m.offerInput(t, 1<<20)
	_, err := m.rn.ProposeJob(context.Background(), req)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "at most 1.0 MiB") || !strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("the renter's node should refuse the input from the offer: %v", err)
	}
	if n := testutil.CollectAndCount(m.pv.metrics.JobProposals); n != 0 {
		t.Fatalf("the provider saw %d proposals", n)
	}

	m.offerInput(t, 0)
	if _, err := m.rn.ProposeJob(context.Background(), req); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "takes no input") {
		t.Fatalf("an offer stating no largest input: %v", err)
	}

	m.offerInput(t, 64<<20) // what the renter believes; the provider takes 1 MiB
	_, err = m.rn.ProposeJob(context.Background(), req)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "this provider takes at most 1.0 MiB") {
		t.Fatalf("the provider should refuse the proposal: %v", err)
	}
	if len(m.streams) != 0 || m.received() != 0 {
		t.Fatalf("%d input streams opened, %.0f bytes received for a refused input", len(m.streams), m.received())
	}
}

// TestJobInputRefusedFiles: links leaving the folder (or leading nowhere), named pipes,
// sockets and devices refuse the input on the renter's node, naming the file, before any
// proposal.
func TestJobInputRefusedFiles(t *testing.T) {
	m := newInputMarket(t)
	image := imageArchive(t, "in")
	cases := map[string]func(dir string) error{
		"leaves the folder": func(dir string) error { return os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")) },
		"leaves the folder ": func(dir string) error {
			return os.Symlink("../../outside", filepath.Join(dir, "up"))
		},
		"points to nothing": func(dir string) error { return os.Symlink("missing", filepath.Join(dir, "dangling")) },
		"named pipe":        func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600) },
		"a device": func(dir string) error {
			return syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o600, 1<<8|3)
		},
		"a socket": func(dir string) error {
			l, err := net.Listen("unix", filepath.Join(dir, "sock"))
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		},
	}
	for want, make := range cases {
		t.Run(strings.TrimSpace(want), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
			os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("fine"), 0o644)
			os.WriteFile(filepath.Join(filepath.Dir(dir), "outside"), []byte("not sent"), 0o644)
			if err := make(filepath.Join(dir, "sub")); err != nil {
				t.Skipf("cannot make it here: %v", err)
			}
			req := m.request(image)
			req.Inputs = []string{dir}
			_, err := m.rn.ProposeJob(context.Background(), req)
			if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), strings.TrimSpace(want)) || !strings.Contains(err.Error(), filepath.Join(dir, "sub")) {
				t.Fatalf("refusal: %v", err)
			}
		})
	}
	req := m.request(image)
	req.Inputs = []string{"/dev/null"}
	if _, err := m.rn.ProposeJob(context.Background(), req); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "a device") {
		t.Fatalf("a device given as input: %v", err)
	}
	req.Inputs = []string{"relative/path"}
	if _, err := m.rn.ProposeJob(context.Background(), req); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a relative path: %v", err)
	}
	if n := testutil.CollectAndCount(m.pv.metrics.JobProposals); n != 0 {
		t.Fatalf("the provider saw %d proposals", n)
	}
}

// TestInputCache: the chunk cache keeps within its quota by deleting the least recently
// used chunks first, never those of an input in flight; chunks unused for the retention
// period go; a chunk whose bytes do not match its digest is not kept; after a restart the
// cache knows what it holds and in which order it was used.
func TestInputCache(t *testing.T) {
	pv := newProvider(t, nil, nil)
	dir := t.TempDir()
	c := newInputCache(dir, 30, pv.clk, quiet())
	chunk := func(s string) protocol.InputChunk { return protocol.InputChunk{SHA256: sha(s), Size: int64(len(s))} }
	put := func(renter, s string) {
		t.Helper()
		if _, err := c.store(renter, chunk(s), strings.NewReader(s)); err != nil {
			t.Fatal(err)
		}
		pv.clk.Advance(time.Minute)
	}
	put("alice", "0123456789") // oldest
	put("alice", "abcdefghij")
	put("bob", "ABCDEFGHIJ")
	if _, err := c.store("bob", chunk("klmnopqrst"), strings.NewReader("not these!")); !errors.Is(err, errChunkDigest) {
		t.Fatalf("a chunk with the wrong bytes: %v", err)
	}
	if total, _ := c.bytes("bob"); total != 30 {
		t.Fatalf("the cache holds %d bytes, want 30", total)
	}
	// An input of alice's in flight uses her oldest chunk again, and needs another.
	missing, held, unpin := c.pin("alice", []protocol.InputChunk{chunk("0123456789"), chunk("klmnopqrst")})
	if held != 10 || protocol.Wants(missing, 0) || !protocol.Wants(missing, 1) {
		t.Fatalf("pin: held %d, missing %08b", held, missing)
	}
	c.makeRoom(10) // 40 bytes would not fit: the least recently used chunk goes
	if c.held("alice", chunk("abcdefghij")) || !c.held("alice", chunk("0123456789")) || !c.held("bob", chunk("ABCDEFGHIJ")) {
		t.Fatal("eviction did not take the least recently used chunk")
	}
	c.makeRoom(100) // no room for that: every chunk goes but the pinned one
	if !c.held("alice", chunk("0123456789")) || c.held("bob", chunk("ABCDEFGHIJ")) {
		t.Fatal("a pinned chunk was evicted, or an unpinned one kept")
	}
	unpin()
	pv.clk.Advance(time.Minute)
	put("alice", "abcdefghij")

	// A restart: the order of use is read back from the files.
	c2 := newInputCache(dir, 30, pv.clk, quiet())
	c2.makeRoom(20) // room for 20 bytes: the less recently used of alice's two chunks goes
	if c2.held("alice", chunk("0123456789")) || !c2.held("alice", chunk("abcdefghij")) {
		t.Fatal("after a restart the eviction did not take the least recently used chunk")
	}
	// The retention period: unused chunks go, the renter's folder too.
	pv.clk.Advance(48 * time.Hour)
	c2.expire(pv.clk.Now().Add(-24 * time.Hour))
	if total, _ := c2.bytes("alice"); total != 0 {
		t.Fatalf("%d bytes kept past the retention period", total)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left in the cache's folder: %v", entries)
	}
}

// TestInputManifestBuilt: the renter's manifest lists folders before their contents, files
// with their chunks, repeated chunks once among the chunks to send, and is refused when two
// inputs would have the same name.
func TestInputManifestBuilt(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	os.MkdirAll(filepath.Join(a, "x", "y"), 0o755)
	randomFile(t, filepath.Join(a, "x", "y", "one.bin"), protocol.InputChunkSize, 3, 0o644)
	randomFile(t, filepath.Join(a, "two.bin"), protocol.InputChunkSize, 3, 0o644) // the same bytes
	set, err := buildInput([]string{a}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := protocol.ParseInputManifest(set.manifest, set.ref)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range m.Entries {
		paths = append(paths, e.Type+" "+e.Path)
	}
	if got := strings.Join(paths, ", "); got != "dir a, file a/two.bin, dir a/x, dir a/x/y, file a/x/y/one.bin" {
		t.Fatalf("entries: %s", got)
	}
	if len(set.chunks) != 1 || set.ref.Bytes != 2*protocol.InputChunkSize {
		t.Fatalf("%d distinct chunks for two files of the same bytes; %d bytes", len(set.chunks), set.ref.Bytes)
	}
	other := filepath.Join(dir, "elsewhere", "a")
	os.MkdirAll(other, 0o755)
	if _, err := buildInput([]string{a, other}, nil); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "/input/a") {
		t.Fatalf("two inputs named a: %v", err)
	}
}

// sha is the hex SHA-256 of s.
func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
