//go:build linux

package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPackageInstall: the Debian package (make package, GPUNEX_PACKAGE) installs with the
// installer into a throwaway root, with apt-get and systemctl replaced by recorders: the
// installer says what it will change, changes nothing in --dry-run, installs what a provider
// needs, the package, the home and the service, runs the doctor and says what to do next;
// run again, it has nothing to do; --uninstall removes the package and keeps the home.
func TestPackageInstall(t *testing.T) {
	pkg := builtArtifact(t, "GPUNEX_PACKAGE", "make package", "a gpunex .deb")
	if _, err := os.Stat(pkg); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644)
	for _, f := range []string{"passwd", "group", "shadow", "gshadow"} {
		b, _ := os.ReadFile(filepath.Join("/etc", f))
		os.WriteFile(filepath.Join(root, "etc", f), b, 0o600)
	}
	stubs := t.TempDir()
	log := filepath.Join(stubs, "log")
	// systemctl: records, and remembers what was enabled. apt-get: records, and marks the
	// packages installed in the root's dpkg database, as apt-get would.
	os.WriteFile(filepath.Join(stubs, "systemctl"), []byte(`#!/bin/sh
echo "systemctl $*" >> "$STUBLOG"
case "$1" in
  is-enabled) [ -f "$ROOT/.enabled-$2" ] ;;
  is-active) exit 3 ;;
  enable) touch "$ROOT/.enabled-$3" ;;
esac
`), 0o755)
	os.WriteFile(filepath.Join(stubs, "apt-get"), []byte(`#!/bin/sh
echo "apt-get $*" >> "$STUBLOG"
skip=
for p in "$@"; do
  [ -n "$skip" ] && { skip=; continue; }
  case "$p" in -o) skip=1 ;; -*|install|update) ;; *) printf 'Package: %s\nStatus: install ok installed\nVersion: 1\nArchitecture: all\nMaintainer: test\nDescription: recorded\n\n' "$p" >> "$ROOT/var/lib/dpkg/status" ;; esac
done
`), 0o755)
	install := func(args ...string) (string, error) {
		cmd := exec.Command("sh", append([]string{filepath.Join("..", "..", "install.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "ROOT="+root, "STUBLOG="+log, "APT_GET="+filepath.Join(stubs, "apt-get"), "SYSTEMCTL="+filepath.Join(stubs, "systemctl"),
			"DPKG=dpkg --root="+root+" --force-script-chrootless --force-depends --log=/dev/null")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	calls := func() string { b, _ := os.ReadFile(log); return string(b) }

	out, err := install("--role", "provider", "--package", pkg, "--dry-run")
	if err != nil || !strings.Contains(out, "this will") || !strings.Contains(out, "install containerd runc containernetworking-plugins iptables") ||
		!strings.Contains(out, "install the package "+pkg) || !strings.Contains(out, "create the provider node's home") ||
		!strings.Contains(out, "enable and start gpunex-provider.service") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/gpunex")); err == nil || strings.Contains(calls(), "apt-get") {
		t.Fatalf("the dry run changed something: %s", calls())
	}

	start := time.Now()
	out, err = install("--role", "provider", "--package", pkg, "--yes")
	took := time.Since(start)
	if err != nil || !strings.Contains(out, "installed in") || !strings.Contains(out, "doctor:") || !strings.Contains(out, "then apply: gpunex apply --home "+root+"/var/lib/gpunex") {
		t.Fatalf("install: %v\n%s", err, out)
	}
	t.Logf("installed (package, home, service, doctor) in %s", took.Round(time.Millisecond))
	for _, f := range []string{"usr/bin/gpunex", "lib/systemd/system/gpunex-provider.service", "usr/share/gpunex/install.sh", "var/lib/gpunex/identity.key", "var/lib/gpunex/home.json"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("not installed: %s", f)
		}
	}
	if passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !strings.Contains(string(passwd), "\ngpunex:") {
		t.Error("the package made no gpunex user")
	}
	if c := calls(); !strings.Contains(c, "apt-get update -q\napt-get install -y -q --no-install-recommends -o Acquire::Retries=3 containerd runc containernetworking-plugins iptables") || !strings.Contains(c, "systemctl enable --now gpunex-provider.service") {
		t.Fatalf("calls: %s", c)
	}
	if v, err := exec.Command(filepath.Join(root, "usr/bin/gpunex"), "version").Output(); err != nil || !strings.HasPrefix(string(v), "gpunex ") {
		t.Fatalf("the installed binary: %v %s", err, v)
	}

	before := calls()
	out, err = install("--role", "provider", "--yes")
	if err != nil || !strings.Contains(out, "everything is in place already") || strings.Count(calls(), "apt-get") != strings.Count(before, "apt-get") ||
		strings.Count(calls(), "enable --now") != 1 {
		t.Fatalf("run again: %v\n%s\n%s", err, out, calls())
	}

	if out, err := install("--uninstall"); err != nil || !strings.Contains(out, "The home "+root+"/var/lib/gpunex (identity, ledger) stays") {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/gpunex")); err == nil {
		t.Error("uninstall left the binary")
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/gpunex/identity.key")); err != nil {
		t.Error("uninstall removed the node's identity")
	}
}

// TestPackageArm64: the arm64 package (make package-arm64, GPUNEX_PACKAGE_ARM64) says it is
// for arm64 and holds an arm64 binary with the NVML binding (cgo), the units and the
// installer, so that a Grace Hopper host installs the same product.
func TestPackageArm64(t *testing.T) {
	pkg := builtArtifact(t, "GPUNEX_PACKAGE_ARM64", "make package-arm64", "a gpunex arm64 .deb")
	out, err := exec.Command("dpkg-deb", "--field", pkg, "Architecture", "Package").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Architecture: arm64") || !strings.Contains(string(out), "Package: gpunex") {
		t.Fatalf("dpkg-deb --field: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", pkg, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	bin, err := elf.Open(filepath.Join(dir, "usr/bin/gpunex"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if bin.Machine != elf.EM_AARCH64 {
		t.Fatalf("the arm64 package's binary is for %s", bin.Machine)
	}
	libs, _ := bin.ImportedLibraries()
	if !slices.Contains(libs, "libc.so.6") {
		t.Fatalf("the arm64 binary is not built with cgo (NVML needs it): links %v", libs)
	}
	for _, f := range []string{"lib/systemd/system/gpunex-provider.service", "usr/share/gpunex/install.sh"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the arm64 package lacks %s", f)
		}
	}
}

// builtArtifact is the path of what `make test` built before the tests and named in the
// environment variable env (relative paths are from the repository's root). Without it the
// test is skipped, or fails in CI.
func builtArtifact(t *testing.T, env, target, what string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
			t.Fatalf("%s is not set: `make test` builds it first (%s)", env, target)
		}
		t.Skipf("%s is not set: run through `make test`, or set it to %s", env, what)
	}
	if !filepath.IsAbs(path) {
		path, _ = filepath.Abs(filepath.Join("..", "..", path))
	}
	return path
}

// TestInstallerRefusesUnsafePackages: the installer installs only the package it is given,
// never the newest .deb of the folder it runs in (another user may have put one in a shared
// folder), refuses a package others could have changed, and checks --sha256 when given.
// Each refusal happens before anything is installed.
func TestInstallerRefusesUnsafePackages(t *testing.T) {
	root, shared := t.TempDir(), t.TempDir()
	planted := filepath.Join(shared, "gpunex_9.9.9_amd64.deb")
	if err := os.WriteFile(planted, []byte("not a real package"), 0o644); err != nil {
		t.Fatal(err)
	}
	install := func(args ...string) (string, error) {
		cmd := exec.Command("sh", append([]string{filepath.Join(mustAbs(t, "../.."), "install.sh"), "--role", "renter", "--dry-run"}, args...)...)
		cmd.Dir = shared
		cmd.Env = append(os.Environ(), "ROOT="+root, "SYSTEMCTL=false", "DPKG=false", "APT_GET=false")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := install(); err == nil || !strings.Contains(out, "no package was given: --package") || strings.Contains(out, planted) {
		t.Fatalf("without --package, in a folder holding a .deb: %v\n%s", err, out)
	}
	if err := os.Chmod(planted, 0o666); err != nil {
		t.Fatal(err)
	}
	if out, err := install("--package", planted); err == nil || !strings.Contains(out, "writable by users other than its owner") {
		t.Fatalf("a world-writable package: %v\n%s", err, out)
	}
	os.Chmod(planted, 0o664)
	if out, err := install("--package", planted); err == nil || !strings.Contains(out, "writable by users other than its owner") {
		t.Fatalf("a group-writable package: %v\n%s", err, out)
	}
	os.Chmod(planted, 0o644)
	if out, err := install("--package", planted, "--sha256", strings.Repeat("0", 64)); err == nil || !strings.Contains(out, "not installed") {
		t.Fatalf("a package whose digest differs from --sha256: %v\n%s", err, out)
	}
	// The same package with its own digest passes the checks (the dry run then stops).
	sum, err := exec.Command("sha256sum", planted).Output()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := install("--package", planted, "--sha256", strings.Fields(string(sum))[0]); err != nil || !strings.Contains(out, "install the package "+planted) {
		t.Fatalf("a package with the right digest: %v\n%s", err, out)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
