package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node"
	"github.com/gpunex/gpunex/sandbox"
)

// These tests drive the real binary, as a user would.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpunex-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "gpunex")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build gpunex: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gpunex runs the binary and returns stdout, stderr and the exit code.
func gpunex(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return gpunexIn(t, "", args...)
}

// gpunexIn runs the binary with stdin and returns stdout, stderr and the exit code.
func gpunexIn(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := gpunex(t, args...)
	if code != 0 {
		t.Fatalf("gpunex %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func TestInitAndVersion(t *testing.T) {
	if out := mustRun(t, "version"); !strings.HasPrefix(out, "gpunex ") {
		t.Fatalf("version printed %q", out)
	}
	dir := filepath.Join(t.TempDir(), "home")
	out := mustRun(t, "init", "--home", dir, "--role", "provider")
	if !strings.Contains(out, "peer ID: 12D3KooW") {
		t.Fatalf("init output: %s", out)
	}
	for name, mode := range map[string]os.FileMode{node.IdentityFile: 0o600, node.TokenFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Fatalf("%s: %v mode %v; want %o", name, err, st.Mode().Perm(), mode)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, node.DataDir)); err != nil || !st.IsDir() {
		t.Fatal("no data dir")
	}
	// The written config loads back and documents itself.
	if _, err := node.LoadConfig(filepath.Join(dir, node.ConfigFile)); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, node.ConfigFile))
	if !strings.Contains(string(cfg), "# USDC per GPU-hour") {
		t.Fatal("config.toml lacks its comments")
	}
	// A second init keeps the identity.
	if _, errOut, code := gpunex(t, "init", "--home", dir, "--role", "renter"); code == 0 || !strings.Contains(errOut, "already initialised") {
		t.Fatalf("second init: exit %d, %s", code, errOut)
	}
	if _, errOut, code := gpunex(t, "init", "--home", t.TempDir(), "--role", "miner"); code == 0 || !strings.Contains(errOut, "role") {
		t.Fatalf("bad role: exit %d, %s", code, errOut)
	}
	// GPUs: the simulated ones the config declares; NVML (no driver here) says so plainly.
	var gpus []map[string]any
	json.Unmarshal([]byte(mustRun(t, "gpus", "--json", "--home", dir)), &gpus)
	if len(gpus) != 1 || gpus[0]["model"] != "L4-24GB" || gpus[0]["vram_gb"] != 24.0 || gpus[0]["driver_version"] == "" ||
		gpus[0]["cuda_version"] == "" || !strings.HasPrefix(gpus[0]["uuid"].(string), "GPU-") {
		t.Fatalf("gpus --json: %+v", gpus)
	}
	cfgText, _ := os.ReadFile(filepath.Join(dir, node.ConfigFile))
	real := filepath.Join(t.TempDir(), "real")
	mustRun(t, "init", "--home", real, "--role", "provider")
	os.WriteFile(filepath.Join(real, node.ConfigFile), []byte(strings.Replace(string(cfgText), "simulated = true", "simulated = false", 1)), 0o644)
	if _, errOut, code := gpunex(t, "gpus", "--home", real); code == 0 || !strings.Contains(errOut, "NVML") || !strings.Contains(errOut, "driver") {
		if code == 0 {
			t.Log("an NVIDIA driver is present: NVML answered")
		} else {
			t.Fatalf("gpus without a driver: exit %d, %s", code, errOut)
		}
	}
	// Commands that need the daemon say so.
	if _, errOut, code := gpunex(t, "offers", "search", "--home", dir); code == 0 || !strings.Contains(errOut, "node run") {
		t.Fatalf("search without daemon: exit %d, %s", code, errOut)
	}
}

func TestVerifyRejectsGarbage(t *testing.T) {
	f := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(f, []byte("not a record"), 0o644)
	_, errOut, code := gpunex(t, "verify", f)
	if code != 1 || !strings.Contains(errOut, "INVALID") {
		t.Fatalf("verify junk: exit %d, %s", code, errOut)
	}
}

type searchRow struct {
	ID        string    `json:"id"`
	Provider  string    `json:"provider"`
	Model     string    `json:"model"`
	GPUs      int       `json:"gpus"`
	VRAMGB    int       `json:"vram_gb"`
	Price     string    `json:"price_usdc_per_gpu_hour"`
	Region    string    `json:"region"`
	Tier      string    `json:"tier"`
	ExpiresAt time.Time `json:"expires_at"`
	Bench     *struct {
		PerfScore int `json:"perf_score"`
	} `json:"bench"`
}

func searchJSON(t *testing.T, home string, args ...string) []searchRow {
	t.Helper()
	out := mustRun(t, append([]string{"offers", "search", "--home", home, "--json"}, args...)...)
	var rows []searchRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("search --json: %v\n%s", err, out)
	}
	return rows
}

// TestDevnetEndToEnd: devnet up, search, price change, raw record verified, tampered
// record refused, devnet down, no process left.
func TestDevnetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	dev := exec.Command(binary, "devnet", "--dir", dir, "--providers", "3")
	stdout, _ := dev.StdoutPipe()
	dev.Stderr = os.Stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer dev.Process.Kill()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			t.Log(sc.Text())
			if strings.HasPrefix(sc.Text(), "devnet ready") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(120 * time.Second):
		t.Fatal("devnet not ready in 120 s")
	}
	var f node.DevnetFile
	b, err := os.ReadFile(filepath.Join(dir, "devnet.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Nodes) != 5 {
		t.Fatalf("devnet.json lists %d nodes; want 5", len(f.Nodes))
	}
	names := map[string]node.DevnetNode{}
	for _, n := range f.Nodes {
		names[n.Name] = n
		if !strings.HasPrefix(n.PeerID, "12D3KooW") || !strings.HasPrefix(n.API, "http://127.0.0.1:") || n.Home != filepath.Join(dir, n.Name) {
			t.Fatalf("devnet.json entry incomplete: %+v", n)
		}
	}
	// Onboarding: provider-1 approved, provider-2 left pending, provider-3 rejected; only
	// the certified provider's offer is in search.
	var queue []node.ApplicationView
	json.Unmarshal([]byte(mustRun(t, "coordinator", "applications", "list", "--json", "--home", names["coordinator"].Home)), &queue)
	statuses := map[string]string{}
	for _, a := range queue {
		statuses[a.Provider] = a.Status
	}
	if statuses[names["provider-1"].PeerID] != "approved" || statuses[names["provider-2"].PeerID] != "pending" || statuses[names["provider-3"].PeerID] != "rejected" {
		t.Fatalf("coordinator queue: %+v", queue)
	}
	if out := mustRun(t, "apply", "status", "--home", names["provider-3"].Home); !strings.Contains(out, "rejected") || !strings.Contains(out, "reason: ") {
		t.Fatalf("rejected provider's status: %s", out)
	}
	renter := filepath.Join(dir, "renter-1")
	rows := searchJSON(t, renter)
	for _, r := range rows {
		if r.Provider != names["provider-1"].PeerID || r.Tier != "enterprise" {
			t.Fatalf("renter sees %+v; want provider-1's certified offer only", rows)
		}
	}
	for _, r := range rows {
		if r.ID == "" || r.Model == "" || r.GPUs < 1 || r.VRAMGB < 1 || r.Price == "" || r.Region == "" || r.ExpiresAt.Before(time.Now()) {
			t.Fatalf("incomplete row: %+v", r)
		}
	}
	p1 := names["provider-1"]
	h100 := searchJSON(t, renter, "--model", "H100-80GB")
	if len(h100) != 1 || h100[0].Provider != p1.PeerID {
		t.Fatalf("search by model: %+v", h100)
	}
	if got := searchJSON(t, renter, "--max-price", "0.10"); len(got) != 0 {
		t.Fatalf("max-price filter: %+v", got)
	}

	// Price change: the renter sees it within seconds.
	mustRun(t, "offer", "set-price", "--home", p1.Home, "--model", "H100-80GB", "--usdc", "1.87")
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := searchJSON(t, renter, "--model", "H100-80GB")
		if len(got) == 1 && got[0].Price == "1.87" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new price not seen within 5 s: %+v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The raw record verifies; a tampered copy does not.
	raw := filepath.Join(dir, "offer.rec")
	mustRun(t, "offers", "show", h100[0].ID, "--raw", "-o", raw, "--home", renter)
	out := mustRun(t, "verify", raw)
	if !strings.Contains(out, "OK: offer record signed by "+p1.PeerID) || !strings.Contains(out, "1870000") {
		t.Fatalf("verify output: %s", out)
	}
	data, _ := os.ReadFile(raw)
	data[len(data)-70] ^= 0x01
	bad := filepath.Join(dir, "tampered.rec")
	os.WriteFile(bad, data, 0o644)
	if _, errOut, code := gpunex(t, "verify", bad); code == 0 || !strings.Contains(errOut, "INVALID") {
		t.Fatalf("tampered record: exit %d, %s", code, errOut)
	}

	// Benchmarks: provider-1's throttled L4s are delisted with a notification that says why;
	// its H100s are listed with their measured figures.
	deadline = time.Now().Add(20 * time.Second)
	for {
		out := mustRun(t, "notifications", "--home", p1.Home)
		rows := searchJSON(t, renter)
		if strings.Contains(out, "L4-24GB) delisted") && strings.Contains(out, "under the threshold") && len(rows) == 1 && rows[0].Model == "H100-80GB" && rows[0].Bench != nil && rows[0].Bench.PerfScore > 90 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("benchmarks: notifications %q, rows %+v", out, rows)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if out := mustRun(t, "bench", "show", "--home", p1.Home); !strings.Contains(out, "DELISTED") || !strings.Contains(out, "storage: write") {
		t.Fatalf("bench show: %s", out)
	}
	// Reliability: the coordinator probes provider-1 every 2 s; every node holds its score.
	for {
		var scores []struct {
			Provider string  `json:"provider"`
			Score    int     `json:"score"`
			Probes   float64 `json:"probes"`
		}
		out, _, _ := gpunex(t, "score", p1.PeerID, "--json", "--home", renter) // not found until the first probe
		json.Unmarshal([]byte(out), &scores)
		if len(scores) == 1 && scores[0].Score >= 85 && scores[0].Probes >= 1 {
			break
		}
		if time.Now().After(deadline.Add(15 * time.Second)) {
			t.Fatalf("score of provider-1: %+v", scores)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out := mustRun(t, "offers", "search", "--explain", "--home", renter); !strings.Contains(out, "merit = ") {
		t.Fatalf("search --explain: %s", out)
	}

	// A job through the CLI: output streamed, the job's exit code returned, cost shown,
	// output fetched.
	offerID := p1.PeerID + "/H100-80GB"
	out, errOut, code := gpunex(t, "job", "run", "--home", renter, "--offer", offerID, "--gpus", "1", "--max-hours", "0.1",
		"--image-archive", filepath.Join(dir, "busybox.tar"), "--", "sh", "-c", "echo streamed line; echo result > /output/r.txt; exit 7")
	if code != 7 || !strings.Contains(out, "streamed line") || !strings.Contains(errOut, "cost ") {
		t.Fatalf("job run: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var jobs []node.JobView
	json.Unmarshal([]byte(mustRun(t, "job", "list", "--json", "--home", renter)), &jobs)
	if len(jobs) < 2 || jobs[0].ExitCode != 7 || !jobs[0].Countersign || jobs[0].State != "ended" {
		t.Fatalf("job list: %+v", jobs)
	}
	fetched := filepath.Join(dir, "fetched")
	mustRun(t, "job", "fetch", jobs[0].ID, fetched, "--home", renter)
	if b, err := os.ReadFile(filepath.Join(fetched, "r.txt")); err != nil || string(b) != "result\n" {
		t.Fatalf("fetched output: %q %v", b, err)
	}
	if _, errOut, code := gpunex(t, "job", "run", "--home", renter, "--offer", offerID, "--gpus", "9", "--max-hours", "0.1",
		"--image-archive", filepath.Join(dir, "busybox.tar"), "--", "true"); code == 0 || !strings.Contains(errOut, "offered") {
		t.Fatalf("too many GPUs: exit %d, %s", code, errOut)
	}

	// Down: SIGTERM stops everything, no process is left behind.
	dev.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- dev.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("devnet exit: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("devnet did not stop within 20 s")
	}
	for _, n := range f.Nodes {
		if syscall.Kill(n.PID, 0) == nil {
			t.Errorf("%s (pid %d) still running", n.Name, n.PID)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "devnet.json")); err == nil {
		t.Error("devnet.json left behind after stop")
	}
}

// startNode runs `gpunex node run` for a home and waits for its API. Benchmarks are
// shrunk to a few MB so that the tests stay quick.
func startNode(t *testing.T, home string) (*exec.Cmd, node.Status) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(home, node.ConfigFile)); err == nil {
		s := strings.Replace(string(b), "storage_mb = 256", "storage_mb = 8", 1)
		os.WriteFile(filepath.Join(home, node.ConfigFile), []byte(strings.Replace(s, "network_mb = 16", "network_mb = 2", 1)), 0o644)
	}
	os.Remove(filepath.Join(home, node.APIAddrFile))
	logf, _ := os.Create(filepath.Join(home, "node.log"))
	cmd := exec.Command(binary, "node", "run", "--home", home)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if out, _, code := gpunex(t, "status", "--json", "--home", home); code == 0 {
			var st node.Status
			json.Unmarshal([]byte(out), &st)
			return cmd, st
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(home, "node.log"))
	t.Fatalf("node in %s did not start:\n%s", home, log)
	return nil, node.Status{}
}

type offerJSON struct {
	Seq  uint64 `json:"seq"`
	GPUs []struct {
		Price int64 `json:"price_micro_usdc_per_gpu_hour"`
	} `json:"gpus"`
}

// TestProviderSurvivesKill9: a provider killed with SIGKILL restarts on the same home, keeps
// its price, and its next offer carries a higher sequence, so renters take it rather than
// rejecting it as a replay.
func TestProviderSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	local := "/ip4/127.0.0.1/tcp/0,/ip4/127.0.0.1/udp/0/quic-v1"
	coord, prov, renter := filepath.Join(dir, "coordinator"), filepath.Join(dir, "provider"), filepath.Join(dir, "renter")
	mustRun(t, "init", "--home", coord, "--role", "coordinator", "--listen", local)
	_, cst := startNode(t, coord)
	boot := cst.Addrs[0]
	mustRun(t, "init", "--home", prov, "--role", "provider", "--listen", local, "--bootstrap", boot, "--region", "us-east")
	mustRun(t, "init", "--home", renter, "--role", "renter", "--listen", local, "--bootstrap", boot)
	p, pst := startNode(t, prov)
	startNode(t, renter)
	certify(t, coord, prov)

	waitOffer := func(what string, ok func(searchRow) bool) searchRow {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			for _, r := range searchJSON(t, renter) {
				if r.Provider == pst.PeerID && ok(r) {
					return r
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: not seen by the renter", what)
		return searchRow{}
	}
	waitOffer("first offer", func(r searchRow) bool { return r.Region == "us-east" })
	mustRun(t, "offer", "set-price", "--home", prov, "--model", "L4-24GB", "--usdc", "0.61")
	var before offerJSON
	json.Unmarshal([]byte(mustRun(t, "offer", "show", "--home", prov)), &before)
	waitOffer("new price", func(r searchRow) bool { return r.Price == "0.61" })

	p.Process.Signal(syscall.SIGKILL)
	p.Wait()
	startNode(t, prov)
	var after offerJSON
	json.Unmarshal([]byte(mustRun(t, "offer", "show", "--home", prov)), &after)
	if after.Seq <= before.Seq {
		t.Fatalf("sequence after kill -9: %d, before: %d", after.Seq, before.Seq)
	}
	if len(after.GPUs) != 1 || after.GPUs[0].Price != 610_000 {
		t.Fatalf("price lost across kill -9: %+v", after)
	}
	// The renter takes the restarted provider's offer: change the price again and see it.
	mustRun(t, "offer", "set-price", "--home", prov, "--model", "L4-24GB", "--usdc", "0.62")
	waitOffer("price after restart", func(r searchRow) bool { return r.Price == "0.62" })
}

// certify has a provider apply by answering the questions on standard input, and the
// coordinator approve it, through the CLI.
func certify(t *testing.T, coord, prov string) {
	t.Helper()
	answers := strings.Join([]string{
		"Ada Lovelace", "not-an-email", "ada@example.org", "", // an invalid answer is asked again
		"L4-24GB", "1", "128", "1", "1", "24/7", "Lyon", "FR", "us-east", "no",
		"yes", "12", "",
	}, "\n") + "\n"
	out, errOut, code := gpunexIn(t, answers, "apply", "--interactive", "--home", prov)
	if code != 0 || !strings.Contains(out, "an e-mail address") || !strings.Contains(out, "queued for coordinator") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	var id string
	deadline := time.Now().Add(20 * time.Second)
	for id == "" && time.Now().Before(deadline) {
		var queue []node.ApplicationView
		json.Unmarshal([]byte(mustRun(t, "coordinator", "applications", "list", "--status", "pending", "--json", "--home", coord)), &queue)
		if len(queue) == 1 {
			id = queue[0].ID
		}
		time.Sleep(200 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("the application did not reach the coordinator")
	}
	if out := mustRun(t, "coordinator", "applications", "approve", id, "--as", "alice", "--home", coord); !strings.Contains(out, "approved enterprise") {
		t.Fatalf("approve: %s", out)
	}
	if out := mustRun(t, "coordinator", "applications", "show", id, "--home", coord); !strings.Contains(out, "approved") || !strings.Contains(out, "operator alice") {
		t.Fatalf("show: %s", out)
	}
	for time.Now().Before(deadline.Add(10 * time.Second)) {
		if out := mustRun(t, "apply", "status", "--home", prov); strings.Contains(out, "approved (tier enterprise)") && strings.Contains(out, "certificate") {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("provider not approved: %s", mustRun(t, "apply", "status", "--home", prov))
}

// TestOnboardingSurvivesKill9: a provider applies while the coordinator is down; the
// provider is killed with SIGKILL before delivery and restarted; the coordinator comes back
// and receives the application; a decision survives the coordinator's own SIGKILL.
func TestOnboardingSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	coord, prov := filepath.Join(dir, "coordinator"), filepath.Join(dir, "provider")
	mustRun(t, "init", "--home", coord, "--role", "coordinator", "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port))
	c, cst := startNode(t, coord)
	mustRun(t, "init", "--home", prov, "--role", "provider", "--listen", "/ip4/127.0.0.1/tcp/0", "--bootstrap", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, cst.PeerID))
	p, _ := startNode(t, prov)
	kill := func(cmd *exec.Cmd) { cmd.Process.Signal(syscall.SIGKILL); cmd.Wait() }
	kill(c)

	// Apply from the template, filled in.
	app := mustRun(t, "apply", "--template")
	app = strings.Replace(app, `name = ""`, `name = "Grace Hopper"`, 1)
	app = strings.Replace(app, `email = ""`, `email = "grace@example.org"`, 1)
	app = strings.Replace(app, `city = ""`, `city = "Paris"`, 1)
	app = strings.Replace(app, `ups = false`, `ups = true`, 1)
	app = strings.Replace(app, `model = "H100-80GB"`, `model = "L4-24GB"`, 1)
	file := filepath.Join(dir, "application.toml")
	os.WriteFile(file, []byte(app), 0o644)
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte(strings.Replace(app, `country = "FR"`, `country = "France"`, 1)), 0o644)
	if _, errOut, code := gpunex(t, "apply", "--file", bad, "--home", prov); code == 0 || !strings.Contains(errOut, "gpus[0].location.country") {
		t.Fatalf("invalid application: exit %d, %s", code, errOut)
	}
	out := mustRun(t, "apply", "--file", file, "--home", prov)
	if !strings.Contains(out, "queued") {
		t.Fatalf("apply: %s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(mustRun(t, "apply", "status", "--home", prov), "not delivered yet") {
		if time.Now().After(deadline) {
			t.Fatal("status does not say the application is waiting for delivery")
		}
		time.Sleep(200 * time.Millisecond)
	}
	kill(p)
	startNode(t, prov)
	c, _ = startNode(t, coord)
	var queue []node.ApplicationView
	for len(queue) == 0 {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatal("the queued application never reached the restarted coordinator")
		}
		json.Unmarshal([]byte(mustRun(t, "coordinator", "applications", "list", "--json", "--home", coord)), &queue)
		time.Sleep(200 * time.Millisecond)
	}
	if queue[0].Status != "pending" || queue[0].ProposedTier != "enterprise" {
		t.Fatalf("queue: %+v", queue)
	}
	id := queue[0].ID
	mustRun(t, "coordinator", "applications", "request-info", id, "--message", "Which UPS model?", "--as", "bob", "--home", coord)
	// The coordinator is killed right after deciding: the decision and its trail are on disk.
	kill(c)
	startNode(t, coord)
	show := mustRun(t, "coordinator", "applications", "show", id, "--home", coord)
	if !strings.Contains(show, "info-requested") || !strings.Contains(show, "operator bob") || !strings.Contains(show, "Which UPS model?") {
		t.Fatalf("after kill -9: %s", show)
	}
	// The provider learns the question (pushed, or on its next status request) and answers.
	for !strings.Contains(mustRun(t, "apply", "status", "--home", prov), "the coordinator asks: Which UPS model?") {
		if time.Now().After(deadline.Add(90 * time.Second)) {
			t.Fatalf("provider never saw the question: %s", mustRun(t, "apply", "status", "--home", prov))
		}
		time.Sleep(500 * time.Millisecond)
	}
	mustRun(t, "apply", "answer", "--message", "APC Smart-UPS 3000", "--home", prov)
	for !strings.Contains(mustRun(t, "coordinator", "applications", "show", id, "--home", coord), "APC Smart-UPS 3000") {
		if time.Now().After(deadline.Add(120 * time.Second)) {
			t.Fatal("answer never reached the coordinator")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := mustRun(t, "notifications", "--home", prov); !strings.Contains(out, "info-requested") {
		t.Fatalf("notifications: %s", out)
	}
}

// TestProviderJobSurvivesKill9: a provider killed with SIGKILL while a job runs finds the job
// again after its restart; the job finishes, the renter gets its whole output and a
// countersigned receipt, and nothing is left in containerd.
func TestProviderJobSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	d, err := sandbox.StartContainerd(context.Background(), filepath.Join(dir, "ctrd"))
	if err != nil {
		if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer d.Stop()
	local := "/ip4/127.0.0.1/tcp/0"
	coord, prov, renter := filepath.Join(dir, "coordinator"), filepath.Join(dir, "provider"), filepath.Join(dir, "renter")
	mustRun(t, "init", "--home", coord, "--role", "coordinator", "--listen", local)
	_, cst := startNode(t, coord)
	mustRun(t, "init", "--home", prov, "--role", "provider", "--listen", local, "--bootstrap", cst.Addrs[0], "--containerd", d.Address())
	mustRun(t, "init", "--home", renter, "--role", "renter", "--listen", local, "--bootstrap", cst.Addrs[0])
	p, pst := startNode(t, prov)
	startNode(t, renter)
	certify(t, coord, prov)
	archive := filepath.Join(dir, "busybox.tar")
	f, _ := os.Create(archive)
	if _, err := sandbox.BusyboxImage(f, "gpunex.test/busybox:1"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	offer := pst.PeerID + "/L4-24GB"
	deadline := time.Now().Add(20 * time.Second)
	for len(searchJSON(t, renter, "--model", "L4-24GB")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("certified offer not seen")
		}
		time.Sleep(200 * time.Millisecond)
	}
	id := strings.TrimSpace(mustRun(t, "job", "run", "--detach", "--home", renter, "--offer", offer, "--gpus", "1", "--max-hours", "0.1",
		"--image-archive", archive, "--", "sh", "-c", "echo before; sleep 4; echo after"))
	if len(id) != 16 {
		t.Fatalf("job ID %q", id)
	}
	p.Process.Signal(syscall.SIGKILL)
	p.Wait()
	startNode(t, prov)
	out := mustRun(t, "job", "logs", "-f", id, "--home", renter)
	if !strings.Contains(out, "before") || !strings.Contains(out, "after") {
		t.Fatalf("output across the provider's restart: %q", out)
	}
	var jobs []node.JobView
	json.Unmarshal([]byte(mustRun(t, "job", "list", "--json", "--home", renter)), &jobs)
	if len(jobs) != 1 || jobs[0].State != "ended" || jobs[0].ExitCode != 0 || !jobs[0].Countersign || jobs[0].Seconds < 3 {
		t.Fatalf("job after the restart: %+v", jobs)
	}
	rt, err := sandbox.NewContainerd(context.Background(), sandbox.ContainerdOptions{Address: d.Address(), Namespace: "gpunex"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for time.Now().Before(deadline.Add(20 * time.Second)) {
		if left, _ := rt.List(context.Background()); len(left) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	left, _ := rt.List(context.Background())
	t.Fatalf("containers left behind: %+v", left)
}
