package jobs

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/sandbox"
)

// tarNames lists an archive's entries, and the contents of its regular files.
func tarNames(t *testing.T, r io.Reader) ([]string, map[string]string) {
	t.Helper()
	tr := tar.NewReader(r)
	var names []string
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		}
	}
}

// TestWriteTar: the output archive holds the job's regular files and folders, never what
// a link points to, nor a device or a pipe the job made (reading one would never end).
func TestWriteTar(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("not yours"), 0o600)
	os.MkdirAll(filepath.Join(dir, "sub"), 0o700)
	os.WriteFile(filepath.Join(dir, "sub", "answer.txt"), []byte("42\n"), 0o600)
	if err := os.Symlink(secret, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub", "folder-link")); err != nil {
		t.Fatal(err)
	}
	if err := mkfifo(filepath.Join(dir, "pipe")); err != nil {
		t.Skip(err) // not on a system jobs run on
	}
	var buf bytes.Buffer
	if err := writeTar(&buf, dir); err != nil {
		t.Fatal(err)
	}
	names, files := tarNames(t, &buf)
	if strings.Join(names, ",") != "sub,sub/answer.txt" || files["sub/answer.txt"] != "42\n" {
		t.Fatalf("archive: %v %q", names, files)
	}
}

// TestRetention: an ended job's folder stays for jobs.retention, then goes; a running
// job's folder stays whatever its age, and so does another side's.
func TestRetention(t *testing.T) {
	r := newProvider(t, nil, nil)
	r.cfg.Retention = config.Duration{Duration: 24 * time.Hour}
	clk := r.clk
	for _, j := range []ledger.Job{
		{ID: "ended", Side: "provider", State: ledger.JobEnded, UpdatedAt: clk.Now()},
		{ID: "failed", Side: "provider", State: ledger.JobFailed, UpdatedAt: clk.Now().Add(2 * time.Hour)},
		{ID: "running", Side: "provider", State: ledger.JobRunning, UpdatedAt: clk.Now()},
	} {
		if err := r.ledger.PutJob(j); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(r.jobDir(j.ID), "output"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(id string) bool { _, err := os.Stat(r.jobDir(id)); return err == nil }
	clk.Advance(23 * time.Hour)
	r.removeExpiredFolders()
	if !exists("ended") || !exists("running") || !exists("failed") {
		t.Fatal("a folder went before the retention period")
	}
	clk.Advance(2 * time.Hour)
	r.removeExpiredFolders()
	if exists("ended") {
		t.Fatal("an ended job's folder outlived the retention period")
	}
	if !exists("running") || !exists("failed") {
		t.Fatal("a running job's folder, or one ended within the retention period, was deleted")
	}
}

// TestCleanupLoop: at start and then every hour, the cleanup keeps the image cache within
// jobs.image_cache_gb and deletes the expired folders.
func TestCleanupLoop(t *testing.T) {
	r := newProvider(t, nil, nil)
	r.ledger.PutJob(ledger.Job{ID: "old", Side: "provider", State: ledger.JobEnded, UpdatedAt: t0})
	os.MkdirAll(r.jobDir("old"), 0o700)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.CleanupLoop(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	pruned := func() []int64 {
		r.rt.mu.Lock()
		defer r.rt.mu.Unlock()
		return slices.Clone(r.rt.pruned)
	}
	waitTimer(t, r.clk, 1)
	if !slices.Equal(pruned(), []int64{1 << 30}) {
		t.Fatalf("image cache pruned to %v at start, want the 1 GB budget", pruned())
	}
	if _, err := os.Stat(r.jobDir("old")); err != nil {
		t.Fatal("a folder within the retention period deleted at start")
	}
	r.clk.Advance(25 * time.Hour)
	eventually(t, "the next round", func() bool { return len(pruned()) == 2 })
	eventually(t, "the expired folder deleted", func() bool { _, err := os.Stat(r.jobDir("old")); return os.IsNotExist(err) })
}

// TestLogsAndOutputReachTheRenter: the renter reads what its job printed and fetches what
// it left in /output.
func TestLogsAndOutputReachTheRenter(t *testing.T) {
	m := newMarket(t, 1)
	v := m.run(t, m.request(imageArchive(t, "x")))
	var log bytes.Buffer
	lv, err := m.rn.JobLogs(context.Background(), v.ID, false, &log)
	if err != nil || log.String() != "hello from "+v.ID+"\n" || lv.State != ledger.JobRunning {
		t.Fatalf("log %q, state %s: %v", log.String(), lv.State, err)
	}
	var out bytes.Buffer
	if err := m.rn.FetchOutput(context.Background(), v.ID, &out); err != nil {
		t.Fatal(err)
	}
	if names, files := tarNames(t, &out); !slices.Equal(names, []string{"answer.txt"}) || files["answer.txt"] != "42\n" {
		t.Fatalf("output %v %q", names, files)
	}
}

// syncBuffer is a bytes.Buffer written by one goroutine and read by another.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProviderFollowsLog: the provider's operator following a job's log gets each line as
// the job writes it, and the follow ends with the job.
func TestProviderFollowsLog(t *testing.T) {
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}})
	pv.rt.onStart = func(spec sandbox.Spec) { os.WriteFile(spec.LogPath, []byte("epoch 1\n"), 0o600) }
	_, renter := newKey(t)
	pv.startJob(t, "00000000000000a9", renter, "L4-24GB", 1, 3600)
	var got syncBuffer
	done := make(chan error)
	go func() { done <- pv.Logs(context.Background(), "00000000000000a9", true, &got) }()
	eventually(t, "the first line", func() bool { return got.String() == "epoch 1\n" })
	f, err := os.OpenFile(filepath.Join(pv.jobDir("00000000000000a9"), "log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("epoch 2\n")
	f.Close()
	waitTimer(t, pv.clk, 1)
	pv.clk.Advance(100 * time.Millisecond)
	eventually(t, "the second line", func() bool { return got.String() == "epoch 1\nepoch 2\n" })
	pv.rt.end("00000000000000a9", sandbox.Exit{Code: 0, Reason: sandbox.ReasonExited})
	pv.ended(t, "00000000000000a9")
	waitTimer(t, pv.clk, 1)
	pv.clk.Advance(100 * time.Millisecond)
	select {
	case err := <-done:
		if err != nil || got.String() != "epoch 1\nepoch 2\n" {
			t.Fatalf("follow ended with %v, %q", err, got.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follow did not end with the job")
	}
}
