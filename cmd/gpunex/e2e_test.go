//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/devnet"

	"github.com/gpunex/gpunex/sandbox"
)

// These tests drive the real binary, as a user would.

var binary string

func TestMain(m *testing.M) {
	sandbox.RunLoggerIfInvoked() // in case a test starts jobs in this process
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
	if out := mustRun(t, "version"); !strings.HasPrefix(out, "gpunex ") || !strings.Contains(out, "\nhome format 1\n") ||
		!strings.Contains(out, "\nrecord model-catalogue v1\n") || !strings.Contains(out, "\nstream /gpunex/wallet/2.0.0\n") || !strings.Contains(out, "\ntopic /gpunex/models/1\n") {
		t.Fatalf("version printed %q", out)
	}
	// A home written by a newer gpunex is refused, with what to do.
	newer := filepath.Join(t.TempDir(), "newer")
	mustRun(t, "init", "--home", newer, "--role", "renter")
	os.WriteFile(filepath.Join(newer, config.FormatFile), []byte(`{"format":2,"written_by":"9.9.9"}`), 0o600)
	if _, errOut, code := gpunex(t, "node", "run", "--home", newer); code != 1 || !strings.Contains(errOut, "written by gpunex 9.9.9 in home format 2") || !strings.Contains(errOut, "upgrade gpunex") {
		t.Fatalf("node run on a newer home: exit %d: %s", code, errOut)
	}
	dir := filepath.Join(t.TempDir(), "home")
	out := mustRun(t, "init", "--home", dir, "--role", "provider")
	if !strings.Contains(out, "peer ID: 12D3KooW") {
		t.Fatalf("init output: %s", out)
	}
	for name, mode := range map[string]os.FileMode{config.IdentityFile: 0o600, config.TokenFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Fatalf("%s: %v mode %v; want %o", name, err, st.Mode().Perm(), mode)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, config.DataDir)); err != nil || !st.IsDir() {
		t.Fatal("no data dir")
	}
	// The written config loads back and documents itself.
	if _, err := config.LoadConfig(filepath.Join(dir, config.ConfigFile)); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, config.ConfigFile))
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
	cfgText, _ := os.ReadFile(filepath.Join(dir, config.ConfigFile))
	real := filepath.Join(t.TempDir(), "real")
	mustRun(t, "init", "--home", real, "--role", "provider")
	os.WriteFile(filepath.Join(real, config.ConfigFile), []byte(strings.Replace(string(cfgText), "simulated = true", "simulated = false", 1)), 0o644)
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
	Avail     string    `json:"availability"`
	Tier      string    `json:"tier"`
	ExpiresAt time.Time `json:"expires_at"`
	Bench     *struct {
		PerfScore int `json:"perf_score"`
	} `json:"bench"`
	Score *int `json:"score"`
	Rank  struct {
		Score int     `json:"score"`
		Merit float64 `json:"merit"`
	} `json:"rank"`
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

// devnetOutput collects a devnet's output lines as they come, for the test to wait on.
type devnetOutput struct {
	mu    sync.Mutex
	lines []string
}

// wait returns the first line that starts with want, waiting for it until the deadline.
func (d *devnetOutput) wait(t *testing.T, want string, deadline time.Time) string {
	t.Helper()
	for {
		d.mu.Lock()
		for _, l := range d.lines {
			if strings.HasPrefix(l, want) {
				d.mu.Unlock()
				return l
			}
		}
		d.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the devnet did not print %q in time", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startDevnet runs `gpunex devnet` with args in dir and waits for "devnet ready"; it
// returns the process, its output and devnet.json as written then.
func startDevnet(t *testing.T, dir string, args ...string) (*exec.Cmd, *devnetOutput, devnet.File) {
	t.Helper()
	dev := exec.Command(binary, append([]string{"devnet", "--dir", dir}, args...)...)
	stdout, _ := dev.StdoutPipe()
	dev.Stderr = os.Stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Process.Kill() })
	out := &devnetOutput{}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			t.Log(sc.Text())
			out.mu.Lock()
			out.lines = append(out.lines, sc.Text())
			out.mu.Unlock()
		}
	}()
	out.wait(t, "devnet ready", time.Now().Add(120*time.Second))
	return dev, out, readDevnetFile(t, dir)
}

func readDevnetFile(t *testing.T, dir string) devnet.File {
	t.Helper()
	var f devnet.File
	b, err := os.ReadFile(filepath.Join(dir, "devnet.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// stopDevnet sends SIGTERM and checks that the devnet exits cleanly, that none of the
// given processes is left and that devnet.json is gone.
func stopDevnet(t *testing.T, dev *exec.Cmd, dir string, pids map[int]string) {
	t.Helper()
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
	for pid, name := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (pid %d) still running", name, pid)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "devnet.json")); err == nil {
		t.Error("devnet.json left behind after stop")
	}
}

type scoreJSON struct {
	Provider string  `json:"provider"`
	Score    int     `json:"score"`
	Trend    int     `json:"trend"`
	Probes   float64 `json:"probes"`
}

// scoresOf returns the scores the node at home holds, by provider.
func scoresOf(t *testing.T, home string) map[string]scoreJSON {
	t.Helper()
	var list []scoreJSON
	json.Unmarshal([]byte(mustRun(t, "score", "--json", "--home", home)), &list)
	m := map[string]scoreJSON{}
	for _, s := range list {
		m[s.Provider] = s
	}
	return m
}

// position is the index of provider's first row in rows, or -1.
func position(rows []searchRow, provider string) int {
	for i, r := range rows {
		if r.Provider == provider {
			return i
		}
	}
	return -1
}

// TestDevnetEndToEnd: devnet up; onboarding; a provider's outage lowers its score and its
// place in search, both recover after it returns; search, price change, raw record
// verified, tampered record refused, benchmarks, a job; devnet down, no process left.
func TestDevnetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	// provider-1, the best-placed, goes offline 30 s after "devnet ready", for 20 s: the
	// steps before it (prices, maintenance, availability, each seen by the renter) must be
	// over by then, and took more than 5 s on a loaded machine.
	dev, devOut, f := startDevnet(t, dir, "--providers", "4", "--outage-after", "30s", "--outage-for", "20s")
	renter := filepath.Join(dir, "renter-1")
	before := searchJSON(t, renter) // before the outage: the order it changes
	if len(f.Nodes) != 6 {
		t.Fatalf("devnet.json lists %d nodes; want 6", len(f.Nodes))
	}
	names := map[string]devnet.Node{}
	for _, n := range f.Nodes {
		names[n.Name] = n
		if !strings.HasPrefix(n.PeerID, "12D3KooW") || !strings.HasPrefix(n.API, "http://127.0.0.1:") || n.Home != filepath.Join(dir, n.Name) || n.Offline {
			t.Fatalf("devnet.json entry incomplete: %+v", n)
		}
	}
	p1, p2 := names["provider-1"], names["provider-2"]

	// The devnet printed each node's dashboard link; a link opens a browser session once,
	// and `gpunex dashboard` gives a new one.
	openLink := func(link string) int {
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(link)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusSeeOther && (len(resp.Cookies()) != 1 || !resp.Cookies()[0].HttpOnly) {
			t.Fatalf("dashboard session cookie: %v", resp.Cookies())
		}
		return resp.StatusCode
	}
	devOut.mu.Lock()
	printed := strings.Join(devOut.lines, "\n")
	devOut.mu.Unlock()
	for _, n := range f.Nodes {
		m := regexp.MustCompile(`(?m)^\s+` + n.Name + `\s+(` + regexp.QuoteMeta(n.API) + `/login\?code=[0-9a-f]+)$`).FindStringSubmatch(printed)
		if m == nil {
			t.Fatalf("the devnet printed no dashboard link for %s:\n%s", n.Name, printed)
		}
		if n.Name == "renter-1" {
			if code := openLink(m[1]); code != http.StatusSeeOther {
				t.Fatalf("the renter's dashboard link: %d", code)
			}
			if code := openLink(m[1]); code != http.StatusUnauthorized {
				t.Fatalf("the renter's dashboard link opened twice: %d", code)
			}
		}
	}
	if link := strings.TrimSpace(mustRun(t, "dashboard", "--home", renter)); !strings.HasPrefix(link, names["renter-1"].API+"/login?code=") || openLink(link) != http.StatusSeeOther {
		t.Fatalf("gpunex dashboard printed %q", link)
	}

	// Money: the renter deposited test USDC and its demo job was charged from the escrow
	// hold; a payout batch paid provider-1 on the local Solana runtime; the auditor passes
	// the batch and fails an altered copy.
	if f.SolanaRPC == "" || f.USDCMint == "" || f.Cluster == "" {
		t.Fatalf("devnet.json lacks the Solana runtime: %+v", f)
	}
	// The demo job was metered as it ran: checkpoints both sides signed, then a receipt
	// both signed (the charge under the countersigned-receipt rule).
	var demo []api.JobView
	json.Unmarshal([]byte(mustRun(t, "job", "list", "--json", "--home", renter)), &demo)
	if len(demo) != 1 || demo[0].MeteredSeconds < 2 || !demo[0].Countersign || demo[0].Disputed {
		t.Fatalf("the demo job was not metered as it ran: %+v", demo)
	}
	var bal api.BalanceView
	json.Unmarshal([]byte(mustRun(t, "wallet", "balance", "--json", "--home", renter)), &bal)
	if bal.DepositedUSDC != "100.00" || bal.Held != 0 || bal.Available >= 100_000_000 || bal.Available <= 99_000_000 || bal.WalletUSDC != "900.00" {
		t.Fatalf("renter's balance after the demo job: %+v", bal)
	}
	var batches []api.BatchView
	json.Unmarshal([]byte(mustRun(t, "coordinator", "payouts", "list", "--json", "--home", names["coordinator"].Home)), &batches)
	if len(batches) != 1 || batches[0].State != "settled" || len(batches[0].Payouts) != 1 || batches[0].Payouts[0].Provider != p1.PeerID || len(batches[0].Transactions) != 1 {
		t.Fatalf("payout batches: %+v", batches)
	}
	bundleFile := filepath.Join(dir, "payout-"+batches[0].BatchID+".json")
	if out := mustRun(t, "audit", "payouts", "--batch", bundleFile, "--rpc", f.SolanaRPC, "--coordinator", names["coordinator"].PeerID); !strings.Contains(out, "OK: every amount") {
		t.Fatalf("audit: %s", out)
	}
	if out, _, code := gpunex(t, "audit", "payouts", "--batch", strings.TrimSuffix(bundleFile, ".json")+"-altered.json", "--rpc", f.SolanaRPC); code != 1 || !strings.Contains(out, "DISCREPANCY") {
		t.Fatalf("audit of an altered batch: exit %d, %s", code, out)
	}
	rawBatch := filepath.Join(dir, "batch.rec")
	os.WriteFile(rawBatch, []byte(mustRun(t, "coordinator", "payouts", "show", batches[0].BatchID, "--raw", "--home", names["coordinator"].Home)), 0o644)
	if out := mustRun(t, "verify", rawBatch); !strings.Contains(out, "OK: payout-batch record signed by "+names["coordinator"].PeerID) {
		t.Fatalf("verify batch: %s", out)
	}
	// The doctor: a devnet provider and its coordinator can serve their roles.
	if r, by, code := doctorOf(t, p1.Home); code != 0 || !r.OK || by["node"].Status != "ok" || by["containerd"].Status != "ok" ||
		by["gpus"].Status != "ok" || by["certificate"].Status != "ok" || by["runc"].Status != "ok" || by["clock"].Status != "ok" {
		t.Fatalf("doctor of provider-1: exit %d %+v", code, r.Checks)
	}
	if r, by, code := doctorOf(t, names["coordinator"].Home); code != 0 || by["solana"].Status != "ok" || by["node"].Status != "ok" {
		t.Fatalf("doctor of the coordinator: exit %d %+v", code, r.Checks)
	}

	// Maintenance from an iCalendar: a weekly event (two occurrences) and a one-off one are
	// planned and announced; imported again, nothing is added; exported, they read back.
	day := time.Now().UTC().Add(48 * time.Hour).Truncate(time.Hour)
	ics := filepath.Join(dir, "maintenance.ics")
	os.WriteFile(ics, []byte("BEGIN:VCALENDAR\r\nVERSION:2.0\r\n"+
		"BEGIN:VEVENT\r\nUID:w@test\r\nDTSTART:"+day.Format("20060102T150405Z")+"\r\nDURATION:PT1H\r\nRRULE:FREQ=WEEKLY;COUNT=2\r\nSUMMARY:fans\r\nEND:VEVENT\r\n"+
		"BEGIN:VEVENT\r\nUID:o@test\r\nDTSTART:"+day.Add(3*time.Hour).Format("20060102T150405Z")+"\r\nDURATION:PT30M\r\nSUMMARY:PSU swap\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"), 0o644)
	if out := mustRun(t, "maintenance", "import", ics, "--home", p1.Home); !strings.Contains(out, "3 windows planned, 0 planned already") {
		t.Fatalf("maintenance import: %s", out)
	}
	if out := mustRun(t, "maintenance", "import", ics, "--home", p1.Home); !strings.Contains(out, "0 windows planned, 3 planned already") {
		t.Fatalf("maintenance import again: %s", out)
	}
	if out := mustRun(t, "maintenance", "export", "--home", p1.Home); strings.Count(out, "BEGIN:VEVENT") < 3 || !strings.Contains(out, "SUMMARY:PSU swap") ||
		!strings.Contains(out, "DTSTART:"+day.Format("20060102T150405Z")) {
		t.Fatalf("maintenance export:\n%s", out)
	}

	// Availability from an iCalendar of weekly events: every day but the hour starting in 12
	// hours, so the provider stays open now. It applies without a restart (the renter sees
	// the new hours in the offer), exports as weekly events, and resets to the config's.
	opens := time.Now().UTC().Add(13 * time.Hour).Truncate(time.Hour)
	closes := (opens.Hour() + 23) % 24
	if closes == 0 {
		closes = 24 // a window ending at midnight reads "24:00"
	}
	weekly := fmt.Sprintf("daily %02d:00-%02d:00 (UTC)", opens.Hour(), closes)
	avail := filepath.Join(dir, "availability.ics")
	os.WriteFile(avail, []byte("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nUID:a@test\r\nDTSTART:"+opens.Add(-48*time.Hour).Format("20060102T150405Z")+
		"\r\nDURATION:PT23H\r\nRRULE:FREQ=DAILY\r\nSUMMARY:GPUs for rent\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"), 0o644)
	if out := mustRun(t, "availability", "import", avail, "--dry-run", "--home", p1.Home); !strings.Contains(out, "would set the availability to: "+weekly) {
		t.Fatalf("availability import --dry-run: %s", out)
	}
	if out := mustRun(t, "availability", "import", avail, "--home", p1.Home); !strings.Contains(out, "availability: "+weekly) ||
		!strings.Contains(out, "now: open") || !strings.Contains(out, "set by: calendar "+avail) {
		t.Fatalf("availability import: %s", out)
	}
	for deadline, seen := time.Now().Add(15*time.Second), ""; seen != weekly; {
		if time.Now().After(deadline) {
			t.Fatalf("the renter sees provider-1's availability as %q, want %q", seen, weekly)
		}
		time.Sleep(200 * time.Millisecond)
		for _, r := range searchJSON(t, renter) {
			if r.Provider == p1.PeerID {
				seen = r.Avail
			}
		}
	}
	if out := mustRun(t, "availability", "export", "--home", p1.Home); !strings.Contains(out, "RRULE:FREQ=WEEKLY;WKST=MO;BYDAY=SU,MO,TU,WE,TH,FR,SA") {
		t.Fatalf("availability export:\n%s", out)
	}
	if _, errOut, code := gpunex(t, "availability", "import", ics, "--home", p1.Home); code == 0 || !strings.Contains(errOut, "does not repeat") {
		t.Fatalf("availability import of a maintenance calendar: exit %d: %s", code, errOut)
	}
	if out := mustRun(t, "availability", "reset", "--home", p1.Home); !strings.Contains(out, "set by: [provider.availability] of the config") {
		t.Fatalf("availability reset: %s", out)
	}

	// The model catalogue: the coordinator adds a model from the command line; the renter
	// holds the signed catalogue within seconds, with no restart.
	if out := mustRun(t, "coordinator", "models", "add", "B200-192GB", "--vram-gb", "192", "--fp32", "80", "--fp16", "160", "--tensor", "1125",
		"--bandwidth", "8000", "--alias", "NVIDIA B200", "--supported", "--home", names["coordinator"].Home); !strings.Contains(out, "signed and gossiped: B200-192GB added") {
		t.Fatalf("models add: %s", out)
	}
	if _, errOut, code := gpunex(t, "coordinator", "models", "add", "B200-192GB", "--vram-gb", "192", "--fp32", "80", "--tensor", "1", "--bandwidth", "1",
		"--home", names["coordinator"].Home); code == 0 || !strings.Contains(errOut, "in the catalogue already") {
		t.Fatalf("models add twice: exit %d: %s", code, errOut)
	}
	for deadline, out := time.Now().Add(15*time.Second), ""; !strings.Contains(out, " of coordinator "+names["coordinator"].PeerID) ||
		!strings.Contains(out, "NVIDIA B200"); {
		if time.Now().After(deadline) {
			t.Fatalf("the renter's catalogue: %s", out)
		}
		time.Sleep(200 * time.Millisecond)
		out = mustRun(t, "coordinator", "models", "list", "--home", renter)
	}

	// Onboarding: provider-1 and provider-2 approved, provider-3 left pending, provider-4
	// rejected; only the certified providers' offers are in search.
	var queue []api.ApplicationView
	json.Unmarshal([]byte(mustRun(t, "coordinator", "applications", "list", "--json", "--home", names["coordinator"].Home)), &queue)
	statuses := map[string]string{}
	for _, a := range queue {
		statuses[a.Provider] = a.Status
	}
	if statuses[p1.PeerID] != "approved" || statuses[p2.PeerID] != "approved" || statuses[names["provider-3"].PeerID] != "pending" ||
		statuses[names["provider-4"].PeerID] != "rejected" {
		t.Fatalf("coordinator queue: %+v", queue)
	}
	if out := mustRun(t, "apply", "status", "--home", names["provider-4"].Home); !strings.Contains(out, "rejected") || !strings.Contains(out, "reason: ") {
		t.Fatalf("rejected provider's status: %s", out)
	}
	// A provider says how its jobs run: egress as configured (the devnet's default), each
	// job in a user namespace of its own.
	if out := mustRun(t, "status", "--home", p1.Home); !strings.Contains(out, "egress:          public-only\n") || !strings.Contains(out, "user namespaces: yes\n") {
		t.Fatalf("a provider's status should say how jobs run:\n%s", out)
	}
	tiers := map[string]string{p1.PeerID: "enterprise", p2.PeerID: "community"}
	for _, r := range before {
		if tiers[r.Provider] == "" || r.Tier != tiers[r.Provider] {
			t.Fatalf("renter sees %+v; want the certified offers of provider-1 (enterprise) and provider-2 (community) only", before)
		}
		if r.ID == "" || r.Model == "" || r.GPUs < 1 || r.VRAMGB < 1 || r.Price == "" || r.Region == "" || r.ExpiresAt.Before(time.Now()) {
			t.Fatalf("incomplete row: %+v", r)
		}
	}

	// Reliability. The devnet takes the best-placed provider (provider-1: Enterprise, so
	// ranked above provider-2) offline: it is killed, as in a power cut, so its offer stays
	// listed while the coordinator's probes fail.
	line := devOut.wait(t, "provider-1 goes offline for 20s", time.Now().Add(60*time.Second))
	if position(before, p1.PeerID) != 0 || position(before, p2.PeerID) < 1 {
		t.Fatalf("outage: %q; search before it: %+v", line, before)
	}
	var pre int // the score the renter held just before the devnet killed provider-1
	if _, after, _ := strings.Cut(line, "(it had "); !strings.HasPrefix(after, "score ") || !strings.Contains(after, "ranked 1st") {
		t.Fatalf("outage line %q: want the score and the first place provider-1 had", line)
	} else if _, err := fmt.Sscanf(after, "score %d", &pre); err != nil {
		t.Fatalf("outage line %q: %v", line, err)
	}
	if _, errOut, code := gpunex(t, "status", "--home", p1.Home); code == 0 {
		t.Fatal("provider-1 answers while offline")
	} else if !strings.Contains(errOut, "node run") {
		t.Fatalf("status of the offline provider: %s", errOut)
	}
	if g := readDevnetFile(t, dir); !g.Nodes[1].Offline || g.Nodes[1].Name != "provider-1" {
		t.Fatalf("devnet.json during the outage: %+v", g.Nodes[1])
	}
	// Its score falls below its own and provider-2's, and its offer below provider-2's.
	minSeen := pre
	deadline := time.Now().Add(60 * time.Second)
	for {
		sc := scoresOf(t, renter)
		rows := searchJSON(t, renter)
		s1, s2 := sc[p1.PeerID], sc[p2.PeerID]
		if s1.Score > 0 {
			minSeen = min(minSeen, s1.Score)
		}
		i1, i2 := position(rows, p1.PeerID), position(rows, p2.PeerID)
		if s1.Score > 0 && s1.Score < pre && s1.Score < s2.Score && i1 > i2 && i2 >= 0 && rows[i1].Rank.Merit < rows[i2].Rank.Merit {
			t.Logf("during the outage: provider-1 %d (was %d), provider-2 %d; provider-1's offer ranked %d, merit %.3f < %.3f",
				s1.Score, pre, s2.Score, i1+1, rows[i1].Rank.Merit, rows[i2].Rank.Merit)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("during the outage: scores %+v (before: %d), rows %+v", sc, pre, rows)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out := mustRun(t, "offers", "search", "--explain", "--home", renter); !strings.Contains(out, "merit = ") {
		t.Fatalf("search --explain: %s", out)
	}
	// Back on the same home: same peer ID, a new process; its score climbs from the lowest
	// seen and its offer regains first place.
	devOut.wait(t, "provider-1 is back", time.Now().Add(60*time.Second))
	g := readDevnetFile(t, dir)
	if n := g.Nodes[1]; n.Offline || n.PeerID != p1.PeerID || n.PID == p1.PID || n.API == "" {
		t.Fatalf("devnet.json after the outage: %+v (before: %+v)", n, p1)
	}
	deadline = time.Now().Add(120 * time.Second)
	for {
		s1 := scoresOf(t, renter)[p1.PeerID]
		rows := searchJSON(t, renter)
		if s1.Score < minSeen {
			minSeen = s1.Score // records issued before the first probe after the return
		} else if s1.Score > minSeen && position(rows, p1.PeerID) == 0 {
			t.Logf("after the outage: provider-1 %d (lowest %d), ranked first again", s1.Score, minSeen)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the outage: provider-1 %+v (lowest %d), rows %+v", s1, minSeen, rows)
		}
		time.Sleep(500 * time.Millisecond)
	}

	h100 := searchJSON(t, renter, "--model", "H100-80GB")
	if len(h100) != 1 || h100[0].Provider != p1.PeerID {
		t.Fatalf("search by model: %+v", h100)
	}
	if got := searchJSON(t, renter, "--max-price", "0.10"); len(got) != 0 {
		t.Fatalf("max-price filter: %+v", got)
	}

	// Price change: the renter sees it within seconds.
	mustRun(t, "offer", "set-price", "--home", p1.Home, "--model", "H100-80GB", "--usdc", "1.87")
	deadline = time.Now().Add(5 * time.Second)
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
		var rows []searchRow
		for _, r := range searchJSON(t, renter) {
			if r.Provider == p1.PeerID {
				rows = append(rows, r)
			}
		}
		if strings.Contains(out, "L4-24GB) delisted") && strings.Contains(out, "under the threshold") && len(rows) == 1 && rows[0].Model == "H100-80GB" && rows[0].Bench != nil && rows[0].Bench.PerfScore > 90 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("benchmarks: notifications %q, rows %+v", out, rows)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if out := mustRun(t, "bench", "show", "--home", p1.Home); !strings.Contains(out, "DELISTED") || !strings.Contains(out, "storage: write") ||
		!strings.Contains(out, "network as the coordinator measured it (what counts)") || !strings.Contains(out, "host: listed") {
		t.Fatalf("bench show: %s", out)
	}

	// A job through the CLI, from a job file, placed by model: output streamed, the job's
	// exit code returned, cost shown, output fetched into the folder the file names. The
	// command line overrides the file (its model, one of its variables).
	jobDir := filepath.Join(dir, "job")
	os.Mkdir(jobDir, 0o755)
	os.WriteFile(filepath.Join(jobDir, "job.toml"), []byte(`# paths are relative to this file's folder
image_archive = "../busybox.tar"
command = ["sh", "-c", "echo streamed line $WHO $WHAT; echo result > /output/r.txt; exit 7"]
env = { WHO = "file", WHAT = "file" }
gpus = 1
hours = 0.1
model = "A100-80GB"
tries = 2
output = "out"
`), 0o644)
	out, errOut, code := gpunex(t, "job", "run", "--home", renter, "-f", filepath.Join(jobDir, "job.toml"), "--model", "H100-80GB", "--env", "WHAT=flag")
	if code != 7 || !strings.Contains(out, "streamed line file flag") || !strings.Contains(errOut, "cost ") ||
		!strings.Contains(errOut, "placement: 1 offer(s) match model H100-80GB, 1 GPU(s) or more\n") ||
		!strings.Contains(errOut, "  "+p1.PeerID+" took the job: ranked 1st of 1 by merit ") ||
		!strings.Contains(errOut, "1 files of its /output written to "+filepath.Join(jobDir, "out")) {
		t.Fatalf("job run -f: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(jobDir, "out", "r.txt")); err != nil || string(b) != "result\n" {
		t.Fatalf("output fetched by job run -f: %q %v", b, err)
	}
	if _, errOut, code := gpunex(t, "job", "run", "--home", renter, "-f", filepath.Join(jobDir, "job.toml"), "--model", "B200-192GB"); code == 0 ||
		!strings.Contains(errOut, "not found: no live, certified offer matches model B200-192GB, 1 GPU(s) or more") {
		t.Fatalf("a model nobody offers: exit %d, %s", code, errOut)
	}
	var jobs []api.JobView
	json.Unmarshal([]byte(mustRun(t, "job", "list", "--json", "--home", renter)), &jobs)
	if len(jobs) < 2 || jobs[0].ExitCode != 7 || !jobs[0].Countersign || jobs[0].State != "ended" {
		t.Fatalf("job list: %+v", jobs)
	}
	fetched := filepath.Join(dir, "fetched")
	mustRun(t, "job", "fetch", jobs[0].ID, fetched, "--home", renter)
	if b, err := os.ReadFile(filepath.Join(fetched, "r.txt")); err != nil || string(b) != "result\n" {
		t.Fatalf("fetched output: %q %v", b, err)
	}
	offerID := p1.PeerID + "/H100-80GB"
	if _, errOut, code := gpunex(t, "job", "run", "--home", renter, "--offer", offerID, "--gpus", "9", "--max-hours", "0.1",
		"--image-archive", filepath.Join(dir, "busybox.tar"), "--", "true"); code == 0 || !strings.Contains(errOut, "offered") {
		t.Fatalf("too many GPUs: exit %d, %s", code, errOut)
	}

	// The provider's earnings: the demo job, paid by the batch, and the CLI job, pending;
	// the market advice for its model (its GPU-seconds leased: jobs this short set no lease
	// price, money.MinCountedGPUSeconds).
	var earn api.EarningsView
	json.Unmarshal([]byte(mustRun(t, "earnings", "--json", "--by", "gpu", "--home", p1.Home)), &earn)
	if earn.Total <= 0 || len(earn.Payouts) != 1 || !earn.Payouts[0].Paid || earn.Payouts[0].Transaction != batches[0].Payouts[0].Transaction || len(earn.History) < 1 {
		t.Fatalf("earnings: %+v", earn)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		var adv []api.PriceAdvice
		out, _, _ := gpunex(t, "price", "recommend", "--model", "H100-80GB", "--json", "--home", p1.Home)
		json.Unmarshal([]byte(out), &adv)
		if len(adv) == 1 && adv[0].LeasedGPUSeconds > 0 && adv[0].Recommended > 0 && adv[0].YourPriceUSDC != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("price recommend: %s", out)
		}
		time.Sleep(time.Second)
	}

	// Down: SIGTERM stops everything, no process is left behind (provider-1's first
	// process included).
	pids := map[int]string{p1.PID: "provider-1 before its outage"}
	for _, n := range readDevnetFile(t, dir).Nodes {
		pids[n.PID] = n.Name
	}
	stopDevnet(t, dev, dir, pids)
}

// TestDevnetStopDuringOutage: Ctrl-C while a provider is offline stops every node and
// leaves no process behind.
func TestDevnetStopDuringOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	dev, devOut, f := startDevnet(t, dir, "--providers", "2", "--outage", "provider-2", "--outage-after", "1s", "--outage-for", "10m")
	devOut.wait(t, "provider-2 goes offline", time.Now().Add(20*time.Second))
	pids := map[int]string{}
	for _, n := range f.Nodes {
		pids[n.PID] = n.Name
	}
	g := readDevnetFile(t, dir)
	if len(g.Nodes) != 4 || g.Nodes[2].Name != "provider-2" || !g.Nodes[2].Offline {
		t.Fatalf("devnet.json during the outage: %+v", g.Nodes)
	}
	stopDevnet(t, dev, dir, pids)
}

// startNode runs `gpunex node run` for a home and waits for its API. Benchmarks are
// shrunk to a few MB so that the tests stay quick.
func startNode(t *testing.T, home string) (*exec.Cmd, api.Status) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(home, config.ConfigFile)); err == nil {
		s := strings.Replace(string(b), "storage_mb = 256", "storage_mb = 8", 1)
		os.WriteFile(filepath.Join(home, config.ConfigFile), []byte(strings.Replace(s, "network_mb = 16", "network_mb = 2", 1)), 0o644)
	}
	os.Remove(filepath.Join(home, config.APIAddrFile))
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
			var st api.Status
			json.Unmarshal([]byte(out), &st)
			return cmd, st
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(home, "node.log"))
	t.Fatalf("node in %s did not start:\n%s", home, log)
	return nil, api.Status{}
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
	initCoordinator(t, coord, local)
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
// initCoordinator makes a coordinator's home. Its nodes share this machine's loopback,
// which is no measure of a provider's link: as the devnet does, the coordinator holds
// none to Enterprise's 800 Mbit/s (coordinator.host_minimum.enterprise_mbps = 1).
func initCoordinator(t *testing.T, home, listen string) {
	t.Helper()
	mustRun(t, "init", "--home", home, "--role", "coordinator", "--listen", listen)
	path := filepath.Join(home, "config.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), "enterprise_mbps = 800", "enterprise_mbps = 1", 1)
	if edited == string(b) {
		t.Fatal("no enterprise_mbps = 800 in a new coordinator's config.toml")
	}
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
}

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
		var queue []api.ApplicationView
		json.Unmarshal([]byte(mustRun(t, "coordinator", "applications", "list", "--status", "pending", "--json", "--home", coord)), &queue)
		if len(queue) == 1 {
			id = queue[0].ID
		}
		time.Sleep(200 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("the application did not reach the coordinator")
	}
	// The queue shows the review's age and due date; the applicant sees the date.
	if out := mustRun(t, "coordinator", "applications", "list", "--sort", "due", "--home", coord); !strings.Contains(out, "AGE") || !strings.Contains(out, "0 bd") {
		t.Fatalf("applications list --sort due: %s", out)
	}
	for out := ""; !strings.Contains(out, "decision expected by "); {
		out = mustRun(t, "apply", "status", "--home", prov)
		if time.Now().After(deadline) {
			t.Fatalf("apply status while pending: %s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := mustRun(t, "coordinator", "applications", "approve", id, "--as", "alice", "--home", coord); !strings.Contains(out, "approved enterprise") {
		t.Fatalf("approve: %s", out)
	}
	if out := mustRun(t, "coordinator", "applications", "show", id, "--home", coord); !strings.Contains(out, "approved") || !strings.Contains(out, "operator alice") {
		t.Fatalf("show: %s", out)
	}
	for time.Now().Before(deadline.Add(10 * time.Second)) {
		if out := mustRun(t, "apply", "status", "--home", prov); strings.Contains(out, "approved (tier enterprise)") && strings.Contains(out, "certificate") {
			// The provider sees its tier and the rule that keeps it.
			if out := mustRun(t, "score", "--home", prov); !strings.Contains(out, "tier: enterprise (certificate ") || !strings.Contains(out, "tier rule: Enterprise holds while") {
				t.Fatalf("score: %s", out)
			}
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
	initCoordinator(t, coord, fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port))
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
	var queue []api.ApplicationView
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
	d := testContainerd(t, dir)
	local := "/ip4/127.0.0.1/tcp/0"
	coord, prov, renter := filepath.Join(dir, "coordinator"), filepath.Join(dir, "provider"), filepath.Join(dir, "renter")
	initCoordinator(t, coord, local)
	_, cst := startNode(t, coord)
	mustRun(t, "init", "--home", prov, "--role", "provider", "--listen", local, "--bootstrap", cst.Addrs[0], "--containerd", d.Address())
	mustRun(t, "init", "--home", renter, "--role", "renter", "--listen", local, "--bootstrap", cst.Addrs[0])
	// This test is about the job, not its payment: the provider runs it without escrow.
	cfgPath := filepath.Join(prov, "config.toml")
	cfgText, _ := os.ReadFile(cfgPath)
	if !strings.Contains(string(cfgText), "require_escrow = true") {
		t.Fatal("provider config lacks require_escrow")
	}
	os.WriteFile(cfgPath, []byte(strings.Replace(string(cfgText), "require_escrow = true", "require_escrow = false", 1)), 0o600)
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
	var jobs []api.JobView
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

// testContainerd starts a private containerd under dir for the test (stopped with it); where
// it cannot start, the test is skipped, or fails in CI.
func testContainerd(t *testing.T, dir string) *sandbox.Daemon {
	t.Helper()
	d, err := sandbox.StartContainerd(context.Background(), filepath.Join(dir, "ctrd"))
	if err != nil {
		if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	t.Cleanup(func() { d.Stop() })
	return d
}
