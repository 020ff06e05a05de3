//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/sandbox"
)

// netnsLab is a set of network namespaces of one test, joined by veth pairs and routed with
// iptables NAT. Everything it makes is removed with the test, even when the test fails.
type netnsLab struct {
	t      *testing.T
	prefix string
	names  []string
}

func newNetnsLab(t *testing.T) *netnsLab {
	l := &netnsLab{t: t, prefix: fmt.Sprintf("gx%04x-", rand.IntN(1<<16))}
	t.Cleanup(func() {
		for _, n := range l.names {
			exec.Command("ip", "netns", "del", n).Run()
		}
	})
	return l
}

// run runs a command in the host's namespaces and fails the test if it fails.
func (l *netnsLab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ns makes a namespace with its loopback up.
func (l *netnsLab) ns(name string) string {
	l.t.Helper()
	full := l.prefix + name
	l.run("ip", "netns", "add", full)
	l.names = append(l.names, full)
	l.in(full, "ip", "link", "set", "lo", "up")
	return full
}

// in runs a command inside a namespace.
func (l *netnsLab) in(ns string, args ...string) {
	l.t.Helper()
	l.run(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

// link joins two namespaces with a veth pair, addressing each end (CIDR; "" for none).
func (l *netnsLab) link(a, ifA, addrA, b, ifB, addrB string) {
	l.t.Helper()
	l.run("ip", "link", "add", ifA, "netns", a, "type", "veth", "peer", "name", ifB, "netns", b)
	for _, e := range [][3]string{{a, ifA, addrA}, {b, ifB, addrB}} {
		if e[2] != "" {
			l.in(e[0], "ip", "addr", "add", e[2], "dev", e[1])
		}
		l.in(e[0], "ip", "link", "set", e[1], "up")
	}
}

// homeBehindNAT makes a router on the public segment (bridge br0 of pub) at wan, NATting a
// LAN 192.168.<lan>.0/24 where a host namespace sits at .2. symmetric: the router maps each
// connection to a random port (MASQUERADE --random-fully), which hole punching cannot
// predict.
func (l *netnsLab) homeBehindNAT(pub, name, wan string, lan int, symmetric bool) (router, host string) {
	l.t.Helper()
	router, host = l.ns("r"+name), l.ns(name)
	l.link(router, "wan", wan+"/24", pub, "p-"+name, "")
	l.in(pub, "ip", "link", "set", "p-"+name, "master", "br0")
	l.link(router, "lan", fmt.Sprintf("192.168.%d.1/24", lan), host, "eth0", fmt.Sprintf("192.168.%d.2/24", lan))
	l.in(host, "ip", "route", "add", "default", "via", fmt.Sprintf("192.168.%d.1", lan))
	l.in(router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	nat := []string{"iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "wan", "-j", "MASQUERADE"}
	if symmetric {
		nat = append(nat, "--random-fully")
	}
	l.in(router, nat...)
	// A home router: what comes from outside reaches the LAN only as an answer, and what is
	// addressed to the router itself is dropped unanswered. (Answered, or merely confirmed
	// by conntrack, an early hole-punch packet would take the port mapping the punch needs.)
	l.in(router, "iptables", "-A", "FORWARD", "-i", "wan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
	l.in(router, "iptables", "-A", "FORWARD", "-i", "wan", "-j", "DROP")
	l.in(router, "iptables", "-A", "INPUT", "-i", "wan", "-m", "conntrack", "--ctstate", "NEW,INVALID", "-j", "DROP")
	return router, host
}

// nsNode is a node process in a namespace.
type nsNode struct {
	ns, home string
	cmd      *exec.Cmd
	st       api.Status
}

// gpunexIn runs the binary in a namespace with stdin; it returns stdout and stderr together.
func gpunexNS(ns, stdin string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, binary}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustNS(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := gpunexNS(ns, "", args...)
	if err != nil {
		t.Fatalf("[%s] gpunex %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

// startNS starts a node in a namespace and waits for its API.
func startNS(t *testing.T, ns, home string) *nsNode {
	t.Helper()
	logf, _ := os.Create(filepath.Join(home, "node.log"))
	cmd := exec.Command("ip", "netns", "exec", ns, binary, "node", "run", "--home", home)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	n := &nsNode{ns: ns, home: home, cmd: cmd}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, err := gpunexNS(ns, "", "status", "--json", "--home", home); err == nil && json.Unmarshal([]byte(out), &n.st) == nil {
			return n
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(home, "node.log"))
			t.Fatalf("node in %s did not start:\n%s", ns, tail(string(log), 4000))
		}
	}
}

// TestNATTraversal: a coordinator on a public segment, a provider behind a home router's
// NAT, a renter behind another, and a provider behind a symmetric NAT, each in network
// namespaces of the test. Each provider learns it is private, takes a relay reservation on
// the coordinator and announces its relay address; it is certified, the renter finds its
// offer and runs a job on it with a dataset (`--input`), which serves a page on a port it
// declares: the renter reads it through `gpunex job forward` (nat_ports_test.go), runs a
// shell in it that sees the dataset as the job's user, and extends its lease. Meanwhile strangers through the relay
// hoard circuits to the providers and spend their proposal budgets (nat_stranger_test.go).
// The connection to the first ends direct (hole punched), to the second relayed; the test
// records both. A fourth provider sits behind a NAT whose outside is a private address (a
// company network): AutoNAT never tells it it is private, it takes its relay slot after
// p2p.UnknownReachabilityWait all the same, and the renter reaches it through the relay.
func TestNATTraversal(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("GPUNEX_REQUIRE_CONTAINERD") == "1" {
			t.Fatal("network namespaces need root")
		}
		t.Skip("network namespaces need root")
	}
	dir := t.TempDir()
	d := testContainerd(t, dir)

	// The public segment: a bridge. Its addresses are public ones (AutoNAT checks only
	// public addresses), which exist only inside the test's namespaces.
	lab := newNetnsLab(t)
	pub := lab.ns("pub")
	lab.in(pub, "ip", "link", "add", "br0", "type", "bridge")
	lab.in(pub, "ip", "link", "set", "br0", "up")
	coordNS := lab.ns("coord")
	lab.link(coordNS, "eth0", "11.0.0.1/24", pub, "p-coord", "")
	lab.in(pub, "ip", "link", "set", "p-coord", "master", "br0")
	openNS := lab.ns("open")
	lab.link(openNS, "eth0", "11.0.0.5/24", pub, "p-open", "")
	lab.in(pub, "ip", "link", "set", "p-open", "master", "br0")
	_, provNS := lab.homeBehindNAT(pub, "prov", "11.0.0.2", 1, false)
	_, renterNS := lab.homeBehindNAT(pub, "rent", "11.0.0.3", 2, false)
	_, symNS := lab.homeBehindNAT(pub, "sym", "11.0.0.4", 3, true)
	// A provider in a company network: its router's outside is a private address
	// (10.0.0.7), on a segment where the coordinator answers at 10.0.0.1 too. AutoNAT
	// servers do not dial back private addresses, so it never hears that it is private.
	_, corpNS := lab.homeBehindNAT(pub, "corp", "10.0.0.7", 5, false)

	listen := "/ip4/0.0.0.0/tcp/4001,/ip4/0.0.0.0/udp/4001/quic-v1"
	coord := filepath.Join(dir, "coordinator")
	initCoordinator(t, coord, listen)
	lab.in(coordNS, "ip", "addr", "add", "10.0.0.1/24", "dev", "eth0")
	c := startNS(t, coordNS, coord)
	bootAt := func(ip string) string {
		return "/ip4/" + ip + "/tcp/4001/p2p/" + c.st.PeerID + ",/ip4/" + ip + "/udp/4001/quic-v1/p2p/" + c.st.PeerID
	}
	boot := bootAt("11.0.0.1")

	newNode := func(ns, name, role string) *nsNode {
		boot := boot
		if ns == corpNS {
			boot = bootAt("10.0.0.1")
		}
		home := filepath.Join(dir, name)
		args := []string{"init", "--home", home, "--role", role, "--listen", listen, "--bootstrap", boot}
		if role == "provider" {
			args = append(args, "--containerd", d.Address())
		}
		mustRun(t, args...)
		if role == "provider" {
			b, _ := os.ReadFile(filepath.Join(home, "config.toml"))
			s := strings.NewReplacer("require_escrow = true", "require_escrow = false", "storage_mb = 256", "storage_mb = 8", "network_mb = 16", "network_mb = 2").Replace(string(b))
			os.WriteFile(filepath.Join(home, "config.toml"), []byte(s), 0o600)
		}
		return startNS(t, ns, home)
	}
	pubProv := newNode(openNS, "open", "provider")
	prov := newNode(provNS, "provider", "provider")
	sym := newNode(symNS, "symmetric", "provider")
	corp := newNode(corpNS, "corporate", "provider")
	renter := newNode(renterNS, "renter", "renter")

	// Certified through the coordinator: only then does its relay give them a slot.
	for _, p := range []*nsNode{pubProv, prov, sym, corp} {
		nsCertify(t, c, p)
	}
	// The provider on the public segment is found reachable, and takes no relay slot.
	for deadline, st := time.Now().Add(60*time.Second), (api.Status{}); st.Reachability != "public"; time.Sleep(500 * time.Millisecond) {
		json.Unmarshal([]byte(mustNS(t, pubProv.ns, "status", "--json", "--home", pubProv.home)), &st)
		if st.Relayed || time.Now().After(deadline) {
			t.Fatalf("provider on the public segment: reachability %q, relayed %v", st.Reachability, st.Relayed)
		}
	}
	// Each provider finds out it is behind NAT and takes a relay reservation.
	for _, p := range []*nsNode{prov, sym} {
		var st api.Status
		for deadline := time.Now().Add(60 * time.Second); !(st.Reachability == "private" && st.Relayed); time.Sleep(500 * time.Millisecond) {
			json.Unmarshal([]byte(mustNS(t, p.ns, "status", "--json", "--home", p.home)), &st)
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(p.home, "node.log"))
				t.Fatalf("%s: reachability %q, relayed %v, addrs %v\n%s", p.ns, st.Reachability, st.Relayed, st.Addrs, tail(string(log), 3000))
			}
		}
		if out := mustNS(t, p.ns, "status", "--home", p.home); !strings.Contains(out, "reachability: private, relayed") || !strings.Contains(out, "/p2p-circuit/") {
			t.Fatalf("%s status:\n%s", p.ns, out)
		}
	}

	// The provider whose NAT's outside is private stays "unknown", and takes its relay slot
	// once p2p.UnknownReachabilityWait (30 s) has passed all the same.
	for deadline, st := time.Now().Add(90*time.Second), (api.Status{}); !st.Relayed; time.Sleep(500 * time.Millisecond) {
		json.Unmarshal([]byte(mustNS(t, corp.ns, "status", "--json", "--home", corp.home)), &st)
		if st.Reachability == "public" || time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(corp.home, "node.log"))
			t.Fatalf("%s: reachability %q, relayed %v, addrs %v\n%s", corp.ns, st.Reachability, st.Relayed, st.Addrs, tail(string(log), 3000))
		}
	}

	// The renter is private too and takes no slot: it only dials out. (That the relay refuses
	// a stranger's reservation is p2p's TestRelaySlotsForCertifiedOnly.)
	// Its AutoNAT verdict comes on its own schedule, which may be later than the providers'.
	for deadline, rst := time.Now().Add(60*time.Second), (api.Status{}); rst.Reachability != "private"; time.Sleep(500 * time.Millisecond) {
		json.Unmarshal([]byte(mustNS(t, renter.ns, "status", "--json", "--home", renter.home)), &rst)
		if rst.Relayed || rst.Reachability == "public" || time.Now().After(deadline) {
			t.Fatalf("renter: reachability %q, relayed %v", rst.Reachability, rst.Relayed)
		}
	}

	// The doctor says so too.
	for _, c := range []struct {
		n          *nsNode
		status, in string
	}{{prov, "WARN", "through its coordinator's relay"}, {renter, "OK", "a renter only dials out"}} {
		out, _ := gpunexNS(c.n.ns, "", "doctor", "--home", c.n.home)
		if !regexp.MustCompile(`reachability\s+` + c.status + `\s+[^\n]*` + regexp.QuoteMeta(c.in)).MatchString(out) {
			t.Errorf("doctor of %s:\n%s", c.n.ns, out)
		}
	}

	// Meanwhile strangers on the public segment attack the providers behind NAT through the
	// coordinator's relay: two hold every circuit they can get to the one only the relay
	// reaches, another spends their proposal budgets with fresh keys. The renter still
	// reaches and rents them.
	hoarders, spender := strangersAttack(t, lab, pub, dir, "/ip4/11.0.0.1/tcp/4001/p2p/"+c.st.PeerID, sym.st.PeerID, []string{prov.st.PeerID, sym.st.PeerID})

	// Found by the renter, and rented.
	// A 50 MB image archive, so that where the job's data goes shows in the time it takes.
	archive := filepath.Join(dir, "image-50mb.tar")
	f, _ := os.Create(archive)
	if _, err := sandbox.PaddedBusyboxImage(f, "gpunex.test/padded:1", 50<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	paths := map[string]string{}
	for _, p := range []*nsNode{pubProv, prov, sym, corp} {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			if strings.Contains(mustNS(t, renter.ns, "offers", "search", "--json", "--home", renter.home), p.st.PeerID) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the renter does not find %s's offer", p.ns)
			}
		}
		started := time.Now()
		// The job gets a dataset, says hello, then serves a page on the port it declares,
		// without egress.
		dataset := filepath.Join(renter.home, "dataset-"+p.ns+".txt")
		if err := os.WriteFile(dataset, []byte("rows for "+p.ns+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		id, err := gpunexNS(renter.ns, "", "job", "run", "--detach", "--home", renter.home, "--offer", p.st.PeerID+"/L4-24GB", "--gpus", "1", "--max-hours", "0.1",
			"--image-archive", archive, "--input", dataset, "--port", "8000", "--", "sh", "-c",
			"echo hello from behind NAT && mkdir /tmp/www && echo served-from-"+p.ns+" > /tmp/www/index.html && exec httpd -f -p 8000 -h /tmp/www")
		if err != nil {
			t.Fatalf("job on %s: %v\n%s", p.ns, err, id)
		}
		proposed := time.Since(started)
		lines := strings.Split(strings.TrimSpace(id), "\n")
		id = lines[len(lines)-1]
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			out, err := gpunexNS(renter.ns, "", "job", "logs", id, "--home", renter.home)
			if err == nil && strings.Contains(out, "hello from behind NAT") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job on %s: %v\n%s", p.ns, err, out)
			}
		}
		ran := time.Since(started)
		// How the renter's connection to the provider ended: a hole punch that succeeds has
		// done so by now, but give it a few more seconds before calling it relayed.
		var pv api.PeerView
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			raw, err := peerView(renter, p.st.PeerID)
			if err == nil {
				pv = raw
			}
			if pv.Path == "direct" || time.Now().After(deadline) {
				break
			}
		}
		paths[p.ns] = pv.Path
		// Its port, through the same connection: direct, hole punched or relayed.
		forwarded := time.Now()
		if page := fetchForwarded(t, renter, id, fmt.Sprintf("127.0.0.1:%d", 18000+len(paths))); strings.TrimSpace(page) != "served-from-"+p.ns {
			t.Errorf("the page of the job on %s through gpunex job forward: %q", p.ns, page)
		}
		// A shell in it sees the dataset, as the job's user; its lease grows.
		if out, err := gpunexNS(renter.ns, "", "job", "exec", id, "--home", renter.home, "--", "sh", "-c", "cat /input/dataset-"+p.ns+".txt; id -u"); err != nil ||
			out != "rows for "+p.ns+"\n65534\n" {
			t.Errorf("a shell in the job on %s: %v\n%q", p.ns, err, out)
		}
		if out, err := gpunexNS(renter.ns, "", "job", "extend", id, "--hours", "0.05", "--home", renter.home); err != nil || !strings.Contains(out, "the lease now ends at") {
			t.Errorf("extend the job on %s: %v\n%s", p.ns, err, out)
		}
		if out, err := gpunexNS(renter.ns, "", "job", "cancel", id, "--home", renter.home); err != nil {
			t.Errorf("cancel the job on %s: %v\n%s", p.ns, err, out)
		}
		t.Logf("%s: job proposed and started in %s, its output read in %s, its port's page in %s more, connection %s (%v)", p.ns, proposed.Round(10*time.Millisecond), ran.Round(10*time.Millisecond), time.Since(forwarded).Round(10*time.Millisecond), pv.Path, pv.Conns)
	}
	checkStrangers(t, hoarders, spender, map[string]string{prov.st.PeerID: prov.ns, sym.st.PeerID: sym.ns})
	if paths[pubProv.ns] != "direct" {
		t.Errorf("to a provider on the public segment the connection is direct: %q", paths[pubProv.ns])
	}
	if paths[prov.ns] != "direct" {
		log, _ := os.ReadFile(filepath.Join(prov.home, "node.log"))
		rlog, _ := os.ReadFile(filepath.Join(renter.home, "node.log"))
		var ct strings.Builder
		for _, r := range []string{lab.prefix + "rprov", lab.prefix + "rrent"} {
			out, _ := exec.Command("ip", "netns", "exec", r, "cat", "/proc/net/nf_conntrack").CombinedOutput()
			cnt, _ := exec.Command("ip", "netns", "exec", r, "iptables", "-vnL").CombinedOutput()
			nat, _ := exec.Command("ip", "netns", "exec", r, "iptables", "-t", "nat", "-vnL").CombinedOutput()
			fmt.Fprintf(&ct, "%s:\n%s\n%s\n%s\n", r, out, cnt, nat)
		}
		t.Errorf("behind a port-preserving NAT the connection should end direct (hole punched): %q\nprovider:\n%s\nrenter:\n%s\n%s", paths[prov.ns], tail(string(log), 3000), tail(string(rlog), 3000), ct.String())
	}
	if paths[sym.ns] != "relayed" {
		t.Errorf("behind a symmetric NAT only the relay works: %q", paths[sym.ns])
	}
	if paths[corp.ns] != "relayed" {
		t.Errorf("to a provider whose NAT's outside is private, not routed from the renter, only the relay works: %q", paths[corp.ns])
	}
}

// peerView asks a node how it is connected to a peer.
func peerView(n *nsNode, id string) (api.PeerView, error) {
	var v api.PeerView
	out, err := gpunexNS(n.ns, "", "peers", "show", id, "--json", "--home", n.home)
	if err != nil {
		return v, fmt.Errorf("%v: %s", err, out)
	}
	return v, json.Unmarshal([]byte(out), &v)
}

// nsCertify has a provider in a namespace apply and its coordinator approve it.
func nsCertify(t *testing.T, coord, prov *nsNode) {
	t.Helper()
	answers := strings.Join([]string{"Ada Lovelace", "ada@example.org", "", "L4-24GB", "1", "128", "1", "1", "24/7", "Lyon", "FR", "eu-west", "no", "no", "", ""}, "\n") + "\n"
	if out, err := gpunexNS(prov.ns, answers, "apply", "--interactive", "--home", prov.home); err != nil || !strings.Contains(out, "queued for coordinator") {
		t.Fatalf("apply from %s: %v\n%s", prov.ns, err, out)
	}
	var id string
	for deadline := time.Now().Add(30 * time.Second); id == ""; time.Sleep(200 * time.Millisecond) {
		var queue []api.ApplicationView
		json.Unmarshal([]byte(mustNS(t, coord.ns, "coordinator", "applications", "list", "--status", "pending", "--json", "--home", coord.home)), &queue)
		for _, a := range queue {
			if a.Provider == prov.st.PeerID {
				id = a.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the application of %s did not reach the coordinator", prov.ns)
		}
	}
	mustNS(t, coord.ns, "coordinator", "applications", "approve", id, "--as", "alice", "--home", coord.home)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		if out := mustNS(t, prov.ns, "apply", "status", "--home", prov.home); strings.Contains(out, "approved") && strings.Contains(out, "certificate") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not approved: %s", prov.ns, mustNS(t, prov.ns, "apply", "status", "--home", prov.home))
		}
	}
}
