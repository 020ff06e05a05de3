//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/sandbox"
)

// TestFreshDebianInstall: on a fresh Debian 12 booted with its own systemd (debootstrap's
// minbase with systemd, booted by systemd-nspawn and sharing this machine's network) with
// the package file at hand, a provider is running as a service and has applied within
// minutes. The installer downloads containerd, runc, the CNI plugins and iptables from
// Debian's mirror with apt-get, installs the package, makes the home, and enables the unit,
// which systemd starts after the containerd it Requires=, with the unit's own settings. The
// provider then applies to a coordinator on this machine, which approves it; restarted by
// systemd, it is back with its certificate and, under the unit's hardening (checked on the
// running process), runs a renter's job with egress and a user namespace; after a reboot,
// the node is back with its certificate. The time from the installer's start to the
// application queued at the coordinator is logged (the target is under 5 minutes).
func TestFreshDebianInstall(t *testing.T) {
	pkg := os.Getenv("GPUNEX_PACKAGE")
	_, errBootstrap := exec.LookPath("debootstrap")
	_, errNspawn := exec.LookPath("systemd-nspawn")
	switch {
	case pkg != "" && errBootstrap == nil && errNspawn == nil && os.Geteuid() == 0:
	case os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1":
		t.Fatalf("a fresh install needs root, debootstrap and systemd-nspawn (make deps) and GPUNEX_PACKAGE (make package): euid %d, %v, %v, package %q",
			os.Geteuid(), errBootstrap, errNspawn, pkg)
	default:
		t.Skip("needs root, debootstrap, systemd-nspawn and GPUNEX_PACKAGE: run through `make test`")
	}
	if !filepath.IsAbs(pkg) {
		pkg, _ = filepath.Abs(filepath.Join("..", "..", pkg))
	}
	start := time.Now()
	root := debootstrap(t)
	copyFile(t, pkg, filepath.Join(root, "root", filepath.Base(pkg)), 0o644)
	copyFile(t, filepath.Join("..", "..", "install.sh"), filepath.Join(root, "root", "install.sh"), 0o755)
	copyFile(t, "/etc/resolv.conf", filepath.Join(root, "etc/resolv.conf"), 0o644)

	// Boot it; everything it runs goes away with the test.
	m := bootMachine(t, root)
	in := m.run
	t.Logf("fresh Debian 12 made and booted in %s (not part of the install)", time.Since(start).Round(time.Second))

	// A coordinator on this machine, which the provider bootstraps from.
	dir := t.TempDir()
	coord := filepath.Join(dir, "coordinator")
	local := "/ip4/127.0.0.1/tcp/0,/ip4/127.0.0.1/udp/0/quic-v1"
	initCoordinator(t, coord, local)
	_, cst := startNode(t, coord)

	began := time.Now()
	out, err := in("", "sh", "/root/install.sh", "--role", "provider", "--package", "/root/"+filepath.Base(pkg), "--yes",
		"--bootstrap", cst.Addrs[0], "--region", "eu-west", "--listen", local)
	installed := time.Since(began)
	if err != nil || !strings.Contains(out, "installed in") || !strings.Contains(out, "next: describe your GPUs") {
		t.Fatalf("install.sh: %v\n%s", err, tail(out, 6000))
	}
	for _, want := range []string{"node              OK", "containerd        OK", "runc              OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("the doctor after the install lacks %q:\n%s", want, tail(out, 3000))
		}
	}
	if strings.Contains(out, "adduser: Warning") {
		t.Errorf("the package's postinst warns:\n%s", tail(out, 3000))
	}
	if out, _ := in("", "systemctl", "is-active", "gpunex-provider.service", "containerd.service"); out != "active\nactive\n" {
		t.Fatalf("systemd runs: %q", out)
	}

	// The provider applies with the installed binary, answering the questions.
	answers := strings.Join([]string{"Ada Lovelace", "ada@example.org", "", "L4-24GB", "1", "128", "1", "1", "24/7", "Lyon", "FR", "eu-west", "no", "no", "", ""}, "\n") + "\n"
	if out, err := in(answers, "gpunex", "apply", "--interactive", "--home", "/var/lib/gpunex"); err != nil || !strings.Contains(out, "queued for coordinator") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	var id string
	for deadline := time.Now().Add(30 * time.Second); id == ""; time.Sleep(100 * time.Millisecond) {
		var queue []api.ApplicationView
		json.Unmarshal([]byte(mustRun(t, "coordinator", "applications", "list", "--status", "pending", "--json", "--home", coord)), &queue)
		if len(queue) == 1 {
			id = queue[0].ID
		}
		if time.Now().After(deadline) {
			t.Fatal("the application did not reach the coordinator")
		}
	}
	applied := time.Since(began)
	t.Logf("fresh Debian 12 to a provider running as a systemd service: %s (apt-get downloads included); to its application at the coordinator: %s (target: under 5 minutes)",
		installed.Round(100*time.Millisecond), applied.Round(100*time.Millisecond))

	// The installer's output is not a terminal here (it may be kept in a log that others
	// read): it gives no login link but says how to get one, and `gpunex dashboard` on the
	// installed node makes one that opens a session (the machine shares this one's network).
	openLink := func(link string) {
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(strings.TrimSpace(link))
		if err != nil || resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
			t.Fatalf("the installed node's dashboard link %s: %v %v", link, resp, err)
		}
		resp.Body.Close()
	}
	if strings.Contains(out, "/login?code=") || !strings.Contains(out, "dashboard: run gpunex dashboard --home /var/lib/gpunex in a terminal") {
		t.Fatalf("the installer's output, not a terminal, should say how to get a login link and give none:\n%s", tail(out, 2000))
	}
	link, err := in("", "gpunex", "dashboard", "--home", "/var/lib/gpunex")
	if err != nil || !strings.Contains(link, "/login?code=") {
		t.Fatalf("gpunex dashboard on the installed node: %v %s", err, link)
	}
	openLink(link)

	mustRun(t, "coordinator", "applications", "approve", id, "--as", "alice", "--home", coord)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, _ := in("", "gpunex", "apply", "status", "--home", "/var/lib/gpunex")
		if strings.Contains(out, "approved") && strings.Contains(out, "certificate") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the installed provider was not approved: %s", out)
		}
	}
	// A restart by systemd keeps the certificate: the node comes back certified. (The job
	// below is about the unit, not its payment: the provider runs it without escrow.)
	if out, err := in("", "sed", "-i", "s/^require_escrow = true$/require_escrow = false/", "/var/lib/gpunex/config.toml"); err != nil {
		t.Fatalf("turn escrow off: %v %s", err, out)
	}
	if out, err := in("", "systemctl", "restart", "gpunex-provider.service"); err != nil {
		t.Fatalf("systemctl restart: %v %s", err, out)
	}
	certified := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			out, _ := in("", "gpunex", "doctor", "--home", "/var/lib/gpunex")
			if strings.Contains(out, "certificate       OK") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", what, out)
			}
		}
	}
	certified("after a restart by systemd")
	checkHardened(t, in)
	runJobOnInstalled(t, in, dir, cst.Addrs[0])
	// After a reboot, systemd starts containerd and the node by itself.
	m.shutdown()
	m = bootMachine(t, root)
	in = m.run
	if out, _ := in("", "systemctl", "is-active", "gpunex-provider.service", "containerd.service"); out != "active\nactive\n" {
		t.Fatalf("after a reboot systemd runs: %q", out)
	}
	certified("after a reboot")
}

// checkHardened checks the running provider's process for its unit's hardening, as a
// compromised node would meet it: no new privileges; no capability to load modules, do raw
// I/O, reboot, set the clock or read the kernel's log; in its mount namespace, the system
// read-only, the home writable, and /root empty.
func checkHardened(t *testing.T, in func(string, ...string) (string, error)) {
	t.Helper()
	out, err := in("", "systemctl", "show", "--property=MainPID", "--value", "gpunex-provider.service")
	pid := strings.TrimSpace(out)
	if err != nil || pid == "" || pid == "0" {
		t.Fatalf("the provider's process: %v %q", err, out)
	}
	status, err := in("", "cat", "/proc/"+pid+"/status")
	if err != nil || !strings.Contains(status, "NoNewPrivs:\t1") {
		t.Errorf("the provider may gain privileges: %v\n%s", err, status)
	}
	var bounding uint64
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:\t"); ok {
			bounding, _ = strconv.ParseUint(v, 16, 64)
		}
	}
	for name, bit := range map[string]uint{"CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_BOOT": 22, "CAP_SYS_TIME": 25, "CAP_SYSLOG": 34} {
		if bounding&(1<<bit) != 0 {
			t.Errorf("the provider keeps %s (bounding set %#x)", name, bounding)
		}
	}
	enter := func(args ...string) (string, error) {
		return in("", append([]string{"nsenter", "--target", pid, "--mount", "--"}, args...)...)
	}
	if out, err := enter("touch", "/etc/gpunex-write-probe"); err == nil || !strings.Contains(out, "Read-only file system") {
		t.Errorf("the provider can write /etc: %v %s", err, out)
	}
	if out, err := enter("touch", "/var/lib/gpunex/.write-probe"); err != nil {
		t.Errorf("the provider cannot write its home: %v %s", err, out)
	}
	enter("rm", "-f", "/var/lib/gpunex/.write-probe")
	if out, err := enter("ls", "-A", "/root"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("the provider sees /root (install.sh is there): %v %q", err, out)
	}
}

// runJobOnInstalled has a renter on this machine run a job with egress on the installed
// provider, from a busybox image archive, and checks what the job printed: it ran, in a
// network namespace of its own on the jobs' subnet, and in a user namespace whose root is
// an unprivileged host uid (both namespaces made by the node and pinned in containerd's
// mount namespace, where runc found them).
func runJobOnInstalled(t *testing.T, in func(string, ...string) (string, error), dir, boot string) {
	t.Helper()
	var st api.Status
	if out, err := in("", "gpunex", "status", "--json", "--home", "/var/lib/gpunex"); err != nil || json.Unmarshal([]byte(out), &st) != nil || st.PeerID == "" {
		t.Fatalf("the installed provider's status: %v %s", err, out)
	}
	renter := filepath.Join(dir, "renter")
	mustRun(t, "init", "--home", renter, "--role", "renter", "--listen", "/ip4/127.0.0.1/tcp/0", "--bootstrap", boot)
	startNode(t, renter)
	archive := filepath.Join(dir, "busybox.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.BusyboxImage(f, "gpunex.test/busybox:1"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if slices.ContainsFunc(searchJSON(t, renter, "--model", "L4-24GB"), func(r searchRow) bool { return r.Provider == st.PeerID }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renter does not see the installed provider's offer")
		}
	}
	out, errOut, code := gpunex(t, "job", "run", "--home", renter, "--offer", st.PeerID+"/L4-24GB", "--gpus", "1", "--max-hours", "0.1", "--egress",
		"--image-archive", archive, "--", "sh", "-c", "echo hello from the installed provider; ip -4 -o addr show eth0; cat /proc/self/uid_map")
	if code != 0 || !strings.Contains(out, "hello from the installed provider") || !strings.Contains(out, "inet 10.231.") {
		log, _ := in("", "journalctl", "--unit", "gpunex-provider.service", "--no-pager", "--lines", "40")
		t.Fatalf("the job on the installed provider: exit %d\n%s\n%s\nthe provider's log:\n%s", code, out, errOut, log)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "0" && f[1] == "0" {
			t.Errorf("the job's root is the host's root (no user namespace): %q", line)
		}
	}
	// The unit gave the node a mount namespace of its own: the job ran because its
	// namespaces were pinned in containerd's.
	if log, err := in("", "journalctl", "--unit", "gpunex-provider.service", "--no-pager", "--output", "cat"); err != nil || !strings.Contains(log, "pinned in containerd's") {
		t.Errorf("the provider under its unit did not pin jobs' namespaces in containerd's mount namespace: %v\n%s", err, tail(log, 3000))
	}
}

// machine is a root booted with its own systemd by systemd-nspawn, sharing this machine's
// network. What a real host gives a provider and nspawn keeps from its container, the
// machine gets, so that jobs run in it as on a host:
//   - CAP_NET_ADMIN (nspawn keeps it only for a container with a network of its own): the
//     jobs' veths, routes and firewall rules go into this machine's network namespace;
//   - the kernel keyring (@keyring, which nspawn's system call filter denies, as the keyring
//     is not namespaced): runc gives each container a session keyring of its own;
//   - writable cgroup controllers: nspawn mounts the cgroup v1 controllers of a hybrid host
//     such as this one read-only, and runc makes each job's cgroups in them; they are
//     remounted writable in the machine once it has booted;
//   - this machine's /var/lib/cni: the CNI plugins allocate the jobs' addresses in this
//     network namespace from the same list as the other nodes on this machine.
//
// Inside, the provider's unit applies its own settings, as on a host.
type machine struct {
	t       *testing.T
	boot    *exec.Cmd
	exited  chan struct{}
	init    int
	console *os.File
	stopped bool
}

// bootMachine boots root and waits until its systemd has started everything.
func bootMachine(t *testing.T, root string) *machine {
	t.Helper()
	m := &machine{t: t, exited: make(chan struct{})}
	m.console, _ = os.Create(filepath.Join(t.TempDir(), "console.log"))
	if err := os.MkdirAll("/var/lib/cni", 0o755); err != nil {
		t.Fatal(err)
	}
	m.boot = exec.Command("systemd-nspawn", "--directory", root, "--boot", "--register=no", "--keep-unit", "--console=passive", "--resolv-conf=copy-host",
		"--capability=CAP_NET_ADMIN", "--system-call-filter=@keyring", "--bind=/var/lib/cni")
	m.boot.Stdout, m.boot.Stderr = m.console, m.console
	if err := m.boot.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.boot.Wait(); close(m.exited) }()
	t.Cleanup(m.shutdown)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		// The container's PID 1 is nspawn's child once it runs systemd (a helper comes first).
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", m.boot.Process.Pid, m.boot.Process.Pid))
		m.init, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", m.init)); strings.TrimSpace(string(comm)) != "systemd" {
			m.init = 0
		}
		if m.init > 0 {
			if out, _ := m.run("", "systemctl", "is-system-running"); strings.HasPrefix(out, "running") || strings.HasPrefix(out, "degraded") {
				if out, err := m.run("", "sh", "-c", `for c in $(awk '$9 == "cgroup" {print $5}' /proc/self/mountinfo); do mount -o remount,bind,rw "$c" || exit 1; done`); err != nil {
					t.Fatalf("make the machine's cgroup controllers writable: %v %s", err, out)
				}
				return m
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(m.console.Name())
			t.Fatalf("the fresh Debian did not boot:\n%s", tail(string(log), 3000))
		}
	}
}

// run runs a command in the machine with stdin; it returns stdout and stderr together.
func (m *machine) run(stdin string, args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(m.init), "--mount", "--uts", "--ipc", "--net", "--pid", "--",
		"/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// shutdown powers the machine off (its systemd stops every service), killing it after 30 s.
func (m *machine) shutdown() {
	if m.stopped {
		return
	}
	m.stopped = true
	m.boot.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		m.boot.Process.Kill()
		if m.init > 0 {
			syscall.Kill(m.init, syscall.SIGKILL)
		}
		<-m.exited
	}
	m.console.Close()
}

// debianMirror is the Debian mirror this machine's apt uses, or deb.debian.org.
// debootstrap makes a minimal Debian 12 with systemd in a temporary directory. A mirror
// that fails to serve a package now and then (CI once lost a run to one missing zlib1g) is
// tried again, up to three times; the packages already fetched are kept in a cache, which
// also makes later runs on the same machine faster.
func debootstrap(t *testing.T) string {
	cache := filepath.Join(os.TempDir(), "gpunex-debootstrap-cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	var out []byte
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		root := t.TempDir()
		out, err = exec.Command("debootstrap", "--variant=minbase", "--include=systemd,systemd-sysv,dbus",
			"--cache-dir="+cache, "bookworm", root, debianMirror()).CombinedOutput()
		if err == nil {
			return root
		}
		if !strings.Contains(string(out), "Couldn't download") {
			break
		}
		t.Logf("debootstrap, attempt %d: the mirror failed to serve a package; trying again", attempt)
		time.Sleep(time.Duration(attempt) * 5 * time.Second)
	}
	t.Fatalf("debootstrap: %v\n%s", err, tail(string(out), 2000))
	return ""
}

func debianMirror() string {
	if m := os.Getenv("GPUNEX_DEBIAN_MIRROR"); m != "" {
		return m
	}
	for _, f := range []string{"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			switch {
			case len(fields) >= 2 && fields[0] == "URIs:" && !strings.Contains(fields[1], "security"):
				return fields[1]
			case len(fields) >= 3 && fields[0] == "deb" && !strings.Contains(fields[1], "security") && strings.HasPrefix(fields[1], "http"):
				return fields[1]
			}
		}
	}
	return "http://deb.debian.org/debian"
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(to), 0o755)
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
