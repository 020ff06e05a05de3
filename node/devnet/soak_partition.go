package devnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The soak's network partitions. Every node is a process on 127.0.0.1, told apart only by
// its ports: a partition between two nodes is a set of iptables rules dropping the packets
// that go from one's libp2p ports to the other's, both ways, TCP and UDP (QUIC). libp2p
// dials from its listen port (TCP with SO_REUSEPORT, QUIC from its one socket), so the
// source port names the sender as the destination port names the receiver.

// partitionChainPrefix names the chain of a soak's partitions, hooked from OUTPUT for the
// loopback interface: GPUNEX-SOAK-<pid>, one per soak process, so that two soaks on one
// machine (make test beside make soak) keep their own rules.
const partitionChainPrefix = "GPUNEX-SOAK-"

// listenPort is one port a node's libp2p host listens on.
type listenPort struct {
	Proto string // tcp or udp
	Port  int
}

// listenPorts reads the ports of a node's loopback listen addresses (/ip4/127.0.0.1/tcp/N,
// /ip4/127.0.0.1/udp/N/quic-v1); a port two addresses share is listed once.
func listenPorts(addrs []string) []listenPort {
	var out []listenPort
	seen := map[listenPort]bool{}
	for _, a := range addrs {
		parts := strings.Split(strings.Trim(a, "/"), "/")
		if len(parts) < 4 || parts[2] != "tcp" && parts[2] != "udp" {
			continue
		}
		port, err := strconv.Atoi(parts[3])
		if err != nil {
			continue
		}
		lp := listenPort{Proto: parts[2], Port: port}
		if !seen[lp] {
			seen[lp] = true
			out = append(out, lp)
		}
	}
	return out
}

// partitions applies and heals the soak's partitions.
type partitions struct {
	chain string
	// unavailable says why partitions cannot be applied here (no iptables, not root); ""
	// when they can.
	unavailable string
	next        atomic.Int64
	// dropped counts the packets the healed partitions dropped.
	dropped atomic.Int64
	mu      sync.Mutex // one iptables change at a time
}

// setUpPartitions removes the chains that soaks which did not end left (their process is
// gone), and creates this soak's; without iptables, or as a user who may not change it,
// partitions are reported as not applied.
func setUpPartitions() *partitions {
	pt := &partitions{chain: partitionChainPrefix + strconv.Itoa(os.Getpid())}
	if _, err := exec.LookPath("iptables"); err != nil {
		pt.unavailable = "no iptables here"
		return pt
	}
	if os.Geteuid() != 0 {
		pt.unavailable = "iptables needs root"
		return pt
	}
	removeLeftChains()
	removeChain(pt.chain)
	if err := iptables("-N", pt.chain); err != nil {
		pt.unavailable = err.Error()
		return pt
	}
	if err := iptables("-I", "OUTPUT", "-o", "lo", "-j", pt.chain); err != nil {
		pt.unavailable = err.Error()
		iptables("-X", pt.chain)
	}
	return pt
}

// tearDown removes the soak's chain, healing any partition left.
func (pt *partitions) tearDown() { removeChain(pt.chain) }

// removeLeftChains removes the chains of soaks whose process is gone: they crashed or were
// killed before their tear-down.
func removeLeftChains() {
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		chain, ok := strings.CutPrefix(line, "-N ")
		pid, isSoak := strings.CutPrefix(chain, partitionChainPrefix)
		if !ok || !isSoak {
			continue
		}
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); errors.Is(err, os.ErrNotExist) {
			removeChain(chain)
		}
	}
}

// removeChain unhooks, empties and deletes a chain; each step fails harmlessly when there
// is nothing to undo.
func removeChain(chain string) {
	for iptables("-D", "OUTPUT", "-o", "lo", "-j", chain) == nil {
	}
	iptables("-F", chain)
	iptables("-X", chain)
}

// cut drops the packets between two nodes' ports; it returns the rules to pass to heal.
func (pt *partitions) cut(a, b []listenPort) ([][]string, error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	tag := fmt.Sprintf("soak-partition-%d", pt.next.Add(1))
	var rules [][]string
	for _, pa := range a {
		for _, pb := range b {
			if pa.Proto != pb.Proto {
				continue
			}
			for _, ends := range [][2]int{{pa.Port, pb.Port}, {pb.Port, pa.Port}} {
				rules = append(rules, []string{"-p", pa.Proto, "--sport", strconv.Itoa(ends[0]), "--dport", strconv.Itoa(ends[1]),
					"-m", "comment", "--comment", tag, "-j", "DROP"})
			}
		}
	}
	if len(rules) == 0 {
		return nil, errors.New("the two nodes share no protocol to cut")
	}
	for i, r := range rules {
		if err := iptables(append([]string{"-A", pt.chain}, r...)...); err != nil {
			pt.remove(rules[:i])
			return nil, err
		}
	}
	return rules, nil
}

// heal removes a partition's rules, counting the packets they dropped.
func (pt *partitions) heal(rules [][]string) error {
	if len(rules) == 0 {
		return nil
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	tag := rules[0][len(rules[0])-3]
	if out, err := exec.Command("iptables", "-w", "-L", pt.chain, "-v", "-x", "-n").Output(); err == nil {
		pt.dropped.Add(droppedPackets(string(out), tag))
	}
	return pt.remove(rules)
}

func (pt *partitions) remove(rules [][]string) error {
	var errs []error
	for _, r := range rules {
		errs = append(errs, iptables(append([]string{"-D", pt.chain}, r...)...))
	}
	return errors.Join(errs...)
}

// droppedPackets sums the packet counters of the rules tagged tag in `iptables -L -v -x -n`.
func droppedPackets(listing, tag string) int64 {
	var n int64
	for _, line := range strings.Split(listing, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.Contains(line, "/* "+tag+" */") {
			continue
		}
		if v, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			n += v
		}
	}
	return n
}

// iptables runs iptables, waiting for the lock that other programs (containerd's network
// plugins) may hold.
func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// partition cuts the fault's two nodes apart for its time, then heals them.
func (s *soak) partition(ctx context.Context, f Fault) {
	if s.part.unavailable != "" {
		return
	}
	rules, err := s.part.cut(s.ports[f.Target], s.ports[f.Peer])
	if err != nil {
		s.breaks("partition", fmt.Sprintf("%s from %s: %v", f.Target, f.Peer, err))
		return
	}
	s.count(s.report.Applied, f.Kind)
	sleepCtx(context.WithoutCancel(ctx), f.For)
	if err := s.part.heal(rules); err != nil {
		s.breaks("partition", fmt.Sprintf("healing %s from %s: %v", f.Target, f.Peer, err))
	}
}
