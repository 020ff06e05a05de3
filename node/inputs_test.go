package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// Data in on real containers: a job reads the file and the folder it was given at /input
// and cannot change them; a cut upload resumes without sending again what arrived; a
// repeated input sends under 1% of its bytes; an input too large, or holding a link leaving
// its folder, a named pipe or a device, is refused before anything is sent.

// inputStreams wraps a provider's job-input streams: it counts what the provider reads on
// each, and cuts the first after cutAfter bytes (0: never), as a broken connection would.
type inputStreams struct {
	mu       sync.Mutex
	read     []int64
	cutAfter int64
}

func watchInputStreams(prov *Node) *inputStreams {
	w := &inputStreams{}
	prov.peer.Handle(protocol.JobInputProtocol, func(s network.Stream) {
		w.mu.Lock()
		w.read = append(w.read, 0)
		n, cut := len(w.read)-1, int64(0)
		if n == 0 {
			cut = w.cutAfter
		}
		w.mu.Unlock()
		prov.jobs.HandleInput(&countedStream{Stream: s, w: w, n: n, cut: cut})
	})
	return w
}

// bytes is what the provider read on its input streams from the from-th (0-based) on.
func (w *inputStreams) bytes(from int) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var t int64
	for _, n := range w.read[min(from, len(w.read)):] {
		t += n
	}
	return t
}

func (w *inputStreams) streams() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.read)
}

type countedStream struct {
	network.Stream
	w   *inputStreams
	n   int
	cut int64
}

func (c *countedStream) Read(b []byte) (int, error) {
	c.w.mu.Lock()
	done := c.w.read[c.n]
	c.w.mu.Unlock()
	if c.cut > 0 {
		if done >= c.cut {
			c.Stream.Reset()
			return 0, errors.New("connection cut by the test")
		}
		b = b[:min(int64(len(b)), c.cut-done)]
	}
	k, err := c.Stream.Read(b)
	c.w.mu.Lock()
	c.w.read[c.n] += int64(k)
	c.w.mu.Unlock()
	return k, err
}

// jobInputs writes notes.txt and a folder data (a file of 2.5 chunks, a script, a link
// inside), and returns their paths, the bytes they hold and data/big.bin's SHA-256.
func jobInputs(t *testing.T) (file, folder string, total int64, bigSHA string) {
	t.Helper()
	dir := t.TempDir()
	file = filepath.Join(dir, "notes.txt")
	os.WriteFile(file, []byte("the notes\n"), 0o600)
	folder = filepath.Join(dir, "data")
	os.MkdirAll(filepath.Join(folder, "sub"), 0o755)
	big := make([]byte, 2*protocol.InputChunkSize+protocol.InputChunkSize/2)
	rand.NewChaCha8([32]byte{7}).Read(big)
	os.WriteFile(filepath.Join(folder, "big.bin"), big, 0o644)
	script := "#!/bin/sh\necho hello from the input\n"
	os.WriteFile(filepath.Join(folder, "sub", "hello.sh"), []byte(script), 0o755)
	os.Symlink("../big.bin", filepath.Join(folder, "sub", "latest"))
	sum := sha256.Sum256(big)
	return file, folder, int64(len("the notes\n") + len(big) + len(script)), hex.EncodeToString(sum[:])
}

// inputJobScript reads the job's input and tries to change it.
const inputJobScript = `cat /input/notes.txt; ls /input/data /input/data/sub
echo "big $(sha256sum /input/data/big.bin | cut -c1-64)"
echo "latest $(sha256sum /input/data/sub/latest | cut -c1-64)"
/input/data/sub/hello.sh
touch /input/new 2>/dev/null && echo WROTE-NEW
echo x > /input/notes.txt 2>/dev/null && echo WROTE-NOTES
rm /input/data/big.bin 2>/dev/null && echo REMOVED
echo checked`

// runInputJob runs a job reading the inputs on prov and returns its log.
func runInputJob(t *testing.T, renter, prov *Node, archive string, inputs ...string) (api.JobView, string) {
	t.Helper()
	ctx := context.Background()
	v, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 120, ImageArchive: archive,
		Inputs: inputs, Args: []string{"sh", "-c", inputJobScript}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	final, err := renter.renter.JobLogs(ctx, v.ID, true, &out)
	if err != nil {
		t.Fatal(err)
	}
	if final.ExitCode != 0 {
		t.Fatalf("the job ended %d %s: %s", final.ExitCode, final.ExitReason, out.String())
	}
	return v, out.String()
}

// checkInputLog asserts what a job running inputJobScript saw.
func checkInputLog(t *testing.T, log, bigSHA string) {
	t.Helper()
	for _, want := range []string{"the notes", "big.bin", "hello.sh", "latest", "big " + bigSHA, "latest " + bigSHA, "hello from the input", "checked"} {
		if !strings.Contains(log, want) {
			t.Errorf("the job did not see %q in /input; its log:\n%s", want, log)
		}
	}
	for _, bad := range []string{"WROTE-NEW", "WROTE-NOTES", "REMOVED"} {
		if strings.Contains(log, bad) {
			t.Errorf("the job changed its input (%s); its log:\n%s", bad, log)
		}
	}
}

// TestJobInputOnContainers: a job reads a file and a folder from /input (a script there
// runs, a link there leads to its file) and cannot write, replace or remove anything there;
// the provider received every chunk once. The renter's second job with the same data sends
// under 1% of its bytes and sees the same /input.
func TestJobInputOnContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	renter, prov := jobNet(t, 2)
	w := watchInputStreams(prov)
	archive := busyboxArchive(t)
	file, folder, total, bigSHA := jobInputs(t)

	_, log := runInputJob(t, renter, prov, archive, file, folder)
	checkInputLog(t, log, bigSHA)
	if got := testutil.ToFloat64(prov.metrics.JobInputBytes.WithLabelValues("received")); got != float64(total) {
		t.Fatalf("the provider received %.0f chunk bytes for an input of %d", got, total)
	}

	from := w.streams()
	v2, log := runInputJob(t, renter, prov, archive, file, folder)
	checkInputLog(t, log, bigSHA)
	again := w.bytes(from)
	t.Logf("a repeated input of %d bytes took %d bytes on the wire (%.3f%%)", total, again, 100*float64(again)/float64(total))
	if again*100 >= total {
		t.Fatalf("the second job's input took %d bytes on the wire for %d bytes of data", again, total)
	}
	for _, u := range renter.renter.Uploads() {
		if u.Job == v2.ID && (u.Sent != 0 || u.Held != total) {
			t.Fatalf("the second upload: %+v", u)
		}
	}
}

// TestJobInputResumesOnContainers: the first input stream is cut after one chunk and a
// half; the renter's node opens another for the same job, which is asked only for what did
// not arrive whole: every chunk is received once, and the job reads the right bytes.
func TestJobInputResumesOnContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	renter, prov := jobNet(t, 1)
	w := watchInputStreams(prov)
	w.cutAfter = 64<<10 + protocol.InputChunkSize + protocol.InputChunkSize/2
	file, folder, total, bigSHA := jobInputs(t)

	v, log := runInputJob(t, renter, prov, busyboxArchive(t), file, folder)
	checkInputLog(t, log, bigSHA)
	if w.streams() != 2 {
		t.Fatalf("%d input streams: want the cut one and one more", w.streams())
	}
	received := testutil.ToFloat64(prov.metrics.JobInputBytes.WithLabelValues("received"))
	t.Logf("input of %d bytes: %d read on the cut stream, %d on the next; %.0f chunk bytes received", total, w.bytes(0)-w.bytes(1), w.bytes(1), received)
	if received != float64(total) {
		t.Fatalf("the provider received %.0f chunk bytes for an input of %d: something was sent twice", received, total)
	}
	var held int64
	for _, u := range renter.renter.Uploads() {
		if u.Job == v.ID {
			held = u.Held
		}
	}
	if held < protocol.InputChunkSize || w.bytes(1) > total-held+64<<10 {
		t.Fatalf("the second stream carried %d bytes; the provider held %d of %d already", w.bytes(1), held, total)
	}
}

// TestJobInputRefusedOnContainers: an input larger than the provider's offer says, and a
// folder holding a link that leaves it, a named pipe or a device, are refused by the
// renter's node: no proposal reaches the provider, no input stream is opened.
func TestJobInputRefusedOnContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	_, renter, prov := jobNetConfig(t, 1, testRuntime(t), func(c *config.Config) { c.Jobs.MaxInputMB = 1 })
	w := watchInputStreams(prov)
	archive := busyboxArchive(t)
	ctx := context.Background()
	propose := func(inputs ...string) error {
		_, err := renter.renter.ProposeJob(ctx, api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 60, ImageArchive: archive, Inputs: inputs, Args: []string{"true"}})
		return err
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big.bin")
	os.WriteFile(big, make([]byte, 2<<20), 0o644)
	if err := propose(big); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "takes at most 1.0 MiB: nothing was sent") {
		t.Fatalf("a 2 MiB input to a provider taking 1 MiB: %v", err)
	}
	for name, make := range map[string]func(string) error{
		"leaves the folder": func(d string) error { return os.Symlink("/etc/shadow", filepath.Join(d, "shadow")) },
		"named pipe":        func(d string) error { return syscall.Mkfifo(filepath.Join(d, "fifo"), 0o600) },
		"a device":          func(d string) error { return syscall.Mknod(filepath.Join(d, "null"), syscall.S_IFCHR|0o600, 1<<8|3) },
	} {
		d := filepath.Join(t.TempDir(), "data")
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "ok.txt"), []byte("fine"), 0o644)
		if err := make(d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := propose(d); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := testutil.CollectAndCount(prov.metrics.JobProposals); n != 0 || w.streams() != 0 {
		t.Fatalf("the provider saw %d proposal outcomes and %d input streams for refused inputs", n, w.streams())
	}
}
