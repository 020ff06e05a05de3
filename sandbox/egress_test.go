//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test's own stand-ins for what a provider's host can reach, each a network namespace
// a veth pair away from the host with a listener in it. Traffic stays inside the test's
// namespaces: nothing outside this machine is contacted. The metadata stand-in uses
// another address of the link-local range than 169.254.169.254, so that the test never
// reroutes the machine's own metadata endpoint.
type netTarget struct {
	name   string // what it stands for
	ip     string // the listener's address
	hostIP string // the host's address on the link
	port   int
	got    func() []string // "REMOTE-IP message" per connection
}

var netSeq sync.Mutex

// newNetTarget makes a namespace holding ip/24, routed from the host through hostIP.
func newNetTarget(t *testing.T, name, ip, hostIP string) *netTarget {
	t.Helper()
	netSeq.Lock()
	defer netSeq.Unlock()
	id := fmt.Sprintf("gxt%d%s", os.Getpid()%100000, name[:3])
	ns := id
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	removeStaleNetTargets()
	run("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run("link", "add", id+"h", "type", "veth", "peer", "name", id+"n")
	run("link", "set", id+"n", "netns", ns)
	run("addr", "add", hostIP+"/24", "dev", id+"h")
	run("link", "set", id+"h", "up")
	run("-n", ns, "addr", "add", ip+"/24", "dev", id+"n")
	run("-n", ns, "link", "set", id+"n", "up")
	run("-n", ns, "link", "set", "lo", "up")
	run("-n", ns, "route", "add", "default", "via", hostIP)
	ln := listenInNetns(t, "/run/netns/"+ns, ip+":0")
	return &netTarget{name: name, ip: ip, hostIP: hostIP, port: ln.Addr().(*net.TCPAddr).Port, got: serve(t, ln)}
}

// removeStaleNetTargets deletes the namespaces (and with them the links and routes) that a
// test run killed before its cleanup left: their routes would shadow this run's.
func removeStaleNetTargets() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "gxt") || len(f[0]) < 7 {
			continue
		}
		pid := strings.TrimRight(f[0][3:], "abcdefghijklmnopqrstuvwxyz")
		if strings.HasPrefix(f[0], fmt.Sprintf("gxt%d", os.Getpid()%100000)) && len(pid) == len(fmt.Sprint(os.Getpid()%100000)) {
			continue // this run's
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // (a pid kept modulo 100000 may be another live run's)
		}
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// listenInNetns opens a TCP listener inside a network namespace (the socket stays there).
func listenInNetns(t *testing.T, nsPath, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ln, lerr := net.Listen("tcp4", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("return to the test's network namespace: %v", err) // the thread stays locked and dies
	}
	runtime.UnlockOSThread()
	if lerr != nil {
		t.Fatal(lerr)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// egressRuntime is a runtime on the test containerd whose jobs with egress get a network
// of their own under policy, with its rules removed at the end.
func egressRuntime(t *testing.T, policy string, subnet string, mbps int64) (*Containerd, string) {
	t.Helper()
	needContainerd(t)
	rt, ref := testRuntime(t)
	name := fmt.Sprintf("t%d%s", os.Getpid()%100000, strings.ReplaceAll(subnet[strings.Index(subnet, ".")+1:strings.LastIndex(subnet, ".")], ".", ""))
	var c *Containerd
	t.Cleanup(func() { // after the runtime's Close (cleanups run last first), which takes its pool down
		if c == nil {
			return
		}
		if err := c.net.Uninstall(); err != nil {
			t.Errorf("remove the test network's rules: %v", err)
		}
		os.RemoveAll(filepath.Join("/var/lib/cni/networks", name))
	})
	c = newInstanceWith(t, rt.Namespace(), ContainerdOptions{
		Network: NetworkOptions{Policy: policy, Name: name, Subnet: subnet, EgressMbps: mbps, DNS: []string{"192.0.2.53"}}})
	return c, ref
}

// withProbe copies the red-team probe into the job's /output.
func withProbe(t *testing.T, spec Spec) Spec {
	t.Helper()
	if probeErr != nil {
		t.Fatalf("build the probe: %v", probeErr)
	}
	b, err := os.ReadFile(probePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spec.OutputDir, "probe"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return spec
}

var (
	probePath string
	probeErr  error
)

// buildProbe builds sandbox/internal/probe, statically linked, into dir.
func buildProbe(dir string) {
	probePath = filepath.Join(dir, "probe")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", probePath, "./internal/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		probeErr = fmt.Errorf("%v: %s", err, out)
	}
}

// probeLines returns the probe's verdicts in a log: "tcp 1.2.3.4:5" -> "allowed" or
// "refused EHOSTUNREACH: ...".
func probeLines(log string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if tag, rest, ok := strings.Cut(line, " => "); ok {
			_, verdict, _ := strings.Cut(rest, " ")
			out[tag] = verdict
		}
	}
	return out
}

// TestEgress: what a job reaches under each egress policy, and without egress. Every
// refusal is the rule set's ("administratively prohibited", EHOSTUNREACH at once), and
// each target has a positive control: the public stand-in is reached (through NAT), the
// LAN is reached under "allow", the host reaches the listener the job is refused.
func TestEgress(t *testing.T) {
	needContainerd(t)
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
				t.Fatalf("%s is required for jobs' networks: %v", tool, err)
			}
			t.Skipf("skipping: %s missing (make deps)", tool)
		}
	}
	// Stand-ins for the Internet come from 198.18.0.0/15 (benchmarking), not from the
	// documentation ranges: a build machine may reach its package mirrors there (here,
	// deb.debian.org and the Go proxy resolve to 203.0.113.80), and the host route to a
	// stand-in's network would cut them off for every test running meanwhile.
	pub := newNetTarget(t, "public", "198.18.231.1", "198.18.231.254")
	lan := newNetTarget(t, "lan", "192.168.231.1", "192.168.231.254")
	meta := newNetTarget(t, "metadata", "169.254.231.1", "169.254.231.254")
	// Services of the host itself: on all its addresses, and an abstract Unix socket.
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostLn.Close() })
	hostGot := serve(t, hostLn)
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	abstract := fmt.Sprintf("gpunex-test-%d", os.Getpid())
	abLn, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { abLn.Close() })
	abGot := serve(t, abLn)
	var hostIPs []string
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
				hostIPs = append(hostIPs, ip.IP.String())
			}
		}
	}
	// Controls: the host reaches every listener the jobs are refused.
	for _, target := range []string{
		net.JoinHostPort(pub.ip, fmt.Sprint(pub.port)), net.JoinHostPort(lan.ip, fmt.Sprint(lan.port)),
		net.JoinHostPort(meta.ip, fmt.Sprint(meta.port)), net.JoinHostPort(hostIPs[0], fmt.Sprint(hostPort)),
	} {
		c, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			t.Fatalf("control: the host cannot reach %s: %v (the refusals below would prove nothing)", target, err)
		}
		c.Close()
	}
	if c, err := net.Dial("unix", "@"+abstract); err != nil {
		t.Fatalf("control: the abstract socket is not reachable from the host: %v", err)
	} else {
		c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	before := len(hostGot()) + len(abGot()) + len(lan.got()) + len(meta.got()) + len(pub.got())

	// One script probes everything; each line "TAG => probe's verdict".
	script := func() string {
		var b strings.Builder
		b.WriteString("p() { tag=$1; shift; echo \"$tag => $(/output/probe \"$@\")\"; }\n")
		fmt.Fprintf(&b, "p public tcp %s:%d\n", pub.ip, pub.port)
		fmt.Fprintf(&b, "p lan tcp %s:%d\n", lan.ip, lan.port)
		fmt.Fprintf(&b, "p metadata tcp %s:%d\n", meta.ip, meta.port)
		fmt.Fprintf(&b, "gw=$(ip route | awk '/default/ {print $3}'); echo GATEWAY $gw\n")
		fmt.Fprintf(&b, "[ -n \"$gw\" ] && p host-gateway tcp $gw:%d\n", hostPort)
		for i, ip := range append(hostIPs, pub.hostIP) {
			fmt.Fprintf(&b, "p host-address-%d tcp %s:%d\n", i, ip, hostPort)
		}
		fmt.Fprintf(&b, "p host-loopback tcp 127.0.0.1:%d\n", hostPort)
		fmt.Fprintf(&b, "p abstract abstract %s\n", abstract)
		b.WriteString("echo RESOLV $(grep nameserver /etc/resolv.conf)\necho IFACES $(tail -n +3 /proc/net/dev | cut -d: -f1)\n")
		return b.String()
	}()

	refused := func(t *testing.T, verdicts map[string]string, tag, errno, log string) {
		t.Helper()
		if v := verdicts[tag]; !strings.HasPrefix(v, "refused "+errno) {
			t.Errorf("%s: %q, want refused %s; log:\n%s", tag, v, errno, log)
		}
	}
	for _, tc := range []struct {
		policy string
		subnet string
		mbps   int64
	}{{EgressPublicOnly, "10.231.71.0/24", 0}, {EgressAllow, "10.231.72.0/24", 0}} {
		t.Run(tc.policy, func(t *testing.T) {
			rt, ref := egressRuntime(t, tc.policy, tc.subnet, tc.mbps)
			s := &suite{rt: rt, image: ref}
			spec := withProbe(t, s.spec(t, "sh", "-c", script))
			spec.Egress = true
			exit, log := s.run(t, rt, spec)
			wantExit(t, exit, 0, ReasonExited, log)
			v := probeLines(log)
			if v["public"] != "allowed" {
				t.Fatalf("a job with egress should reach the public stand-in: %q; log:\n%s", v["public"], log)
			}
			// NAT: the public side sees the host's address, not the job's.
			if got := pub.got(); len(got) == 0 || !strings.HasPrefix(got[len(got)-1], pub.hostIP+" ") {
				t.Errorf("the public stand-in saw %q; want the host's %s (NAT)", got, pub.hostIP)
			}
			if tc.policy == EgressAllow {
				if v["lan"] != "allowed" {
					t.Errorf("under allow the provider's LAN is reachable: %q; log:\n%s", v["lan"], log)
				}
			} else {
				refused(t, v, "lan", "EHOSTUNREACH", log)
			}
			refused(t, v, "metadata", "EHOSTUNREACH", log)
			if !strings.Contains(log, "GATEWAY 10.231.") {
				t.Errorf("the job has no default route through its network; log:\n%s", log)
			}
			refused(t, v, "host-gateway", "EHOSTUNREACH", log)
			for i := range len(hostIPs) + 1 {
				refused(t, v, fmt.Sprintf("host-address-%d", i), "EHOSTUNREACH", log)
			}
			refused(t, v, "host-loopback", "ECONNREFUSED", log) // its own loopback: nothing listens
			refused(t, v, "abstract", "ECONNREFUSED", log)
			if !strings.Contains(log, "RESOLV nameserver 192.0.2.53") {
				t.Errorf("the job's resolv.conf should list jobs.dns; log:\n%s", log)
			}
		})
	}
	t.Run("without-egress", func(t *testing.T) {
		rt, ref := egressRuntime(t, EgressPublicOnly, "10.231.73.0/24", 0)
		s := &suite{rt: rt, image: ref}
		spec := withProbe(t, s.spec(t, "sh", "-c", script))
		exit, log := s.run(t, rt, spec)
		wantExit(t, exit, 0, ReasonExited, log)
		v := probeLines(log)
		for _, tag := range []string{"public", "lan", "metadata"} {
			refused(t, v, tag, "ENETUNREACH", log)
		}
		refused(t, v, "abstract", "ECONNREFUSED", log)
		if !strings.Contains(log, "IFACES lo\n") {
			t.Errorf("without egress the job has only its loopback; log:\n%s", log)
		}
	})
	time.Sleep(100 * time.Millisecond)
	after := len(hostGot()) + len(abGot()) + len(lan.got()) + len(meta.got()) + len(pub.got())
	// The public stand-in got one message per egress job, the LAN one under allow.
	if after-before != 3 {
		t.Errorf("the listeners got %d messages from jobs, want 3 (public twice, LAN under allow): host %q, abstract %q, lan %q, metadata %q",
			after-before, hostGot(), abGot(), lan.got(), meta.got())
	}
}

// TestEgressOtherJobs: a job with egress cannot open a connection to another job, though
// the host can (the control).
func TestEgressOtherJobs(t *testing.T) {
	rt, ref := egressRuntime(t, EgressAllow, "10.231.74.0/24", 0)
	s := &suite{rt: rt, image: ref}
	ctx := context.Background()
	server := s.spec(t, "sh", "-c", `ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1 > /output/ip.tmp && mv /output/ip.tmp /output/ip; nc -l -p 7000; echo SERVED`)
	server.Egress = true
	if err := rt.Start(ctx, server); err != nil {
		t.Fatal(err)
	}
	defer rt.Remove(ctx, server.ID)
	var ip string
	for deadline := time.Now().Add(10 * time.Second); ip == ""; {
		if b, err := os.ReadFile(filepath.Join(server.OutputDir, "ip")); err == nil {
			ip = strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listening job never wrote its address; log:\n%s", readLog(t, server))
		}
		time.Sleep(50 * time.Millisecond)
	}
	client := withProbe(t, s.spec(t, "sh", "-c", fmt.Sprintf("echo \"job => $(/output/probe tcp %s:7000)\"", ip)))
	client.Egress = true
	exit, log := s.run(t, rt, client)
	wantExit(t, exit, 0, ReasonExited, log)
	if v := probeLines(log)["job"]; !strings.HasPrefix(v, "refused EHOSTUNREACH") {
		t.Fatalf("a job reached another job at %s:7000: %q; log:\n%s", ip, v, log)
	}
	c, err := net.DialTimeout("tcp", ip+":7000", 2*time.Second)
	if err != nil {
		t.Fatalf("control: the host cannot reach the listening job at %s:7000: %v", ip, err)
	}
	c.Write([]byte("from-host\n"))
	c.Close()
	if e, err := rt.Wait(ctx, server.ID); err != nil || e.Code != 0 {
		t.Fatalf("the listening job: %+v %v; log:\n%s", e, err, readLog(t, server))
	}
}

// TestEgressBandwidth: jobs.egress_mbps caps what a job sends. 2 MiB at 4 Mbit/s take
// about 4 s; uncapped, on veth, milliseconds.
func TestEgressBandwidth(t *testing.T) {
	pub := newNetTarget(t, "bandwidth", "198.18.232.1", "198.18.232.254") // see TestEgress's stand-ins
	rt, ref := egressRuntime(t, EgressPublicOnly, "10.231.75.0/24", 4)
	s := &suite{rt: rt, image: ref}
	spec := s.spec(t, "sh", "-c", fmt.Sprintf("dd if=/dev/zero bs=64k count=32 2>/dev/null | nc -w 10 %s %d; echo SENT", pub.ip, pub.port))
	spec.Egress = true
	start := time.Now()
	exit, log := s.run(t, rt, spec)
	took := time.Since(start)
	wantExit(t, exit, 0, ReasonExited, log)
	got := pub.got()
	if len(got) != 1 || len(got[0]) < 2<<20 {
		t.Fatalf("the public stand-in got %d messages; want the job's 2 MiB; log:\n%s", len(got), log)
	}
	if took < 2*time.Second {
		t.Fatalf("2 MiB went out in %v: faster than twice the 4 Mbit/s cap", took)
	}
	t.Logf("2 MiB at a 4 Mbit/s cap: %v", took)
}

// TestEgressRulesPutBack: a firewall reload that flushes the jobs' rules (here: the
// forward chain emptied, the input jump deleted) does not open the host or the LAN to
// the next job with egress: the rules are checked and put back before it starts.
func TestEgressRulesPutBack(t *testing.T) {
	lan := newNetTarget(t, "reload", "192.168.232.1", "192.168.232.254")
	rt, ref := egressRuntime(t, EgressPublicOnly, "10.231.76.0/24", 0)
	s := &suite{rt: rt, image: ref}
	run := func() map[string]string {
		spec := withProbe(t, s.spec(t, "sh", "-c", fmt.Sprintf(`echo "lan => $(/output/probe tcp %s:%d)"`, lan.ip, lan.port)))
		spec.Egress = true
		exit, log := s.run(t, rt, spec)
		wantExit(t, exit, 0, ReasonExited, log)
		return probeLines(log)
	}
	if v := run()["lan"]; !strings.HasPrefix(v, "refused EHOSTUNREACH") {
		t.Fatalf("before the flush: %q", v)
	}
	if rt.net.printed == nil {
		t.Error("the installed rules were not recorded as iptables-save prints them: every check runs iptables once per rule")
	}
	in, fwd := rt.net.chains()
	if err := iptables("-t", "filter", "-F", fwd); err != nil {
		t.Fatal(err)
	}
	if err := iptables("-t", "filter", "-D", "INPUT", "-s", "10.231.76.0/24", "-j", in); err != nil {
		t.Fatal(err)
	}
	if v := run()["lan"]; !strings.HasPrefix(v, "refused EHOSTUNREACH") {
		t.Fatalf("after a flush of the jobs' rules a job reached the LAN: %q", v)
	}
	if got := lan.got(); len(got) != 0 {
		t.Fatalf("the LAN stand-in got %q", got)
	}
}

// TestEgressNamespacesLeftBehind: a job with egress has its loopback up in the
// namespaces made for it; the namespaces a node makes ahead for jobs with egress are taken
// down when it closes, and those a killed node process made (its pid gone) when
// the node starts again: no pinned namespace, no address and no user-namespace range is
// left, while what a live process holds stays.
func TestEgressNamespacesLeftBehind(t *testing.T) {
	rt, ref := egressRuntime(t, EgressPublicOnly, "10.231.77.0/24", 0)
	s := &suite{rt: rt, image: ref}
	ctx := context.Background()
	spec := s.spec(t, "ip", "-o", "link", "show", "lo")
	spec.Egress = true
	exit, log := s.run(t, rt, spec)
	wantExit(t, exit, 0, ReasonExited, log)
	if !strings.Contains(log, ",UP") {
		t.Errorf("the loopback of a job with egress is not up: %q", log)
	}
	for deadline := time.Now().Add(20 * time.Second); len(rt.nsPool) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no namespaces were made ahead after a job with egress")
		}
	}
	rt.nsRefill.Lock() // the refill has ended: nothing else reads rt.self
	pooled := <-rt.nsPool
	rt.nsPool <- pooled
	addresses := func() []string {
		entries, _ := os.ReadDir(filepath.Join("/var/lib/cni/networks", rt.net.opts.Name))
		var ips []string
		for _, e := range entries {
			if _, err := netip.ParseAddr(e.Name()); err == nil {
				ips = append(ips, e.Name())
			}
		}
		return ips
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if n := len(addresses()); n != 1 {
		t.Fatalf("%d addresses taken with one job's namespaces made ahead and no job running, want 1: %v", n, addresses())
	}

	// What a killed process made: namespaces under a pid that no longer exists.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	me := rt.self
	rt.self = processID{boot: me.boot, pid: dead.Process.Pid, start: me.start + 1}
	left, err := rt.makeNamespaces(ctx)
	rt.self = me
	rt.nsRefill.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	claim := filepath.Join(usernsClaimDir, strconv.FormatUint(uint64(left.base), 10))
	if rt.userns && (!exists(left.user) || !exists(claim)) {
		t.Fatalf("made ahead: user namespace pin %s or range claim %s missing", left.user, claim)
	}
	if !exists(left.net) || len(addresses()) != 2 {
		t.Fatalf("made ahead: network namespace pin %s missing or addresses %v", left.net, addresses())
	}

	// The node starts again (another runtime of the same node and network).
	newInstanceWith(t, rt.Namespace(), ContainerdOptions{Network: rt.net.opts})
	for _, p := range []string{left.net, left.user, claim} {
		if p != "" && exists(p) {
			t.Errorf("%s left by a killed process is still there after a restart", p)
		}
	}
	if !exists(pooled.net) || len(addresses()) != 1 {
		t.Errorf("a restart took down what a live process holds: pin %s, addresses %v", pooled.net, addresses())
	}

	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(pooled.net) || len(addresses()) != 0 {
		t.Errorf("after Close: pin %s still there (%v) or addresses %v taken", pooled.net, exists(pooled.net), addresses())
	}
}

// TestNamespaceLeftoversRecognised: what an ended node process left is taken down when
// the node starts again, also where its pid alone cannot tell: a process that had this
// pid before (pid reuse; a node that is always pid 1 in its container), a process of an
// earlier boot (a run folder that outlived a reboot), and a user namespace left pinned
// without its network namespace (a take-down that stopped half-way). The namespaces this
// process made stay (the control).
func TestNamespaceLeftoversRecognised(t *testing.T) {
	rt, _ := egressRuntime(t, EgressPublicOnly, "10.231.78.0/24", 0)
	if !rt.userns {
		t.Skip("skipping: no user namespaces here")
	}
	ctx := rt.ns(context.Background())
	if err := rt.net.install(); err != nil {
		t.Fatal(err)
	}
	me := rt.self
	makeAs := func(p processID) jobNamespaces {
		t.Helper()
		rt.self = p
		ns, err := rt.makeNamespaces(ctx)
		rt.self = me
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	claim := func(ns jobNamespaces) string {
		return filepath.Join(usernsClaimDir, strconv.FormatUint(uint64(ns.base), 10))
	}
	reused := makeAs(processID{boot: me.boot, pid: me.pid, start: me.start / 2})
	earlierBoot := makeAs(processID{boot: "0badb007", pid: me.pid, start: me.start})
	halfDown := makeAs(processID{boot: me.boot, pid: me.pid, start: me.start/2 + 1})
	if err := rt.net.detach(ctx, halfDown.net); err != nil {
		t.Fatal(err)
	}
	own := makeAs(me)
	t.Cleanup(func() { rt.dropNamespaces(context.Background(), own, filepath.Base(own.net)) })
	for _, ns := range []jobNamespaces{reused, earlierBoot, halfDown, own} {
		if !exists(ns.user) || !exists(claim(ns)) {
			t.Fatalf("made ahead: user namespace pin %s or range claim missing", ns.user)
		}
	}

	newInstanceWith(t, rt.Namespace(), ContainerdOptions{Network: rt.net.opts}) // the node starts again
	for what, ns := range map[string]jobNamespaces{"a process that had this pid": reused, "a process of an earlier boot": earlierBoot, "a half take-down": halfDown} {
		for _, p := range []string{ns.net, ns.user, claim(ns)} {
			if exists(p) {
				t.Errorf("%s left by %s is still there after a restart", p, what)
			}
		}
	}
	for _, p := range []string{own.net, own.user, claim(own)} {
		if !exists(p) {
			t.Errorf("a restart took down %s, which this process holds", p)
		}
	}
}

// TestFirewallWatch: a change to any iptables table is noticed (the jobs' rules are then
// checked before the next job with egress), and nothing is reported when nothing changed.
func TestFirewallWatch(t *testing.T) {
	needContainerd(t) // root and iptables, as the egress tests
	w, err := watchFirewall()
	if err != nil {
		t.Skipf("no nf_tables notifications here (%v): the rules are checked before every job", err)
	}
	defer w.close()
	if !w.takeChanged() {
		t.Fatal("a new watch must report a change: nothing was checked yet")
	}
	time.Sleep(100 * time.Millisecond)
	if w.takeChanged() {
		t.Fatal("a change reported while nothing changed the firewall")
	}
	chain := fmt.Sprintf("GPUNEX-WATCH-%d", os.Getpid()%100000)
	if err := iptables("-t", "filter", "-N", chain); err != nil {
		t.Fatal(err)
	}
	defer iptables("-t", "filter", "-X", chain)
	for deadline := time.Now().Add(5 * time.Second); !w.takeChanged(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a new iptables chain went unnoticed")
		}
	}
}

// TestFirewallWatchUnreadChange: a change is reported to the very next check, even when
// the check comes right after it (a firewall reload just before a job with egress starts):
// the rules' check is never skipped on a change whose notification is still unread.
func TestFirewallWatchUnreadChange(t *testing.T) {
	needContainerd(t)
	w, err := watchFirewall()
	if err != nil {
		t.Skipf("no nf_tables notifications here (%v): the rules are checked before every job", err)
	}
	defer w.close()
	w.takeChanged()
	chain := fmt.Sprintf("GPUNEX-UNREAD-%d", os.Getpid()%100000)
	defer iptables("-t", "filter", "-X", chain)
	missed := 0
	for i := range 40 {
		op := "-N"
		if i%2 == 1 {
			op = "-X"
		}
		if err := iptables("-t", "filter", op, chain); err != nil {
			t.Fatal(err)
		}
		if !w.takeChanged() {
			missed++
		}
	}
	if missed > 0 {
		t.Fatalf("%d of 40 changes were not reported to the check right after them", missed)
	}
}
