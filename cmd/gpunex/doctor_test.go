//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// doctorOf runs `gpunex doctor --json` on a home and returns its report by check name, and
// its exit code.
func doctorOf(t *testing.T, home string) (doctorReport, map[string]doctorCheck, int) {
	t.Helper()
	out, errOut, code := gpunex(t, "doctor", "--json", "--home", home)
	var r doctorReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s\n%s", err, out, errOut)
	}
	by := map[string]doctorCheck{}
	for _, c := range r.Checks {
		by[c.Name] = c
	}
	return r, by, code
}

// TestDoctorFreshHome: on a provider's fresh home, with its node not running and containerd
// at a socket that does not exist, the doctor says what is wrong and how to fix it and
// exits 1; a key file others can read fails with the command that fixes it; a broken
// configuration stops the checks with the file to correct.
func TestDoctorFreshHome(t *testing.T) {
	home := filepath.Join(t.TempDir(), "provider")
	mustRun(t, "init", "--home", home, "--role", "provider", "--containerd", "/nonexistent/containerd.sock")
	cfgPath := filepath.Join(home, "config.toml")

	r, by, code := doctorOf(t, home)
	if code != 1 || r.OK || r.Role != "provider" {
		t.Fatalf("exit %d, report %+v", code, r)
	}
	if c := by["config"]; c.Status != "ok" {
		t.Errorf("config: %+v", c)
	}
	if c := by["key identity.key"]; c.Status != "ok" || !strings.Contains(c.Found, "mode 0600") {
		t.Errorf("identity key: %+v", c)
	}
	if c := by["node"]; c.Status != "fail" || !strings.Contains(c.Fix, "gpunex node run --home "+home) {
		t.Errorf("node: %+v", c)
	}
	if c := by["containerd"]; c.Status != "fail" || !strings.Contains(c.Found, "/nonexistent/containerd.sock") || !strings.Contains(c.Fix, "apt-get install containerd") {
		t.Errorf("containerd: %+v", c)
	}
	if c := by["certificate"]; c.Status != "skip" {
		t.Errorf("certificate: %+v", c)
	}
	if _, ok := by["gpus"]; !ok {
		t.Errorf("no GPU check: %+v", r.Checks)
	}
	// Printed for a person: every failed check with its fix, and the verdict.
	out, _, _ := gpunex(t, "doctor", "--home", home)
	if !strings.Contains(out, "containerd: install containerd") || !strings.Contains(out, "this node cannot serve its role") {
		t.Errorf("doctor's text:\n%s", out)
	}

	key := filepath.Join(home, "identity.key")
	os.Chmod(key, 0o644)
	if _, by, _ := doctorOf(t, home); by["key identity.key"].Status != "fail" || by["key identity.key"].Fix != "chmod 600 "+key {
		t.Errorf("a readable key: %+v", by["key identity.key"])
	}
	os.WriteFile(cfgPath, []byte("role = \"provider\"\n[offers\n"), 0o644)
	if r, by, code := doctorOf(t, home); code != 1 || len(r.Checks) != 1 || by["config"].Status != "fail" || !strings.Contains(by["config"].Fix, cfgPath) {
		t.Errorf("a broken configuration: exit %d %+v", code, r.Checks)
	}
}

// TestDoctorContainerdState: a provider whose containerd keeps its state under a folder
// other users cannot go through (jobs in user namespaces would all fail with runc's
// "permission denied") fails the doctor's check with the fix; opened again, it passes.
func TestDoctorContainerdState(t *testing.T) {
	d := testContainerd(t, t.TempDir())
	home := filepath.Join(t.TempDir(), "provider")
	mustRun(t, "init", "--home", home, "--role", "provider", "--containerd", d.Address())
	_, by, _ := doctorOf(t, home)
	m := regexp.MustCompile(`containerd's state (/\S+) is reachable`).FindStringSubmatch(by["containerd state"].Found)
	if by["containerd state"].Status != "ok" || m == nil {
		t.Fatalf("the private containerd's state: %+v", by["containerd state"])
	}
	above := filepath.Dir(m[1])
	st, err := os.Stat(above)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(above, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(above, st.Mode().Perm())
	if _, by, _ := doctorOf(t, home); by["containerd state"].Status != "fail" || !strings.Contains(by["containerd state"].Found, above) ||
		!strings.Contains(by["containerd state"].Fix, "chmod o+x") {
		t.Fatalf("containerd's state under a 0700 folder: %+v", by["containerd state"])
	}
}
