//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestServiceUnits: the unit of each role passes `systemd-analyze verify` without a word; a
// provider's runs as root, with the hardening jobs allow (the system read-only, a bounded
// capability set, kernel protections) and the GPUs' devices; a renter's and a coordinator's
// run as the gpunex user with the full hardening; `systemd-analyze security` rates each at
// most 5 ("OK": the provider's was 9.1 "UNSAFE" before it was hardened); a home outside
// /var/lib is refused.
func TestServiceUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
			t.Fatalf("systemd-analyze is required in CI (apt-get install systemd): %v", err)
		}
		t.Skipf("systemd-analyze missing: %v", err)
	}
	for _, role := range []string{"provider", "renter", "coordinator"} {
		unit := mustRun(t, "service", "unit", "--role", role, "--binary", binary)
		path := filepath.Join(t.TempDir(), "gpunex-"+role+".service")
		if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("%s: systemd-analyze verify: %v\n%s", role, err, out)
		}
		if exposure, ok := securityExposure(t, analyze, path); ok && exposure > 5 {
			t.Errorf("%s: systemd-analyze security rates the unit's exposure %.1f, above 5", role, exposure)
		}
		has := func(line string) bool { return strings.Contains(unit, "\n"+line+"\n") }
		switch role {
		case "provider":
			for _, want := range []string{"User=root", "Requires=containerd.service", "ExecStart=" + binary + " node run --home /var/lib/gpunex",
				"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "ProtectKernelTunables=yes",
				"ProtectKernelModules=yes", "ProtectKernelLogs=yes", "ProtectControlGroups=yes", "ProtectHostname=yes",
				"RestrictNamespaces=user net mnt"} {
				if !has(want) {
					t.Errorf("provider unit lacks %s:\n%s", want, unit)
				}
			}
			// The node and its programs keep what jobs need, and nothing to load modules, set
			// the clock, do raw I/O or reboot.
			bounding := ""
			for _, line := range strings.Split(unit, "\n") {
				if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
					bounding = " " + v + " "
				}
			}
			for _, c := range []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETUID", "CAP_CHOWN"} {
				if !strings.Contains(bounding, " "+c+" ") {
					t.Errorf("provider unit's bounding set lacks %s, which jobs need: %s", c, bounding)
				}
			}
			for _, c := range []string{"CAP_SYS_MODULE", "CAP_SYS_TIME", "CAP_SYS_RAWIO", "CAP_SYS_BOOT", "CAP_SYSLOG"} {
				if strings.Contains(bounding, " "+c+" ") {
					t.Errorf("provider unit's bounding set has %s: %s", c, bounding)
				}
			}
			// NVML, CUDA and the jobs need the GPUs' device nodes (ProtectClock= implies a
			// device allow-list), CUDA writable executable memory, the CNI plugins /proc/sys,
			// the jobs' network and the host's users.
			for _, bad := range []string{"PrivateDevices=", "DevicePolicy=", "DeviceAllow=", "ProtectClock=", "MemoryDenyWriteExecute=",
				"ProcSubset=", "PrivateNetwork=", "PrivateUsers="} {
				if strings.Contains(unit, "\n"+bad) {
					t.Errorf("provider unit sets %s, which breaks jobs or the GPUs", bad)
				}
			}
		default:
			for _, want := range []string{"User=gpunex", "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateDevices=yes", "CapabilityBoundingSet=", "StateDirectory=gpunex"} {
				if !has(want) {
					t.Errorf("%s unit lacks %s:\n%s", role, want, unit)
				}
			}
		}
	}
	if _, errOut, code := gpunex(t, "service", "unit", "--role", "renter", "--home", "/home/ada/gpunex"); code == 0 || !strings.Contains(errOut, "directly under /var/lib") {
		t.Errorf("a home outside /var/lib: exit %d %s", code, errOut)
	}
}

// securityExposure is the exposure `systemd-analyze security` gives the unit file at path
// (0 safest, 10 least safe); false where this systemd cannot rate a file (before 250).
func securityExposure(t *testing.T, analyze, path string) (float64, bool) {
	t.Helper()
	cmd := exec.Command(analyze, "security", "--offline=true", filepath.Base(path))
	cmd.Dir = filepath.Dir(path)
	out, _ := cmd.CombinedOutput()
	_, level, ok := strings.Cut(string(out), "Overall exposure level for "+filepath.Base(path)+": ")
	if !ok {
		t.Logf("systemd-analyze security cannot rate %s here: %s", path, tail(string(out), 300))
		return 0, false
	}
	exposure, err := strconv.ParseFloat(strings.Fields(level)[0], 64)
	return exposure, err == nil
}
