package sandbox

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// forwardVerdict follows the jobs' forward chain as iptables would for a new connection
// from a job to dst: "REJECT" or "ACCEPT" from the first rule that matches.
func forwardVerdict(t *testing.T, n *jobNetwork, dst string) string {
	t.Helper()
	_, fwd := n.chains()
	ip := netip.MustParseAddr(dst)
	for _, r := range n.Rules() {
		if r.Chain != fwd || !slices.Contains(r.Args, "-s") {
			continue
		}
		if i := slices.Index(r.Args, "-d"); i >= 0 {
			p, err := netip.ParsePrefix(r.Args[i+1])
			if err != nil {
				t.Fatalf("rule %s: %v", r, err)
			}
			if !p.Contains(ip) {
				continue
			}
		}
		return r.Args[slices.Index(r.Args, "-j")+1]
	}
	t.Fatalf("no rule decides a connection to %s", dst)
	return ""
}

// TestEgressBlocksCloudAgents: cloud host agents at addresses outside the link-local range
// (Azure's WireServer 168.63.129.16, Alibaba's metadata service 100.100.100.200, which is in
// CGNAT space that "allow" opens) are refused under every policy, and so are the
// addresses a provider adds; a public address is reached (the control).
func TestEgressBlocksCloudAgents(t *testing.T) {
	for _, policy := range []string{EgressPublicOnly, EgressAllow} {
		n, err := prepareJobNetwork(NetworkOptions{Policy: policy, Blocked: []string{"203.0.113.7", "198.51.100.0/24"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, dst := range []string{"168.63.129.16", "100.100.100.200", "169.254.169.254", "203.0.113.7", "198.51.100.80"} {
			if v := forwardVerdict(t, n, dst); v != "REJECT" {
				t.Errorf("under %s a job reaches %s (%s)", policy, dst, v)
			}
		}
		if v := forwardVerdict(t, n, "203.0.113.8"); v != "ACCEPT" {
			t.Errorf("control: under %s a job should reach a public address: %s", policy, v)
		}
	}
	for _, bad := range []string{"not-an-address", "2001:db8::/32", "10.0.0.1/33"} {
		if _, err := prepareJobNetwork(NetworkOptions{Policy: EgressPublicOnly, Blocked: []string{bad}}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("a blocked address %q: %v, want an error naming it", bad, err)
		}
	}
}
