//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestServiceUnits: the unit of each role passes `systemd-analyze verify` without a word; a
// provider's runs as root and sees the GPUs, a renter's and a coordinator's run as the
// gpunex user with the hardening; a home outside /var/lib is refused.
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
		path := filepath.Join(t.TempDir(), "gpunex.service")
		if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("%s: systemd-analyze verify: %v\n%s", role, err, out)
		}
		has := func(line string) bool { return strings.Contains(unit, "\n"+line+"\n") }
		switch role {
		case "provider":
			if !has("User=root") || !has("Requires=containerd.service") || !has("ExecStart="+binary+" node run --home /var/lib/gpunex") {
				t.Errorf("provider unit:\n%s", unit)
			}
			// Jobs need the node's mounts (namespace pins under /run/gpunex, jobs' root
			// file systems under /var/lib/containerd) in the host's mount namespace, where
			// runc runs, and the GPUs' device nodes: no option that gives the service a
			// mount namespace or a device allow-list of its own.
			for _, bad := range []string{"ProtectSystem=", "ProtectHome=", "PrivateTmp=", "PrivateDevices=", "ReadWritePaths=", "ReadOnlyPaths=",
				"ProtectKernelModules=", "ProtectKernelLogs=", "ProtectKernelTunables=", "ProtectControlGroups=", "RestrictNamespaces=", "DevicePolicy=", "CapabilityBoundingSet="} {
				if strings.Contains(unit, "\n"+bad) {
					t.Errorf("provider unit sets %s, which breaks jobs", bad)
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
