package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
)

// Egress policies: what a provider lets jobs with egress reach (jobs.egress; the same
// names as the offers' protocol.Egress*).
const (
	// EgressDeny: jobs get no network; Start refuses a job with Egress.
	EgressDeny = "deny"
	// EgressPublicOnly: public addresses only, through NAT.
	EgressPublicOnly = "public-only"
	// EgressAllow: also the provider's private networks (RFC 1918, CGNAT). The host,
	// link-local addresses (cloud metadata) and other jobs stay out of reach.
	EgressAllow = "allow"
)

// ValidEgressPolicy tells whether p names a policy.
func ValidEgressPolicy(p string) bool {
	return p == EgressDeny || p == EgressPublicOnly || p == EgressAllow
}

// Defaults of NetworkOptions.
const (
	DefaultNetworkName   = "gpunex"
	DefaultNetworkSubnet = "10.231.0.0/16"
)

// DefaultDNS are the resolvers a job with egress uses unless jobs.dns says otherwise:
// public ones, since the host's own resolver (often on its loopback or the LAN's router)
// is out of the job's reach.
var DefaultDNS = []string{"1.1.1.1", "8.8.8.8"}

// DefaultCNIPluginDirs are where Debian's containernetworking-plugins and the upstream
// release install the CNI plugins.
var DefaultCNIPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Addresses a job never reaches, whatever the policy: "this" network, loopback, link-local
// (169.254.169.254, the cloud metadata endpoint, is in it), multicast, reserved and
// broadcast, and the cloud host agents outside the link-local range: Azure's WireServer
// (168.63.129.16, a public address; it hands out the VM's goal state and extension
// settings) and Alibaba Cloud's metadata service (100.100.100.200, in the CGNAT range that
// EgressAllow opens). The host's own addresses are refused by the input rule, and other jobs
// by the rule refusing every new connection into the jobs' subnet.
var alwaysBlocked = []string{"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
	"168.63.129.16/32", "100.100.100.200/32"}

// Private ranges a job reaches only under EgressAllow: RFC 1918 and carrier-grade NAT
// (RFC 6598), where a provider's own network usually is.
var privateRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"}

// NetworkOptions configure the network of jobs with egress.
type NetworkOptions struct {
	Policy string // EgressDeny (the default), EgressPublicOnly or EgressAllow
	// Name names the CNI network, its address allocations (/var/lib/cni/networks/<Name>)
	// and its iptables chains: nodes on one host that share it must share Subnet,
	// Policy and Blocked too. DefaultNetworkName.
	Name   string
	Subnet string // the jobs' addresses, an IPv4 prefix (DefaultNetworkSubnet)
	// EgressMbps caps each job's traffic, in each direction, in megabits per second
	// (the bandwidth plugin); 0: no cap.
	EgressMbps int64
	DNS        []string // the job's nameservers (DefaultDNS)
	// Blocked are more IPv4 addresses or networks ("192.0.2.10", "198.51.100.0/24") no job
	// reaches under any policy, besides alwaysBlocked: a provider's own services at public
	// addresses, a cloud's host agent not listed there.
	Blocked    []string
	PluginDirs []string // where the CNI plugins are (DefaultCNIPluginDirs)
	// RunDir holds the pinned network namespaces of running jobs and their resolv.conf
	// ("/run/gpunex"): what lives there does not outlive a reboot, as the namespaces do not.
	RunDir string
}

// ErrNetwork wraps why NewContainerd cannot give jobs the network its egress policy asks
// for (a missing plugin or iptables, bad options): a runtime with EgressDeny still works.
var ErrNetwork = errors.New("the jobs' network cannot be set up")

// jobNetwork gives a job its own network namespace a veth pair away from the host (the
// CNI ptp plugin, addresses from host-local), NAT to the outside (one MASQUERADE rule), an
// optional bandwidth cap (the bandwidth plugin), and iptables rules that decide what the
// job reaches (Rules).
type jobNetwork struct {
	opts   NetworkOptions
	subnet netip.Prefix
	cni    *libcni.CNIConfig
	conf   *libcni.NetworkConfigList
	resolv string  // the jobs' resolv.conf on the host
	pins   *pinner // where the jobs' namespaces are pinned (nil: this process's mount namespace)

	installOnce  sync.Once
	installErr   error
	mu           sync.Mutex // one installRules or ensure at a time
	wasInstalled bool
	printed      map[string]bool // the rules as iptables-save prints them (recordPrinted)
	watch        *firewallWatch  // nil: the rules are checked before every job
}

var networkNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,14}$`)

// newJobNetwork checks the options and that the plugins and iptables are there. The
// rules are installed at the first job with egress (install).
func newJobNetwork(o NetworkOptions) (*jobNetwork, error) {
	n, err := makeJobNetwork(o)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNetwork, err)
	}
	return n, nil
}

func makeJobNetwork(o NetworkOptions) (*jobNetwork, error) {
	n, err := prepareJobNetwork(o)
	if err != nil || n.opts.Policy == EgressDeny {
		return n, err
	}
	o = n.opts
	plugins := []string{"ptp", "host-local"}
	if o.EgressMbps > 0 {
		plugins = append(plugins, "bandwidth")
	}
	for _, p := range plugins {
		found := false
		for _, d := range o.PluginDirs {
			if st, err := os.Stat(filepath.Join(d, p)); err == nil && st.Mode()&0o111 != 0 {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("jobs with egress need the CNI plugin %q in %s: apt-get install containernetworking-plugins, or set jobs.egress = %q",
				p, strings.Join(o.PluginDirs, " or "), EgressDeny)
		}
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("jobs with egress need iptables: apt-get install iptables, or set jobs.egress = %q", EgressDeny)
	}
	list := map[string]any{
		"cniVersion": "1.0.0",
		"name":       o.Name,
		"plugins": []map[string]any{{
			"type": "ptp", "ipMasq": false, "mtu": 1500,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": o.Subnet}}},
				"routes": []map[string]string{{"dst": "0.0.0.0/0"}}},
		}},
	}
	if o.EgressMbps > 0 {
		bps := o.EgressMbps * 1_000_000
		list["plugins"] = append(list["plugins"].([]map[string]any), map[string]any{
			"type": "bandwidth", "ingressRate": bps, "ingressBurst": bps / 8, "egressRate": bps, "egressBurst": bps / 8,
		})
	}
	raw, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	if n.conf, err = libcni.NetworkConfFromBytes(raw); err != nil {
		return nil, fmt.Errorf("the jobs' CNI network: %w", err)
	}
	n.cni = libcni.NewCNIConfigWithCacheDir(o.PluginDirs, "", nil)
	return n, nil
}

// prepareJobNetwork fills in the defaults of the options and checks them (the plugins and
// iptables are makeJobNetwork's).
func prepareJobNetwork(o NetworkOptions) (*jobNetwork, error) {
	if o.Name == "" {
		o.Name = DefaultNetworkName
	}
	if o.Subnet == "" {
		o.Subnet = DefaultNetworkSubnet
	}
	if len(o.DNS) == 0 {
		o.DNS = DefaultDNS
	}
	if len(o.PluginDirs) == 0 {
		o.PluginDirs = DefaultCNIPluginDirs
	}
	if o.RunDir == "" {
		o.RunDir = "/run/gpunex"
	}
	if !networkNamePattern.MatchString(o.Name) {
		return nil, fmt.Errorf("network name %q: use 1 to 15 characters of a-z, 0-9 and -", o.Name)
	}
	subnet, err := netip.ParsePrefix(o.Subnet)
	if err != nil || !subnet.Addr().Is4() || subnet.Bits() > 28 || subnet.Masked() != subnet {
		return nil, fmt.Errorf("jobs' subnet %q: give an IPv4 network such as %s (at most /28)", o.Subnet, DefaultNetworkSubnet)
	}
	for _, d := range o.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			return nil, fmt.Errorf("nameserver %q is not an IP address", d)
		}
	}
	blocked := make([]string, 0, len(o.Blocked))
	for _, b := range o.Blocked {
		p, err := netip.ParsePrefix(b)
		if err != nil {
			a, aerr := netip.ParseAddr(b)
			p, err = netip.PrefixFrom(a, 32), aerr
		}
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("blocked address %q: give an IPv4 address or network such as 192.0.2.10 or 198.51.100.0/24", b)
		}
		blocked = append(blocked, p.Masked().String())
	}
	o.Blocked = blocked
	n := &jobNetwork{opts: o, subnet: subnet, resolv: filepath.Join(o.RunDir, "resolv-"+o.Name+".conf")}
	if o.Policy == EgressDeny || o.Policy == "" {
		n.opts.Policy = EgressDeny
		return n, nil
	}
	if !ValidEgressPolicy(o.Policy) {
		return nil, fmt.Errorf("egress policy %q: use %s, %s or %s", o.Policy, EgressDeny, EgressPublicOnly, EgressAllow)
	}
	return n, nil
}

// Rule is one iptables rule of the jobs' network: the table, the chain and the
// arguments after "-A chain".
type Rule struct {
	Table string
	Chain string
	Args  []string
}

func (r Rule) String() string {
	return fmt.Sprintf("iptables -t %s -A %s %s", r.Table, r.Chain, strings.Join(r.Args, " "))
}

// chains are the names of the network's chains (iptables allows 28 characters).
func (n *jobNetwork) chains() (input, forward string) {
	return "GPUNEX-IN-" + n.opts.Name, "GPUNEX-FWD-" + n.opts.Name
}

// Rules returns the iptables rules that decide what jobs with egress reach, in order. The
// host's INPUT and FORWARD chains jump to them first:
//
//   - into the host: everything new from the jobs' subnet is refused (the host's
//     services on any of its addresses, the node's own ports); only replies to
//     connections the host opened pass;
//   - forwarded to the jobs' subnet: only replies to connections a job opened; nothing
//     new, so no job reaches another;
//   - forwarded from the jobs' subnet: refused to alwaysBlocked and the options' Blocked,
//     and to privateRanges unless the policy is EgressAllow; the rest is accepted, and masqueraded (NAT) on
//     its way out.
//
// Refusals answer "administratively prohibited", so a job fails at once instead of
// waiting for a timeout.
func (n *jobNetwork) Rules() []Rule {
	in, fwd := n.chains()
	s := n.subnet.String()
	reject := []string{"-j", "REJECT", "--reject-with", "icmp-admin-prohibited"}
	rules := []Rule{
		{"filter", "INPUT", []string{"-s", s, "-j", in}},
		{"filter", "FORWARD", []string{"-j", fwd}},
		{"filter", in, []string{"-s", s, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"}},
		{"filter", in, append([]string{"-s", s}, reject...)},
		{"filter", fwd, []string{"-d", s, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"}},
		{"filter", fwd, append([]string{"-d", s}, reject...)},
	}
	blocked := append(slices.Clone(alwaysBlocked), n.opts.Blocked...)
	if n.opts.Policy != EgressAllow {
		blocked = append(blocked, privateRanges...)
	}
	for _, b := range blocked {
		rules = append(rules, Rule{"filter", fwd, append([]string{"-s", s, "-d", b}, reject...)})
	}
	rules = append(rules, Rule{"filter", fwd, []string{"-s", s, "-j", "ACCEPT"}})
	// NAT for the whole subnet, one rule (rather than ptp's ipMasq, which adds a chain per
	// job: four iptables runs at each start).
	return append(rules, Rule{"nat", "POSTROUTING", []string{"-s", s, "!", "-d", s, "-j", "MASQUERADE"}})
}

// builtin tells whether a chain is one of iptables' own, which the network's rules are
// inserted into (and removed from) one by one.
func builtin(chain string) bool {
	return chain == "INPUT" || chain == "FORWARD" || chain == "POSTROUTING"
}

// install creates the network's chains (emptied if they exist), fills them, and puts the
// jumps first in INPUT and FORWARD; it also writes the jobs' resolv.conf. Running it
// again (another node, a restart) gives the same rules.
func (n *jobNetwork) install() error {
	n.installOnce.Do(func() {
		n.mu.Lock()
		// Watching starts first: the rules' own installation counts as a change, so the
		// first check runs in full.
		if w, err := watchFirewall(); err == nil {
			n.watch = w
		}
		n.installErr = n.installRules()
		n.wasInstalled = n.installErr == nil
		n.mu.Unlock()
		if n.installErr == nil {
			n.installErr = n.writeResolvConf()
		}
	})
	return n.installErr
}

// installed tells whether install has run (the rules are then expected in place).
func (n *jobNetwork) installed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.wasInstalled
}

// ensure checks that every rule of the set is in place, and installs the set again when
// one is missing (a firewall tool that flushed the tables): a job with egress must never
// run without them. It returns whether it had to.
//
// Where the firewall sends change notifications (nf_tables: firewallWatch), nothing is
// checked unless something changed it since the last check. One iptables-save is compared
// with the rules as iptables printed them right after they were installed (n.printed);
// where that could not be recorded, each rule is checked with iptables -C (a program run
// per rule: slower).
func (n *jobNetwork) ensure() (reinstalled bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.watch != nil && !n.watch.takeChanged() {
		return false, nil
	}
	reinstalled, err = n.check()
	if err != nil && n.watch != nil {
		n.watch.markChanged()
	}
	return reinstalled, err
}

func (n *jobNetwork) check() (reinstalled bool, err error) {
	if n.printed != nil {
		saved, err := savedRules()
		if err == nil {
			for line := range n.printed {
				if !saved[line] {
					return true, n.installRules()
				}
			}
			return false, nil
		}
	}
	for _, r := range n.Rules() {
		if iptables(append([]string{"-t", r.Table, "-C", r.Chain}, r.Args...)...) != nil {
			return true, n.installRules()
		}
	}
	return false, nil
}

// savedRules is the set of rule lines iptables-save prints (both tables).
func savedRules() (map[string]bool, error) {
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		return nil, err
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A ") {
			lines[l] = true
		}
	}
	return lines, nil
}

// recordPrinted keeps the network's rules as iptables-save prints them, once installed:
// the lines naming its chains, and its NAT rule.
func (n *jobNetwork) recordPrinted() {
	n.printed = nil
	saved, err := savedRules()
	if err != nil {
		return
	}
	in, fwd := n.chains()
	s := n.subnet.String()
	mine := map[string]bool{}
	for l := range saved {
		f := strings.Fields(l)
		if slices.Contains(f, in) || slices.Contains(f, fwd) ||
			(len(f) > 1 && f[1] == "POSTROUTING" && slices.Contains(f, s) && slices.Contains(f, "MASQUERADE")) {
			mine[l] = true
		}
	}
	if len(mine) == len(n.Rules()) {
		n.printed = mine
	}
}

func (n *jobNetwork) installRules() error {
	in, fwd := n.chains()
	for _, c := range []string{in, fwd} {
		if err := iptables("-t", "filter", "-N", c); err != nil && !strings.Contains(err.Error(), "exists") {
			return err
		}
		if err := iptables("-t", "filter", "-F", c); err != nil {
			return err
		}
	}
	for _, r := range n.Rules() {
		if builtin(r.Chain) {
			if iptables(append([]string{"-t", r.Table, "-C", r.Chain}, r.Args...)...) == nil {
				continue
			}
			if err := iptables(append([]string{"-t", r.Table, "-I", r.Chain, "1"}, r.Args...)...); err != nil {
				return err
			}
			continue
		}
		if err := iptables(append([]string{"-t", r.Table, "-A", r.Chain}, r.Args...)...); err != nil {
			return err
		}
	}
	n.recordPrinted()
	return nil
}

func (n *jobNetwork) writeResolvConf() error {
	var b strings.Builder
	b.WriteString("# written by gpunex for jobs with egress (jobs.dns)\n")
	for _, d := range n.opts.DNS {
		b.WriteString("nameserver " + d + "\n")
	}
	if err := os.MkdirAll(n.opts.RunDir, 0o755); err != nil {
		return err
	}
	tmp := n.resolv + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, n.resolv)
}

// close stops watching the firewall.
func (n *jobNetwork) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.watch != nil {
		n.watch.close()
		n.watch = nil
	}
	n.pins.close()
}

// Uninstall removes the network's jumps and chains (tests; a provider turning egress off
// keeps them harmlessly until the next reboot).
func (n *jobNetwork) Uninstall() error {
	in, fwd := n.chains()
	var errs []error
	for _, r := range n.Rules() {
		if builtin(r.Chain) {
			for iptables(append([]string{"-t", r.Table, "-D", r.Chain}, r.Args...)...) == nil {
			}
		}
	}
	for _, c := range []string{in, fwd} {
		iptables("-t", "filter", "-F", c)
		if err := iptables("-t", "filter", "-X", c); err != nil && !strings.Contains(err.Error(), "No chain") && !strings.Contains(err.Error(), "does not exist") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// connect connects a pinned network namespace to the jobs' network (the CNI plugins'
// ADD: veth, address, routes, bandwidth cap). install must have succeeded.
func (n *jobNetwork) connect(ctx context.Context, pin string) error {
	if _, err := n.cni.AddNetworkList(ctx, n.conf, n.runtimeConf(pin)); err != nil {
		return fmt.Errorf("connect the job's network (CNI): %w", err)
	}
	return nil
}

// runtimeConf names a job's attachment after its pin, which is unique on the host.
func (n *jobNetwork) runtimeConf(pin string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: filepath.Base(pin), NetNS: pin, IfName: "eth0"}
}

// detach takes a job's network down (the CNI plugins' DEL: its address, its NAT rules,
// its veth and bandwidth devices) and unpins its namespace. It may be called again.
func (n *jobNetwork) detach(ctx context.Context, pin string) error {
	conf := n.runtimeConf(pin)
	if _, err := os.Stat(pin); err != nil {
		conf.NetNS = "" // gone with a reboot: the plugins free what they can without it
	}
	err := n.cni.DelNetworkList(ctx, n.conf, conf)
	if uerr := n.pins.unpinNetns(pin); uerr != nil && !errors.Is(uerr, os.ErrNotExist) {
		err = errors.Join(err, uerr)
	}
	if err != nil {
		return fmt.Errorf("take the job's network down: %w", err)
	}
	return nil
}
