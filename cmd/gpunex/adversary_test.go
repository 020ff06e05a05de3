//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	varint "encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/devnet"
	"github.com/gpunex/gpunex/protocol"
)

// The scripted adversary: hostile peers attack a devnet of real gpunex processes, one
// scenario per stream and topic, while honest operations go on. Each scenario measures
// the victim process (CPU, resident memory), counts the honest operations that still
// succeeded, and asserts what the attacker got: nothing over-charged or mis-scored, the
// victim's ledger growth bounded, gossip attackers graylisted. `make test` runs each
// scenario for -adversary.duration (2 s); `make adversary` runs them for 30 s and prints
// the table. The attackers listen on 127.0.0.2, a network of their own: only the host's
// own address (127.0.0.1) is exempt from per-network budgets.

var adversaryDuration = flag.Duration("adversary.duration", 2*time.Second, "how long each adversary scenario attacks")

// autonatPerNetwork is p2p.AutoNATPerNetwork (node/internal is out of this package's reach):
// the AutoNAT requests one network gets served a minute.
const autonatPerNetwork = 30

// Budgets every scenario must keep the victim within.
const (
	victimCPUBudget = 1.0       // cores, on average over the attack
	victimRSSBudget = 512 << 20 // bytes
	honestFloor     = 0.9       // share of honest operations that must succeed
)

// advEnv is the devnet under attack.
type advEnv struct {
	nodes   map[string]devnet.Node
	clients map[string]*api.Client
	addrs   map[string][]ma.Multiaddr
}

func newAdvEnv(t *testing.T, f devnet.File) *advEnv {
	t.Helper()
	e := &advEnv{nodes: map[string]devnet.Node{}, clients: map[string]*api.Client{}, addrs: map[string][]ma.Multiaddr{}}
	for _, n := range f.Nodes {
		cl, err := api.NewClient(config.Home{Dir: n.Home})
		if err != nil {
			t.Fatal(err)
		}
		st, err := cl.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range st.Addrs {
			// TCP only: the attacker's connections then leave from 127.0.0.2, its listen
			// address (a QUIC dial would leave from 127.0.0.1, the host's own).
			if m, err := ma.NewMultiaddr(a); err == nil && strings.Contains(a, "/tcp/") {
				e.addrs[n.Name] = append(e.addrs[n.Name], m)
			}
		}
		e.nodes[n.Name], e.clients[n.Name] = n, cl
	}
	return e
}

func (e *advEnv) id(name string) peer.ID {
	id, _ := peer.Decode(e.nodes[name].PeerID)
	return id
}

// attacker is a hostile libp2p host on 127.0.0.2 that checks nothing.
type attacker struct {
	t    *testing.T
	e    *advEnv
	h    host.Host
	key  crypto.PrivKey
	ps   *pubsub.PubSub
	tops map[string]*pubsub.Topic
}

func newAttacker(t *testing.T, e *advEnv, connect ...string) *attacker {
	t.Helper()
	return newAttackerOn(t, e, "127.0.0.2", connect...)
}

// newAttackerOn is an attacker listening, and so connecting, from ip.
func newAttackerOn(t *testing.T, e *advEnv, ip string, connect ...string) *attacker {
	t.Helper()
	sk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	return newAttackerKeyed(t, e, sk, ip, connect...)
}

// newAttackerKeyed is an attacker with the identity sk (a node's own, turned hostile).
func newAttackerKeyed(t *testing.T, e *advEnv, sk crypto.PrivKey, ip string, connect ...string) *attacker {
	t.Helper()
	h, err := libp2p.New(libp2p.Identity(sk), libp2p.ListenAddrStrings("/ip4/"+ip+"/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	a := &attacker{t: t, e: e, h: h, key: sk, tops: map[string]*pubsub.Topic{}}
	for _, name := range connect {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.Connect(ctx, peer.AddrInfo{ID: e.id(name), Addrs: e.addrs[name]})
		cancel()
		if err != nil {
			t.Fatalf("attacker connect to %s: %v", name, err)
		}
	}
	return a
}

func (a *attacker) close() { a.h.Close() }

// sybil attacks a victim's stream protocol with a fresh identity every perIdentity streams,
// all from the attackers' network, until ctx ends; each gets each stream, which is closed
// after it. It returns how many streams were opened.
func sybil(ctx context.Context, t *testing.T, e *advEnv, victim, proto string, perIdentity int, each func(a *attacker, s network.Stream)) int64 {
	var n int64
	for ctx.Err() == nil {
		a := newAttacker(t, e)
		for range perIdentity {
			s, err := a.stream(ctx, victim, proto)
			if err != nil {
				break
			}
			each(a, s)
			s.Close()
			n++
		}
		a.close()
	}
	return n
}

// stream opens a stream to a victim.
func (a *attacker) stream(ctx context.Context, victim, proto string) (network.Stream, error) {
	a.h.Peerstore().AddAddrs(a.e.id(victim), a.e.addrs[victim], time.Hour)
	return a.h.NewStream(ctx, a.e.id(victim), libp2pprotocol.ID(proto))
}

// publish sends raw on a topic, joining it first.
func (a *attacker) publish(ctx context.Context, topic string, raw []byte) {
	if a.ps == nil {
		ps, err := pubsub.NewGossipSub(context.Background(), a.h, pubsub.WithFloodPublish(true))
		if err != nil {
			a.t.Fatal(err)
		}
		a.ps = ps
	}
	tp := a.tops[topic]
	if tp == nil {
		var err error
		if tp, err = a.ps.Join(topic); err != nil {
			a.t.Fatal(err)
		}
		a.tops[topic] = tp
		for i := 0; i < 50 && len(tp.ListPeers()) == 0; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
	tp.Publish(ctx, raw)
}

func (a *attacker) seal(kind protocol.Kind, payload any) []byte {
	raw, err := protocol.Seal(kind, payload, a.key)
	if err != nil {
		a.t.Fatal(err)
	}
	return raw
}

// procSample is a victim process's CPU time and resident memory.
type procSample struct {
	cpu time.Duration
	rss int64
}

func sampleProc(pid int) (procSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, err
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	rssPages, _ := strconv.ParseInt(f[21], 10, 64)
	const ticks = 100 // USER_HZ
	return procSample{cpu: time.Duration(utime+stime) * time.Second / ticks, rss: rssPages * int64(os.Getpagesize())}, nil
}

// scenario is one attack.
type scenario struct {
	name   string
	victim string
	// attack runs until ctx ends and returns how many hostile operations it made.
	attack func(ctx context.Context, t *testing.T, e *advEnv) int64
	// honest is one honest operation.
	honest func(ctx context.Context, e *advEnv) error
	// check asserts on the victim after the attack and says what the attacker got.
	check func(t *testing.T, e *advEnv, ops int64) string
}

type advRow struct {
	name, victim  string
	rate          float64
	cpu           float64
	rss           int64
	honestOK, all int64
	penalty       string
}

func (e *advEnv) run(t *testing.T, sc scenario) advRow {
	pid := e.nodes[sc.victim].PID
	ctx, cancel := context.WithTimeout(context.Background(), *adversaryDuration)
	defer cancel()
	before, err := sampleProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	var peak atomic.Int64
	var honestOK, honestAll atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the victim's memory, sampled
		defer wg.Done()
		for ctx.Err() == nil {
			if s, err := sampleProc(pid); err == nil && s.rss > peak.Load() {
				peak.Store(s.rss)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	go func() { // honest traffic
		defer wg.Done()
		for ctx.Err() == nil {
			octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := sc.honest(octx, e)
			ocancel()
			honestAll.Add(1)
			if err == nil {
				honestOK.Add(1)
			} else if ctx.Err() == nil {
				t.Logf("honest operation failed: %v", err)
			}
			time.Sleep(700 * time.Millisecond) // within an honest renter's 120 wallet requests a minute
		}
	}()
	t0 := time.Now()
	ops := sc.attack(ctx, t, e)
	<-ctx.Done()
	wall := time.Since(t0)
	wg.Wait()
	after, err := sampleProc(pid)
	if err != nil {
		t.Fatalf("the victim %s is gone: %v", sc.victim, err)
	}
	row := advRow{name: sc.name, victim: sc.victim, rate: float64(ops) / wall.Seconds(), cpu: float64(after.cpu-before.cpu) / float64(wall),
		rss: max(peak.Load(), after.rss), honestOK: honestOK.Load(), all: honestAll.Load()}
	row.penalty = sc.check(t, e, ops)
	if row.cpu > victimCPUBudget {
		t.Errorf("%s: the victim used %.0f%% of a core, over the budget of %.0f%%", sc.name, row.cpu*100, victimCPUBudget*100)
	}
	if row.rss > victimRSSBudget {
		t.Errorf("%s: the victim's resident memory reached %d MiB, over the budget of %d MiB", sc.name, row.rss>>20, victimRSSBudget>>20)
	}
	if row.all == 0 || float64(row.honestOK) < honestFloor*float64(row.all) {
		t.Errorf("%s: only %d of %d honest operations succeeded", sc.name, row.honestOK, row.all)
	}
	return row
}

// TestAdversary runs every scenario against one devnet and prints the table.
func TestAdversary(t *testing.T) {
	if testing.Short() {
		t.Skip("a devnet of real processes")
	}
	dir := t.TempDir()
	dev, _, f := startDevnet(t, dir, "--providers", "2", "--outage", "none")
	t.Cleanup(func() { dev.Process.Signal(os.Interrupt); dev.Wait() })
	e := newAdvEnv(t, f)
	var rows []advRow
	// Data in, shells, job tunnels: adversary_input_test.go, adversary_exec_test.go, adversary_tunnel_test.go.
	scenarios := append(append(append(adversaryScenarios(), inputScenarios()...), execScenarios()...), tunnelScenarios()...)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { rows = append(rows, e.run(t, sc)) })
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nadversary: %s per scenario; budgets: victim CPU <= %.0f%% of a core, RSS <= %d MiB, honest operations >= %.0f%%\n",
		*adversaryDuration, victimCPUBudget*100, victimRSSBudget>>20, honestFloor*100)
	fmt.Fprintf(&b, "%-22s %-12s %12s %9s %9s %10s  %s\n", "SCENARIO", "VICTIM", "ATTACK/S", "CPU %", "RSS MiB", "HONEST OK", "ATTACKER GOT")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-22s %-12s %12.1f %9.1f %9d %10s  %s\n", r.name, r.victim, r.rate, r.cpu*100, r.rss>>20, fmt.Sprintf("%d/%d", r.honestOK, r.all), r.penalty)
	}
	fmt.Print(b.String())
	t.Log(b.String())
}

// Honest operations.

func honestSearch(ctx context.Context, e *advEnv) error {
	rows, err := e.clients["renter-1"].Search(ctx, nil)
	if err == nil && len(rows) == 0 {
		err = fmt.Errorf("search found no offer")
	}
	return err
}

// honestBalance asks the coordinator for the renter's balance (the wallet stream).
func honestBalance(ctx context.Context, e *advEnv) error {
	_, err := e.clients["renter-1"].Balance(ctx, "")
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func adversaryScenarios() []scenario {
	return []scenario{
		greedyScenario(),
		stalledStartScenario(), // stall_test.go
		forgedNetworkScenario(),
		forgedCatalogueScenario(),
		stingyScenario(), // adversary_stingy_test.go
		{
			// Junk on every topic, records only their sender could have made.
			name: "gossip-junk", victim: "renter-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				a := newAttacker(t, e, "renter-1", "coordinator")
				t.Cleanup(a.close)
				gossipAttacker = a
				now := time.Now().UTC()
				far := a.seal(protocol.KindScore, protocol.ScoreRecord{Version: protocol.ScoreVersion, Coordinator: a.h.ID().String(),
					Provider: a.h.ID().String(), Seq: 1, IssuedAt: now.Add(48 * time.Hour), ExpiresAt: now.Add(49 * time.Hour)})
				var n int64
				for ctx.Err() == nil {
					for _, topic := range []string{protocol.OffersTopic, protocol.ModelTopic("H100-80GB"), protocol.RevocationsTopic, protocol.ScoresTopic, protocol.MarketTopic, protocol.ModelsTopic} {
						a.publish(ctx, topic, []byte("junk "+randomHex(8)))
						n++
					}
					a.publish(ctx, protocol.ScoresTopic, far)
					n++
					time.Sleep(10 * time.Millisecond)
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				g, err := graylisting(e, gossipAttacker.h.ID(), true)
				if err != nil || !g.Known || g.Score > -1000 {
					t.Errorf("the junk gossiper is not graylisted: %+v %v", g, err)
				}
				return fmt.Sprintf("graylisted, score %.0f", g.Score)
			},
		},
		{
			// A real provider's offer, replayed as fast as the link goes: each copy is the
			// record the victim holds already, so it changes nothing and costs the victim
			// one cached check.
			name: "replayed-offer", victim: "renter-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				a := newAttacker(t, e, "renter-1")
				defer a.close()
				row, rec := anOffer(ctx, t, e)
				replayOver0 = nodeMetric(t, e, "renter-1", "gpunex_gossip_over_budget_total")
				replayedOffer = row
				replayer = a.h.ID()
				var n int64
				for ctx.Err() == nil {
					a.publish(ctx, protocol.ModelTopic(row.Model), rec.Raw)
					n++
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				rows, _ := e.clients["renter-1"].Search(context.Background(), url.Values{})
				for _, r := range rows {
					if r.ID == replayedOffer.ID && r.PriceUSDC != replayedOffer.PriceUSDC {
						t.Errorf("the replayed offer changed the price shown: %s, was %s", r.PriceUSDC, replayedOffer.PriceUSDC)
					}
				}
				// Past its budget (a burst of 4,000, then 2,000 a minute), each copy is rejected;
				// the victim's view of scores is refreshed every 5 s (p2p.ScoreInspectEvery).
				// Copies the victim's validation queue dropped (a victim slower than the
				// attacker) cost the attacker nothing, and the victim little: the score is
				// checked when copies went past the budget there.
				over := nodeMetric(t, e, "renter-1", "gpunex_gossip_over_budget_total") - replayOver0
				g, _ := graylisting(e, replayer, over > 100)
				if over > 100 && g.Score > -1000 {
					t.Errorf("%d copies of one offer, %.0f past the budget at the victim, and the replayer's score is still %.0f", ops, over, g.Score)
				}
				return fmt.Sprintf("%d copies of one offer: nothing changed; %.0f past the budget at the victim; score %.0f", ops, over, g.Score)
			},
		},
		{
			// A real provider's offer sprayed on the topics of models it does not offer, to
			// reach the renters of every model: each copy is rejected before the book, and
			// costs its sender.
			name: "offer-on-wrong-topics", victim: "renter-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				a := newAttacker(t, e, "renter-1")
				t.Cleanup(a.close)
				row, rec := anOffer(ctx, t, e)
				sprayer = a.h.ID()
				sprayedModels = map[string]bool{}
				for _, g := range rec.Offer.GPUs {
					sprayedModels[g.Model] = true
				}
				var others []string
				for _, m := range protocol.FirstModels().Models {
					if !sprayedModels[m.Model] {
						others = append(others, protocol.ModelTopic(m.Model))
					}
				}
				sprayedProvider = row.Provider
				var n int64
				for ctx.Err() == nil {
					a.publish(ctx, others[n%int64(len(others))], rec.Raw)
					n++
					time.Sleep(time.Millisecond)
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				wrong := nodeMetric(t, e, "renter-1", `gpunex_records_rejected_total{kind="offer",reason="wrong_topic",source="gossip"}`)
				if wrong == 0 {
					t.Errorf("%d offers on the wrong topics, none counted as such", ops)
				}
				g, _ := graylisting(e, sprayer, true)
				if g.Score > -1000 {
					t.Errorf("%d offers sprayed on the wrong topics, and the sprayer's score is still %.0f", ops, g.Score)
				}
				for _, m := range protocol.FirstModels().Models {
					if sprayedModels[m.Model] {
						continue
					}
					rows, _ := e.clients["renter-1"].Search(context.Background(), url.Values{"model": {m.Model}, "unbenchmarked": {"true"}})
					for _, r := range rows {
						if r.Provider == sprayedProvider {
							t.Errorf("the sprayed offer is listed under %s, which it does not offer", m.Model)
						}
					}
				}
				return fmt.Sprintf("%.0f of %d rejected as wrong_topic; graylisted, score %.0f", wrong, ops, g.Score)
			},
		},
		{
			// A fresh identity every few messages: each pays its own penalty; the victim's
			// cost stays bounded.
			name: "gossip-sybil", victim: "renter-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				var n int64
				for ctx.Err() == nil {
					a := newAttacker(t, e, "renter-1")
					for range 4 {
						a.publish(ctx, protocol.ModelTopic("H100-80GB"), []byte("junk "+randomHex(8)))
						n++
					}
					sybils = append(sybils, a.h.ID())
					time.Sleep(50 * time.Millisecond)
					a.close()
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				graylisted := 0
				// Past one score inspection (p2p.ScoreInspectEvery, 5 s) after the attack.
				for wait := time.Now().Add(8 * time.Second); graylisted == 0 && time.Now().Before(wait); time.Sleep(200 * time.Millisecond) {
					for _, id := range sybils {
						if g, err := e.clients["renter-1"].Gossip(context.Background(), id.String()); err == nil && g.Known && g.Score < 0 {
							graylisted++
						}
					}
				}
				if graylisted == 0 {
					t.Errorf("none of %d identities was penalised", len(sybils))
				}
				return fmt.Sprintf("%d of %d identities penalised", graylisted, len(sybils))
			},
		},
		{
			// Identities rotating to ask the coordinator for 64 MiB bench-net downloads.
			name: "bench-net-download", victim: "coordinator", honest: honestBalance,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				return sybil(ctx, t, e, "coordinator", protocol.BenchNetProtocol, 1, func(a *attacker, s network.Stream) {
					protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "down", Size: protocol.MaxBenchTransfer})
					if got, _ := io.Copy(io.Discard, io.LimitReader(s, protocol.MaxBenchTransfer)); got == protocol.MaxBenchTransfer {
						benchServed.Add(got)
					}
				})
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				// The network's budget: 512 MiB at once, then 2 GiB an hour.
				limit := int64(512<<20) + int64(adversaryDuration.Hours()*float64(2<<30)) + protocol.MaxBenchTransfer
				if benchServed.Load() > limit {
					t.Errorf("the coordinator served %d MiB of bench-net downloads to one network, over its budget of %d MiB", benchServed.Load()>>20, limit>>20)
				}
				return fmt.Sprintf("%d MiB served of %d asked", benchServed.Load()>>20, ops*protocol.MaxBenchTransfer>>20)
			},
		},
		{
			// Identities rotating to fill the review queue with signed applications.
			name: "apply-flood", victim: "coordinator", honest: honestBalance,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				return sybil(ctx, t, e, "coordinator", protocol.ApplyProtocol, 1, func(a *attacker, s network.Stream) {
					app := protocol.Application{Version: protocol.ApplicationVersion, ID: randomHex(6), Provider: a.h.ID().String(), Seq: 1,
						IssuedAt: time.Now().UTC(), Name: "Sybil", Email: "sybil@example.org",
						GPUs: []protocol.ApplicationGPU{{Model: "H100-80GB", Count: 8, HostRAMGB: 1024, UpGbps: 10, DownGbps: 10, Availability: "24/7",
							Location: protocol.Location{City: "Lyon", Country: "FR", Region: "eu-west"}}}, CommitmentMonths: 12}
					protocol.WriteJSONFrame(s, protocol.ApplyRequest{Op: "submit", Record: a.seal(protocol.KindApplication, app)})
					var resp protocol.ApplyResponse
					protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxApplyFrame, &resp)
				})
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				apps, err := e.clients["coordinator"].Applications(context.Background(), "pending", "")
				if err != nil {
					t.Fatal(err)
				}
				devnetPeers := map[string]bool{}
				for _, n := range e.nodes {
					devnetPeers[n.PeerID] = true
				}
				sybil := 0
				for _, a := range apps {
					if !devnetPeers[a.Provider] {
						sybil++
					}
				}
				// The network's budget: 40 at once, then 40 an hour.
				if limit := 40 + int(adversaryDuration.Hours()*40) + 1; sybil > limit {
					t.Errorf("%d sybil applications queued, over the network's budget of %d", sybil, limit)
				}
				return fmt.Sprintf("%d of %d applications queued", sybil, ops)
			},
		},
		{
			// Identities rotating to make the coordinator ask Solana about made-up deposits,
			// and read balances.
			name: "wallet-claims", victim: "coordinator", honest: honestBalance,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				return sybil(ctx, t, e, "coordinator", protocol.WalletProtocol, 5, func(a *attacker, s network.Stream) {
					sig := make([]byte, 64)
					rand.Read(sig)
					protocol.WriteJSONFrame(s, protocol.WalletRequest{Op: "claim", Signature: base58(sig)})
					var resp protocol.WalletResponse
					protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxWalletResponse, &resp)
					if !strings.Contains(resp.Error, "slow down") {
						claimsServed.Add(1)
					}
				})
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				// The network's claim budget: 80 at once, then 40 a minute.
				if limit := int64(80 + adversaryDuration.Minutes()*40 + 1); claimsServed.Load() > limit {
					t.Errorf("%d claims reached the Solana RPC, over the network's budget of %d", claimsServed.Load(), limit)
				}
				return fmt.Sprintf("%d of %d claims served", claimsServed.Load(), ops)
			},
		},
		{
			// Job reports from a fresh key: a receipt ending in 2100, a lease with a throwaway
			// renter, a report in a real provider's name.
			name: "forged-reports", victim: "coordinator", honest: honestBalance,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				jobsBefore = provider1Jobs(e)
				a := newAttacker(t, e)
				defer a.close()
				var n int64
				for ctx.Err() == nil {
					for _, r := range forgedReports(a, e) {
						s, err := a.stream(ctx, "coordinator", protocol.JobReportProtocol)
						if err != nil {
							continue
						}
						protocol.WriteJSONFrame(s, r)
						var answer map[string]string
						protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxJobReportAnswer, &answer)
						if answer["ok"] == "true" {
							reportsTaken.Add(1)
						}
						s.Close()
						n++
					}
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				if reportsTaken.Load() != 0 {
					t.Errorf("%d forged reports were taken", reportsTaken.Load())
				}
				// The score's job count only decays: no forged report adds to it.
				if after := provider1Jobs(e); after > jobsBefore+0.001 {
					t.Errorf("provider-1's completion went from %.3f to %.3f jobs on forged reports", jobsBefore, after)
				}
				return fmt.Sprintf("%d of %d reports taken, no score moved", reportsTaken.Load(), ops)
			},
		},
		{
			// Frames announcing a gigabyte, on every coordinator protocol.
			name: "oversized-frames", victim: "coordinator", honest: honestBalance,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				a := newAttacker(t, e)
				defer a.close()
				junk := make([]byte, 64<<10)
				var n int64
				for ctx.Err() == nil {
					for _, p := range []string{protocol.ApplyProtocol, protocol.WalletProtocol, protocol.JobReportProtocol, protocol.BenchNetProtocol} {
						s, err := a.stream(ctx, "coordinator", p)
						if err != nil {
							continue
						}
						s.SetDeadline(time.Now().Add(300 * time.Millisecond))
						s.Write(varint.AppendUvarint(nil, 1<<30))
						var sent int64
						for sent < 4<<20 {
							k, err := s.Write(junk)
							sent += int64(k)
							if err != nil {
								break
							}
						}
						oversizedBytes.Add(sent)
						s.Reset()
						n++
					}
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				if ops > 0 && oversizedBytes.Load()/ops > 4<<20 {
					t.Errorf("the victim took %d KiB of each oversized frame", oversizedBytes.Load()/ops>>10)
				}
				return fmt.Sprintf("%d frames of 1 GiB announced, %d KiB each taken in before the victim stopped reading", ops, oversizedBytes.Load()/max(ops, 1)>>10)
			},
		},
		{
			// One bench-net stream asking again and again.
			name: "bench-net-loop", victim: "coordinator", honest: honestBalance,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				a := newAttacker(t, e)
				defer a.close()
				var n int64
				for ctx.Err() == nil {
					s, err := a.stream(ctx, "coordinator", protocol.BenchNetProtocol)
					if err != nil {
						loopBanned.Store(true) // refused: banned for its refusals
						time.Sleep(100 * time.Millisecond)
						continue
					}
					in := bufio.NewReader(s)
					answered := int64(0)
					for range 100 {
						if protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "ping"}) != nil {
							break
						}
						var m protocol.BenchNetMsg
						if protocol.ReadJSONFrame(in, protocol.MaxBenchNetAnswer, &m) != nil || m.Error != "" {
							break
						}
						answered++
					}
					loopAnswered.Add(answered)
					loopStreams.Add(1)
					if answered > 16 {
						t.Errorf("one bench-net stream answered %d pings", answered)
					}
					s.Reset()
					n += answered
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				banned := ""
				if loopBanned.Load() {
					banned = "; banned after its refusals"
				}
				return fmt.Sprintf("%d pings answered over %d streams (16 each at most)%s", loopAnswered.Load(), loopStreams.Load(), banned)
			},
		},
		{
			// Identities rotating to send a provider signed proposals it must check, without
			// escrow.
			name: "proposal-flood", victim: "provider-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				return sybil(ctx, t, e, "provider-1", protocol.JobProtocol, 10, func(a *attacker, s network.Stream) {
					p := protocol.Proposal{Version: 1, Job: randomHex(8), Renter: a.h.ID().String(), Provider: e.nodes["provider-1"].PeerID,
						IssuedAt: time.Now().UTC(), Model: "H100-80GB", GPUs: 1, MaxSeconds: 3600, MaxPrice: 100_000_000, Image: protocol.Image{Ref: "example.org/x:1"}}
					protocol.WriteJSONFrame(s, protocol.JobMsg{Type: "propose", Record: a.seal(protocol.KindProposal, p)})
					var m protocol.JobMsg
					protocol.ReadJSONFrame(bufio.NewReader(s), protocol.MaxJobFrame, &m)
					if m.Type == "accept" {
						proposalsAccepted.Add(1)
					}
					if m.Type != "" && !strings.Contains(m.Reason, "slow down") {
						proposalsChecked.Add(1)
					}
				})
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				if proposalsAccepted.Load() != 0 {
					t.Errorf("the provider leased %d jobs without escrow", proposalsAccepted.Load())
				}
				// The network's budget: 4 x jobs.proposals_per_minute (30) at once, then a minute.
				if limit := int64(120 + adversaryDuration.Minutes()*120 + 1); proposalsChecked.Load() > limit {
					t.Errorf("the provider checked %d proposals from one network, over its budget of %d", proposalsChecked.Load(), limit)
				}
				return fmt.Sprintf("%d of %d proposals checked, none leased (no escrow hold)", proposalsChecked.Load(), ops)
			},
		},
		{
			// Identities rotating to have a renter serve its catalogue again and again: as a
			// node of the previous release asks (no request: everything), with a model filter,
			// and with requests past the filter's limits or not JSON at all.
			name: "sync-flood", victim: "renter-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				var i atomic.Int64
				var tooMany protocol.OfferSyncRequest
				for k := range protocol.MaxOfferSyncFilter + 1 {
					tooMany.Models = append(tooMany.Models, fmt.Sprintf("M%d-1GB", k))
				}
				return sybil(ctx, t, e, "renter-1", protocol.OfferSyncProtocol, 10, func(a *attacker, s network.Stream) {
					s.SetDeadline(time.Now().Add(10 * time.Second))
					switch i.Add(1) % 4 {
					case 1:
						protocol.WriteJSONFrame(s, protocol.OfferSyncRequest{Models: []string{"H100-80GB", "L4-24GB"}})
					case 2:
						protocol.WriteJSONFrame(s, tooMany)
					case 3:
						protocol.WriteFrame(s, []byte("{not json"))
					}
					s.CloseWrite()
					if k, _ := io.Copy(io.Discard, s); k > 0 {
						syncsServed.Add(1)
					}
				})
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				// The network's budget: 24 at once, then 24 a minute.
				if limit := int64(24 + adversaryDuration.Minutes()*24 + 1); syncsServed.Load() > limit {
					t.Errorf("%d catalogue syncs served to one network, over its budget of %d", syncsServed.Load(), limit)
				}
				junk := 0.0
				for _, reason := range []string{"invalid", "malformed"} {
					junk += nodeMetric(t, e, "renter-1", `gpunex_records_rejected_total{kind="sync",reason="`+reason+`",source="stream"}`)
				}
				if ops >= 4 && junk == 0 {
					t.Errorf("%d sync streams, and no request past the limits counted as refused", ops)
				}
				return fmt.Sprintf("%d of %d catalogue syncs served; %.0f requests refused before a slot", syncsServed.Load(), ops, junk)
			},
		},
		{
			// Model catalogue syncs (answers up to 1.5 MiB) from fresh identities on one
			// host: served within the network's budget.
			name: "models-sync-flood", victim: "renter-1", honest: honestSearch,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				return sybil(ctx, t, e, "renter-1", protocol.ModelsSyncProtocol, 10, func(a *attacker, s network.Stream) {
					protocol.WriteJSONFrame(s, protocol.ModelsSyncRequest{Coordinator: e.id("coordinator").String()})
					if k, _ := io.Copy(io.Discard, s); k > 0 {
						modelSyncsServed.Add(1)
					}
				})
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				// The network's budget: 24 at once, then 24 a minute.
				if limit := int64(24 + adversaryDuration.Minutes()*24 + 1); modelSyncsServed.Load() > limit {
					t.Errorf("%d model catalogue syncs served to one network, over its budget of %d", modelSyncsServed.Load(), limit)
				}
				return fmt.Sprintf("%d of %d model catalogue syncs served", modelSyncsServed.Load(), ops)
			},
		},
		{
			// Fresh identities from one host asking the coordinator's AutoNAT service to dial
			// them back, to spend the dial-backs honest providers behind NAT need: served
			// within the network's budget, the rest reset before the service reads them.
			name: "autonat-sybil", victim: "coordinator", honest: honestBalance,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				// Four at once: each request waits 100 ms to tell a served one (the service
				// waits for the request) from a refused one (reset).
				var ops atomic.Int64
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						ops.Add(sybil(ctx, t, e, "coordinator", "/libp2p/autonat/1.0.0", 4, func(a *attacker, s network.Stream) {
							s.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
							_, err := s.Read(make([]byte, 1))
							if te, ok := err.(interface{ Timeout() bool }); ok && te.Timeout() {
								autonatServed.Add(1)
							}
						}))
					})
				}
				wg.Wait()
				return ops.Load()
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				refused := nodeMetric(t, e, "coordinator", "gpunex_autonat_refused_total")
				if limit := int64(autonatPerNetwork + adversaryDuration.Minutes()*autonatPerNetwork + 1); autonatServed.Load() > limit {
					t.Errorf("%d AutoNAT requests of one network served, over its budget of %d", autonatServed.Load(), limit)
				}
				if ops > 2*autonatPerNetwork && refused == 0 {
					t.Errorf("%d AutoNAT requests from one network, none refused", ops)
				}
				return fmt.Sprintf("%d of %d AutoNAT requests served, %.0f refused", autonatServed.Load(), ops, refused)
			},
		},
		{
			// Streams opened on every coordinator protocol and left to trickle.
			name: "slow-streams", victim: "coordinator", honest: honestBalance,
			attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
				a := newAttacker(t, e)
				defer a.close()
				var streams []network.Stream
				var n int64
				for ctx.Err() == nil && len(streams) < 400 {
					for _, p := range []string{protocol.ApplyProtocol, protocol.WalletProtocol, protocol.JobReportProtocol, protocol.BenchNetProtocol} {
						if s, err := a.stream(ctx, "coordinator", p); err == nil {
							s.Write([]byte{0x80}) // the first byte of a long length prefix
							streams = append(streams, s)
							n++
						}
					}
				}
				<-ctx.Done()
				for _, s := range streams {
					s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
					if _, err := s.Read(make([]byte, 1)); err != nil && !os.IsTimeout(err) {
						streamsClosed.Add(1) // the victim closed it: its deadline passed
					}
					s.Reset()
				}
				return n
			},
			check: func(t *testing.T, e *advEnv, ops int64) string {
				// Apply and job-report streams have 10 s to deliver their frame, wallet ones
				// 60 s, bench-net 3 minutes: a long attack sees them closed.
				if *adversaryDuration >= 15*time.Second && streamsClosed.Load() < ops/4 {
					t.Errorf("only %d of %d trickling streams were closed by the victim", streamsClosed.Load(), ops)
				}
				return fmt.Sprintf("%d streams held; %d closed by the victim's deadlines", ops, streamsClosed.Load())
			},
		},
		benchTurnScenario(),
	}
}

// graylisting is renter-1's view of a peer's gossip score. While wait says the score should
// fall below the graylist threshold (-1000) and has not, it is asked again for up to 8 s:
// past one score inspection (p2p.ScoreInspectEvery, 5 s) after the attack.
func graylisting(e *advEnv, id peer.ID, wait bool) (api.GossipView, error) {
	g, err := e.clients["renter-1"].Gossip(context.Background(), id.String())
	for until := time.Now().Add(8 * time.Second); wait && (err != nil || !g.Known || g.Score > -1000) && time.Now().Before(until); {
		time.Sleep(200 * time.Millisecond)
		g, err = e.clients["renter-1"].Gossip(context.Background(), id.String())
	}
	return g, err
}

// Results the scenarios' checks read.
var (
	gossipAttacker    *attacker
	sybils            []peer.ID
	benchServed       atomic.Int64
	claimsServed      atomic.Int64
	reportsTaken      atomic.Int64
	jobsBefore        float64
	streamsClosed     atomic.Int64
	oversizedBytes    atomic.Int64
	loopAnswered      atomic.Int64
	loopStreams       atomic.Int64
	loopBanned        atomic.Bool
	replayedOffer     api.OfferRow
	replayer          peer.ID
	replayOver0       float64      // the victim's gossip_over_budget_total before the replay
	autonatServed     atomic.Int64 // autonat-sybil
	sprayedProvider   string       // offer-on-wrong-topics
	sprayedModels     map[string]bool
	sprayer           peer.ID
	proposalsAccepted atomic.Int64
	proposalsChecked  atomic.Int64
	syncsServed       atomic.Int64
	modelSyncsServed  atomic.Int64
)

// provider1Jobs is the decayed count of jobs behind provider-1's completion, as the
// coordinator's latest score says.
// anOffer is an offer row renter-1 lists and its signed record, as received: what a
// hostile peer replays.
func anOffer(ctx context.Context, t *testing.T, e *advEnv) (api.OfferRow, api.OfferRecordView) {
	rows, err := e.clients["renter-1"].Search(ctx, url.Values{})
	if err != nil || len(rows) == 0 {
		t.Fatalf("no offer listed: %v", err)
	}
	rec, err := e.clients["renter-1"].OfferRecord(ctx, rows[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	return rows[0], rec
}

func provider1Jobs(e *advEnv) float64 {
	scores, err := e.clients["coordinator"].Scores(context.Background(), e.nodes["provider-1"].PeerID)
	if err != nil || len(scores) == 0 {
		return 0
	}
	return scores[0].Jobs
}

// forgedReports are job reports no coordinator may take from this attacker.
func forgedReports(a *attacker, e *advEnv) []protocol.JobReport {
	now := time.Now().UTC()
	sk2, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	throwaway, _ := peer.IDFromPrivateKey(sk2)
	job := randomHex(8)
	lease := protocol.Lease{Version: 1, Job: job, Proposal: strings.Repeat("0", 64), Renter: throwaway.String(), Provider: a.h.ID().String(),
		Model: "H100-80GB", GPUs: 8, Price: 3_000_000, IssuedAt: now.Add(-time.Hour), EndsAt: now.Add(29 * 24 * time.Hour),
		Limits: protocol.Limits{MemoryBytes: 1, CPUMillis: 1, Pids: 1, ScratchBytes: 1}}
	lraw := a.seal(protocol.KindLease, lease)
	lcs, _ := protocol.Seal(protocol.KindCountersignature, protocol.Countersignature{Version: 1, Of: protocol.KindLease, SHA256: protocol.RecordSHA256(lraw),
		Job: job, Signer: throwaway.String(), SignedAt: now}, sk2)
	receipt := func(end time.Time, secs int64) []byte {
		return a.seal(protocol.KindReceipt, protocol.Receipt{Version: 1, Job: job, Lease: protocol.RecordSHA256(lraw), Provider: lease.Provider,
			Renter: lease.Renter, Model: lease.Model, GPUs: lease.GPUs, StartedAt: lease.IssuedAt, EndedAt: end, Seconds: secs, Price: lease.Price,
			Amount: protocol.Cost(lease.Price, lease.GPUs, secs), Reason: "exited"})
	}
	// A lease in provider-1's name, signed by the attacker.
	stolen := lease
	stolen.Provider = e.nodes["provider-1"].PeerID
	sraw := a.seal(protocol.KindLease, stolen)
	return []protocol.JobReport{
		{Lease: lraw, LeaseCountersig: lcs, Receipt: receipt(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), 2_592_001)},
		{Lease: lraw, LeaseCountersig: lcs, Receipt: receipt(now, 3600)},
		{Lease: sraw, LeaseCountersig: lcs, Receipt: receipt(now, 60)},
	}
}

// base58 encodes bytes in Bitcoin's base58 alphabet (a transaction signature's text).
func base58(b []byte) string {
	const alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
	digits := []byte{0}
	for _, c := range b {
		carry := int(c)
		for i := range digits {
			carry += int(digits[i]) << 8
			digits[i] = byte(carry % 58)
			carry /= 58
		}
		for carry > 0 {
			digits = append(digits, byte(carry%58))
			carry /= 58
		}
	}
	out := make([]byte, 0, len(digits))
	for _, c := range b {
		if c != 0 {
			break
		}
		out = append(out, '1')
	}
	for i := len(digits) - 1; i >= 0; i-- {
		out = append(out, alphabet[digits[i]])
	}
	return string(out)
}

// benchTurnScenario: strangers (a fresh key each, from the attackers' network) ask the
// coordinator for a challenge and the largest download, to hold its one network-benchmark
// turn and read nothing, while certified provider-1 runs its benchmarks. No stranger gets
// the turn, and provider-1's run completes with the coordinator's receipt.
func benchTurnScenario() scenario {
	var asked, refused, held atomic.Int64
	var run struct {
		err     error
		took    time.Duration
		receipt *protocol.NetworkReceipt
	}
	return scenario{
		name: "bench-turn-hogs", victim: "coordinator", honest: honestBalance,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			done := make(chan struct{})
			go func() {
				defer close(done)
				rctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				t0 := time.Now()
				v, err := e.clients["provider-1"].BenchRun(rctx, func(int, int, string) {})
				run.err, run.took, run.receipt = err, time.Since(t0), v.Receipt
			}()
			n := sybil(ctx, t, e, "coordinator", protocol.BenchNetProtocol, 1, func(a *attacker, s network.Stream) {
				in := bufio.NewReader(s)
				var ch, m protocol.BenchNetMsg
				if protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "challenge"}) != nil || protocol.ReadJSONFrame(in, protocol.MaxBenchNetAnswer, &ch) != nil {
					return
				}
				asked.Add(1)
				protocol.WriteJSONFrame(s, protocol.BenchNetMsg{Op: "down", Size: protocol.MaxBenchTransfer, Token: ch.Token})
				if protocol.ReadJSONFrame(in, protocol.MaxBenchNetAnswer, &m) != nil {
					return
				}
				if m.Error != "" {
					refused.Add(1)
					return
				}
				held.Add(1) // the turn: keep it, reading nothing
				<-ctx.Done()
			})
			<-done
			return n
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			if held.Load() > 0 {
				t.Errorf("%d strangers got the coordinator's benchmark turn", held.Load())
			}
			if run.err != nil || run.receipt == nil || run.receipt.Bytes < protocol.MinBenchTransfer {
				t.Errorf("provider-1's benchmark run during the attack: receipt %+v, %v", run.receipt, run.err)
			}
			return fmt.Sprintf("%d of %d turns asked refused, none held; provider-1 measured in %s", refused.Load(), asked.Load(), run.took.Round(time.Millisecond))
		},
	}
}
