package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
)

// `gpunex job exec` on real containers, through the renter's local API as the CLI reaches it.

// execJob starts a job that writes a file and its uid to /output, then waits; it returns
// the job once both are there (as an exec sees them).
func execJob(t testing.TB, renter, prov *Node, cl *api.Client) api.JobView {
	t.Helper()
	v, err := renter.renter.ProposeJob(context.Background(), api.JobRequest{Offer: offerOf(prov), GPUs: 1, MaxSeconds: 300, ImageArchive: busyboxArchive(t),
		Args: []string{"sh", "-c", "id -u > /output/uid; echo job-data > /output/mine; sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r, err := runExec(cl, v.ID, "", "cat", "/output/mine"); err == nil && r.stdout == "job-data\n" {
			return v
		} else if time.Now().After(deadline) {
			t.Fatalf("an exec never saw the job's file: %+v %v", r, err)
		}
	}
}

type execOutcome struct {
	stdout, stderr string
	code           int
}

// runExec runs argv in job id through cl, with stdin when not empty.
func runExec(cl *api.Client, id, stdin string, argv ...string) (execOutcome, error) {
	var out, errOut bytes.Buffer
	x := api.ExecIO{Stdout: &out, Stderr: &errOut}
	if stdin != "" {
		x.Stdin = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := cl.Exec(ctx, id, api.ExecRequest{Args: argv}, x)
	return execOutcome{out.String(), errOut.String(), code}, err
}

// TestJobExecOnContainers: the renter's exec sees the job's files, runs as the job's user,
// gets its input, output, error and exit status back, and cannot read a file of the
// provider's host; a stranger naming the job and an exec after the job ended are refused.
func TestJobExecOnContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("containerd")
	}
	tn, renter, prov := jobNetWith(t, 1)
	cl := apiClient(t, renter)
	v := execJob(t, renter, prov, cl)

	uid, err := runExec(cl, v.ID, "", "cat", "/output/uid")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := runExec(cl, v.ID, "", "id", "-u"); err != nil || r.stdout != uid.stdout || r.stdout == "0\n" {
		t.Fatalf("id -u in an exec: %+v %v; the job runs as %q", r, err, uid.stdout)
	}
	if r, err := runExec(cl, v.ID, "typed\n", "cat"); err != nil || r.stdout != "typed\n" || r.code != 0 {
		t.Fatalf("stdin through an exec: %+v %v", r, err)
	}
	if r, err := runExec(cl, v.ID, "", "sh", "-c", "echo out; echo err >&2; exit 7"); err != nil || r.stdout != "out\n" || r.stderr != "err\n" || r.code != 7 {
		t.Fatalf("an exec's output and exit status: %+v %v, want out, err, 7", r, err)
	}
	// A file of the provider's host, readable by anyone there.
	secret := fmt.Sprintf("host-secret-%d", time.Now().UnixNano())
	dir, err := os.MkdirTemp("", "gpunex-exec-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	host := filepath.Join(dir, "secret")
	if err := os.WriteFile(host, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := runExec(cl, v.ID, "", "cat", host); err != nil || r.code == 0 || strings.Contains(r.stdout+r.stderr, secret) {
		t.Fatalf("an exec read a file of the provider's host: %+v %v", r, err)
	}

	stranger := tn.add(testConfig(config.RoleRenter), nil)
	rj, err := renter.ledger.Jobs.GetJob(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	stranger.ledger.Jobs.CreateJob(rj)
	// Connected to the provider, as a stranger who looked it up would be: the refusal must
	// be the provider's, not a lookup that a node just started has no routing table for.
	if err := stranger.Host().Connect(context.Background(), peer.AddrInfo{ID: prov.ID(), Addrs: prov.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	if r, err := runExec(apiClient(t, stranger), v.ID, "", "cat", "/output/mine"); !errors.Is(err, api.ErrNotFound) || r.stdout != "" {
		t.Fatalf("a stranger's exec in the renter's job: %+v %v, want refused as not found", r, err)
	}

	if _, err := renter.renter.CancelJob(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the job ended on the provider", func() (bool, string) {
		j, err := prov.ledger.Jobs.GetJob(v.ID)
		return err == nil && fmt.Sprint(j.State) != "running", fmt.Sprint(j.State)
	})
	if r, err := runExec(cl, v.ID, "", "cat", "/output/mine"); !errors.Is(err, api.ErrConflict) || r.stdout != "" {
		t.Fatalf("an exec in an ended job: %+v %v, want refused as not running", r, err)
	}
}

// BenchmarkExecRoundTrip: `gpunex job exec JOB -- true` through the renter's local API, the
// libp2p stream and containerd's exec, to its exit status (target: under 300 ms).
func BenchmarkExecRoundTrip(b *testing.B) {
	renter, prov := jobNet(b, 1)
	cl := apiClient(b, renter)
	v := execJob(b, renter, prov, cl)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, err := runExec(cl, v.ID, "", "true"); err != nil || r.code != 0 {
			b.Fatalf("exec true: %+v %v", r, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/exec")
	renter.renter.CancelJob(context.Background(), v.ID)
}
