//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/devnet"
)

// BenchmarkIdleProvider runs a devnet (coordinator, one provider, renter) from the real
// binary, leaves it idle, and reports the provider daemon's resident memory and CPU use.
// GPUNEX_IDLE_SECONDS sets the idle period (default 60). Run with `make bench`.
func BenchmarkIdleProvider(b *testing.B) {
	secs := 60
	if v, err := strconv.Atoi(os.Getenv("GPUNEX_IDLE_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	dir := b.TempDir()
	dev := exec.Command(binary, "devnet", "--dir", dir, "--providers", "1")
	out, _ := dev.StdoutPipe()
	if err := dev.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { dev.Process.Signal(syscall.SIGTERM); dev.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "devnet ready") {
	}
	go func() {
		for sc.Scan() {
		}
	}()
	var f devnet.File
	data, err := os.ReadFile(filepath.Join(dir, "devnet.json"))
	if err != nil {
		b.Fatal(err)
	}
	json.Unmarshal(data, &f)
	pid := 0
	for _, n := range f.Nodes {
		if n.Name == "provider-1" {
			pid = n.PID
		}
	}
	time.Sleep(10 * time.Second) // let start-up work (announcements, first refresh) finish
	cpu0, t0 := cpuTicks(b, pid), time.Now()
	maxRSS := 0
	for time.Since(t0) < time.Duration(secs)*time.Second {
		maxRSS = max(maxRSS, rssKB(b, pid))
		time.Sleep(time.Second)
	}
	cpu := float64(cpuTicks(b, pid)-cpu0) / 100 / time.Since(t0).Seconds() * 100 // USER_HZ is 100 on Linux
	b.ReportMetric(float64(maxRSS)/1024, "rss-MB")
	b.ReportMetric(cpu, "cpu-%")
	b.Logf("idle provider over %d s: max RSS %.1f MB, CPU %.2f%% of one core", secs, float64(maxRSS)/1024, cpu)
}

func cpuTicks(b *testing.B, pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): utime is 14th, stime 15th.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	u, _ := strconv.Atoi(fields[11])
	s, _ := strconv.Atoi(fields[12])
	return u + s
}

func rssKB(b *testing.B, pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			v, _ := strconv.Atoi(strings.Fields(rest)[0])
			return v
		}
	}
	return 0
}
