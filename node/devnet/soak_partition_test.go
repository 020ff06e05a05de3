//go:build linux

package devnet

import (
	"net"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestListenPorts: the partitions cut the ports of a node's loopback listen addresses,
// TCP and QUIC, each once.
func TestListenPorts(t *testing.T) {
	got := listenPorts([]string{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4002/quic-v1", "/ip4/127.0.0.1/udp/4002/quic-v1/webtransport", "/ip4/127.0.0.1/tcp/x"})
	want := []listenPort{{"tcp", 4001}, {"udp", 4002}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestPartitionCutsAndHeals: with a partition between two nodes' ports, one cannot reach
// the other (dialling from its listen port, as libp2p does) and the packets are counted;
// once healed it can again; the chain a crashed soak left is removed at the start, and the
// soak's own after its tear-down. Needs root and iptables.
func TestPartitionCutsAndHeals(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and iptables")
	}
	crashed := partitionChainPrefix + "4194399" // above Linux's largest pid: no such process
	if err := iptables("-N", crashed); err != nil {
		t.Fatal(err)
	}
	if err := iptables("-I", "OUTPUT", "-o", "lo", "-j", crashed); err != nil {
		t.Fatal(err)
	}
	pt := setUpPartitions()
	if iptables("-L", crashed, "-n") == nil {
		removeChain(crashed)
		t.Error("the chain of a crashed soak outlived the next soak's start")
	}
	defer pt.tearDown()
	if pt.unavailable != "" {
		t.Fatalf("partitions unavailable as root with iptables: %s", pt.unavailable)
	}
	a, b := listenTCP(t), listenTCP(t)
	if err := dialFrom(a, b); err != nil {
		t.Fatalf("before the partition: %v", err)
	}
	rules, err := pt.cut([]listenPort{{"tcp", a}, {"udp", a}}, []listenPort{{"tcp", b}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ends := range [][2]int{{a, b}, {b, a}} {
		if err, ok := dialFrom(ends[0], ends[1]).(net.Error); !ok || !err.Timeout() {
			t.Fatalf("port %d dialling port %d across the partition: %v, want a time-out", ends[0], ends[1], err)
		}
	}
	if err := pt.heal(rules); err != nil {
		t.Fatal(err)
	}
	if pt.dropped.Load() == 0 {
		t.Error("the partition counted no packet dropped")
	}
	if err := dialFrom(a, b); err != nil {
		t.Fatalf("after healing: %v", err)
	}
	pt.tearDown()
	if iptables("-L", pt.chain, "-n") == nil {
		t.Error("the chain outlived the tear-down")
	}
}

// listenTCP listens on a loopback port with SO_REUSEPORT, as libp2p does, and accepts
// until the test ends; it returns the port.
func listenTCP(t *testing.T) int {
	lc := net.ListenConfig{Control: reusePort}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// dialFrom connects from port from to port to, giving up after a second.
func dialFrom(from, to int) error {
	d := net.Dialer{Timeout: time.Second, Control: reusePort, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: from}}
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(to)))
	if err != nil {
		return err
	}
	return c.Close()
}

func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		if serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}
