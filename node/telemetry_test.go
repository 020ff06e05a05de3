package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/config"
)

// promtool returns promtool's path. It is installed by `make test` (.ci/install-deps, from
// Debian's prometheus package); where it is missing the test skips, except in CI
// (GPUNEX_REQUIRE_* set), where it fails.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" || os.Getenv("GPUNEX_REQUIRE_SOLANA") == "1" {
			t.Fatalf("promtool is required in CI (apt-get install prometheus): %v", err)
		}
		t.Skipf("promtool missing (apt-get install prometheus): %v", err)
	}
	return p
}

// TestMetricsExposition: a provider's /metrics, scraped as Prometheus does, passes
// `promtool check metrics`, and shows each GPU as its operator would want to see it (a lost
// GPU, a throttled and delisted one with ECC errors, a healthy one); the shipped alert rules
// pass `promtool check rules` and their unit tests, and every metric they use is one the node
// exports.
func TestMetricsExposition(t *testing.T) {
	tool := promtool(t)
	tn := newTestNet(t)
	cfg := testConfig(config.RoleProvider)
	cfg.Provider.Region = "eu-west"
	cfg.Provider.GPUs = []config.GPUConfig{
		{Model: "H100-80GB", Count: 2, VRAMGB: 80, PriceUSDC: "2.00", Simulated: true, Lost: 1},
		{Model: "L4-24GB", Count: 1, VRAMGB: 24, PriceUSDC: "0.50", Simulated: true, PerfFactor: 0.45, ECCErrors: 3},
	}
	prov := tn.add(cfg, nil)
	eventually(t, 20*time.Second, "first benchmark run", func() (bool, string) { return prov.bench.Latest() != nil, "" })
	eventually(t, 10*time.Second, "the offer announced", func() (bool, string) { return prov.publisher.Current() != nil, "" })
	cl := apiClient(t, prov)
	resp, err := http.Get(cl.Base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	check := exec.Command(tool, "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	text := string(body)
	l4 := gpuOf(prov.bench.Latest(), "L4-24GB").UUID
	for _, want := range []string{
		`gpunex_gpu_lost{index="1"} 1`,
		`gpunex_gpu_lost{index="0"} 0`,
		`gpunex_gpu_delisted{index="2",model="L4-24GB",uuid="` + l4 + `"} 1`,
		`gpunex_gpu_throttled{index="2",model="L4-24GB",reason="sw_thermal_slowdown",uuid="` + l4 + `"} 1`,
		`gpunex_gpu_ecc_uncorrected_errors{index="2",model="L4-24GB",uuid="` + l4 + `"} 3`,
		`gpunex_gpu_temperature_celsius{index="2",model="L4-24GB",uuid="` + l4 + `"} 87`,
		`gpunex_gpu_leased{index="2",model="L4-24GB",uuid="` + l4 + `"} 0`,
		"gpunex_jobs_running 0",
		"gpunex_score -1",
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if m := regexp.MustCompile(`(?m)^gpunex_offer_age_seconds (\S+)$`).FindStringSubmatch(text); m == nil || strings.HasPrefix(m[1], "-") {
		t.Errorf("offer age: %v", m)
	}

	// The alert rules shipped in docs/monitoring.
	dir := filepath.Join("..", "docs", "monitoring")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		c := exec.CommandContext(context.Background(), tool, args...)
		c.Dir = dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	exported := func(file string, content []byte) {
		for _, name := range regexp.MustCompile(`gpunex_[a-z_]+`).FindAllString(string(content), -1) {
			if !strings.Contains(text, "\n"+name) && !strings.Contains(text, "\n# TYPE "+name+" ") {
				t.Errorf("%s uses %s, which the node does not export", file, name)
			}
		}
	}
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	exported("alerts.yml", rules)

	// The Grafana dashboard: each panel's query is valid PromQL (checked as a recording
	// rule) on metrics the node exports.
	raw, err := os.ReadFile(filepath.Join(dir, "grafana-provider.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("grafana-provider.json: %v", err)
	}
	var rec strings.Builder
	rec.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, p := range dash.Panels {
		for k, tg := range p.Targets {
			expr := strings.ReplaceAll(tg.Expr, "$instance", ".*")
			fmt.Fprintf(&rec, "      - record: dashboard:panel%d_%d\n        expr: %q\n", i, k, expr)
		}
	}
	recFile := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	os.WriteFile(recFile, []byte(rec.String()), 0o644)
	if out, err := exec.Command(tool, "check", "rules", recFile).CombinedOutput(); err != nil {
		t.Fatalf("the dashboard's queries: %v\n%s", err, out)
	}
	exported("grafana-provider.json", raw)
}

// gaugeValue reads an unlabelled gauge of a node's registry.
func gaugeValue(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	families, err := n.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}
