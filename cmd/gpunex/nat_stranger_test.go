//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/protocol"
)

// Strangers attacking the providers behind NAT of TestNATTraversal through the coordinator's
// relay, the one place where relayed paths are real (the adversary devnet runs on loopback,
// where no provider takes a relay slot). Each runs as this test binary started again in a
// namespace of its own on the public segment (TestNATStranger), so that the relay sees it
// at an address of its own, and writes what it got to a file the test reads.

// strangerEnv holds a stranger's orders (strangerOrders, JSON): set, the test binary is a
// stranger.
const strangerEnv = "GPUNEX_NAT_STRANGER"

type strangerOrders struct {
	// Mode is "hoard" (hold as many circuits to each provider as the relay gives, and open
	// again those closed) or "spend" (fresh keys, one after another, each opening job
	// streams to each provider until refused: the provider's proposal budgets).
	Mode      string   `json:"mode"`
	Relay     string   `json:"relay"` // the coordinator's address, /ip4/…/tcp/…/p2p/<id>
	Providers []string `json:"providers"`
	Out       string   `json:"out"` // where the stranger writes its strangerReport
}

// strangerReport is what a stranger got, by provider.
type strangerReport struct {
	// MostHeld is the most relayed connections held to it at once (hoard).
	MostHeld map[string]int `json:"most_held"`
	// Streams is how many job streams it opened, Refused how many of them were refused
	// for the budget of its network (spend).
	Streams map[string]int `json:"streams"`
	Refused map[string]int `json:"refused_network"`
}

// startStranger starts a stranger in a new namespace at addr (CIDR) on the public segment
// pub; the test stops it at its end.
func startStranger(t *testing.T, lab *netnsLab, pub, name, addr string, o strangerOrders) {
	t.Helper()
	ns := lab.ns(name)
	lab.link(ns, "eth0", addr, pub, "p-"+name, "")
	lab.in(pub, "ip", "link", "set", "p-"+name, "master", "br0")
	orders, _ := json.Marshal(o)
	logf, _ := os.Create(o.Out + ".log")
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestNATStranger$", "-test.v")
	cmd.Env = append(os.Environ(), strangerEnv+"="+string(orders))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
}

// readStranger reads what a stranger reported so far.
func readStranger(o strangerOrders) strangerReport {
	var r strangerReport
	if b, err := os.ReadFile(o.Out); err == nil {
		json.Unmarshal(b, &r)
	}
	return r
}

// TestNATStranger is a stranger of TestNATTraversal when strangerEnv is set; it runs until
// killed.
func TestNATStranger(t *testing.T) {
	raw := os.Getenv(strangerEnv)
	if raw == "" {
		t.Skip("a stranger for TestNATTraversal, started by it")
	}
	var o strangerOrders
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		t.Fatal(err)
	}
	relay, err := ma.NewMultiaddr(o.Relay)
	if err != nil {
		t.Fatal(err)
	}
	circuit := relay.Encapsulate(ma.StringCast("/p2p-circuit"))
	var mu sync.Mutex
	rep := strangerReport{MostHeld: map[string]int{}, Streams: map[string]int{}, Refused: map[string]int{}}
	go func() { // the report, written again twice a second
		for {
			mu.Lock()
			b, _ := json.Marshal(rep)
			mu.Unlock()
			os.WriteFile(o.Out+".tmp", b, 0o644)
			os.Rename(o.Out+".tmp", o.Out)
			time.Sleep(500 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for _, p := range o.Providers {
		id, err := peer.Decode(p)
		if err != nil {
			t.Fatal(err)
		}
		ai := peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{circuit}}
		workers := 1
		if o.Mode == "spend" {
			workers = 3 // spending together, so that the budget is never left to refill
		}
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if o.Mode == "hoard" {
					hoard(ai, func(n int) {
						mu.Lock()
						rep.MostHeld[p] = max(rep.MostHeld[p], n)
						mu.Unlock()
					})
				} else {
					spend(ai, func(refused bool) {
						mu.Lock()
						rep.Streams[p]++
						if refused {
							rep.Refused[p]++
						}
						mu.Unlock()
					})
				}
			}()
		}
	}
	wg.Wait()
}

// strangerHost is a libp2p host with a fresh key.
func strangerHost() host.Host {
	sk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	h, err := libp2p.New(libp2p.Identity(sk), libp2p.ListenAddrStrings("/ip4/0.0.0.0/tcp/0"))
	if err != nil {
		panic(err)
	}
	return h
}

// hoard keeps 16 identities (the relay's circuits per peer) each trying to hold a relayed
// connection to the provider, and reports how many are held at once.
func hoard(ai peer.AddrInfo, held func(int)) {
	hosts := make([]host.Host, 16)
	for i := range hosts {
		hosts[i] = strangerHost()
	}
	for {
		n := 0
		for _, h := range hosts {
			if h.Network().Connectedness(ai.ID) != network.Limited && h.Network().Connectedness(ai.ID) != network.Connected {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				h.Connect(ctx, ai)
				cancel()
			}
			// Relayed connections only: the provider may also dial a stranger's public
			// address itself (the hole punch's direct attempt), which takes no circuit.
			if slices.ContainsFunc(h.Network().ConnsToPeer(ai.ID), func(c network.Conn) bool { return c.Stat().Limited }) {
				n++
			}
		}
		held(n)
		time.Sleep(time.Second)
	}
}

// spend opens job streams to the provider through the relay, 40 per fresh identity, each
// with a frame that is no proposal: the provider takes it from the budgets of the peer and
// of its network before reading it.
func spend(ai peer.AddrInfo, opened func(refusedForNetwork bool)) {
	for {
		h := strangerHost()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := h.Connect(ctx, ai); err != nil {
			time.Sleep(time.Second) // refused a circuit: ask again in a moment
		} else {
			for range 40 {
				s, err := h.NewStream(network.WithAllowLimitedConn(ctx, "stranger"), ai.ID, libp2pprotocol.ID(protocol.JobProtocol))
				if err != nil {
					break
				}
				s.SetDeadline(time.Now().Add(5 * time.Second))
				protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "spend"})
				s.CloseWrite()
				var m protocol.JobMsg
				protocol.ReadJSONFrame(bufio.NewReader(s), 64<<10, &m)
				s.Close()
				opened(strings.Contains(m.Reason, "network"))
			}
		}
		cancel()
		h.Close()
		time.Sleep(200 * time.Millisecond)
	}
}

// strangersAttack starts two hoarders against the provider behind the symmetric NAT (each
// from its own address; the relay takes at most 8 connections from one) and a spender
// against every provider behind NAT, through the coordinator's relay at relay, and waits
// until the attack is under way: circuits held to the first and 120 job streams opened for
// each provider (one network's budget of a minute, jobs.proposals_per_minute four times
// over; before the relay bounded circuits per network, the hoarders left the spender none
// to the first).
func strangersAttack(t *testing.T, lab *netnsLab, pub, dir, relay, relayedOnly string, providers []string) (hoarders []strangerOrders, spender strangerOrders) {
	t.Helper()
	for i, addr := range []string{"11.0.0.6/24", "11.0.0.8/24"} {
		o := strangerOrders{Mode: "hoard", Relay: relay, Providers: []string{relayedOnly}, Out: filepath.Join(dir, fmt.Sprintf("hoarder%d.json", i+1))}
		startStranger(t, lab, pub, fmt.Sprintf("hoard%d", i+1), addr, o)
		hoarders = append(hoarders, o)
	}
	spender = strangerOrders{Mode: "spend", Relay: relay, Providers: providers, Out: filepath.Join(dir, "spender.json")}
	startStranger(t, lab, pub, "spend", "11.0.0.7/24", spender)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		held, streams := 0, 0
		for _, h := range hoarders {
			held += readStranger(h).MostHeld[relayedOnly]
		}
		for _, n := range readStranger(spender).Streams {
			streams += n
		}
		if held > 0 && streams >= 120*len(providers) {
			return hoarders, spender
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, o := range append(hoarders, spender) {
				l, _ := os.ReadFile(o.Out + ".log")
				fmt.Fprintf(&logs, "%s: %+v\n%s\n", o.Mode, readStranger(o), tail(string(l), 1500))
			}
			t.Fatalf("the strangers' attack did not get under way:\n%s", logs.String())
		}
	}
}

// checkStrangers asserts what the strangers got: at most two relayed connections held at
// once to a provider from each hoarder's address (the relay's bound per network).
func checkStrangers(t *testing.T, hoarders []strangerOrders, spender strangerOrders, names map[string]string) {
	t.Helper()
	for i, o := range hoarders {
		h := readStranger(o)
		for _, p := range o.Providers {
			if h.MostHeld[p] > 2 {
				t.Errorf("a stranger on one address held %d relayed connections at once to %s", h.MostHeld[p], names[p])
			}
			t.Logf("hoarder %d against %s: held %d relayed connections at once", i+1, names[p], h.MostHeld[p])
		}
	}
	s := readStranger(spender)
	for _, p := range spender.Providers {
		t.Logf("spender against %s: opened %d job streams through the relay, %d refused for its own network's budget", names[p], s.Streams[p], s.Refused[p])
	}
}
