//go:build scale

package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/offers"
	"github.com/gpunex/gpunex/node/internal/p2p"
	"github.com/gpunex/gpunex/protocol"
)

// The scale harness (`make scale NODES=1000`): one coordinator, N providers with simulated
// GPUs and twenty renters, each a whole node with its own libp2p host (QUIC on its own
// loopback address, the production host options), DHT, gossipsub and in-memory ledger, in
// this one process. It prints what the network costs and how fast it answers; it asserts
// only that the network formed. docs/performance.md keeps its tables.

var (
	scaleProviders = flag.Int("scale.providers", 100, "providers the scale harness starts")
	scaleRenters   = flag.Int("scale.renters", 20, "renters the scale harness starts")
	scaleWindow    = flag.Duration("scale.window", 5*time.Minute, "the steady-state window whose costs are measured (one probe cycle)")
	scaleChanges   = flag.Int("scale.changes", 10, "price changes timed")
	scaleChangesAt = flag.Duration("scale.changesat", 0, "the least age of the network (from the run's start) at which the price changes are timed: runs whose network converges sooner time them in a younger, busier network, and this makes such runs comparable")
	scaleRounds    = flag.Int("scale.rounds", 2, "rounds of searches, each renter searching four ways a round")
	scaleOut       = flag.String("scale.out", "", "a file the report is also written to")
	scaleHeap      = flag.String("scale.heapprofile", "", "a file the heap profile is written to after the steady-state window")
	scaleWhySlow   = flag.String("scale.whyslow", "", "log where a SetPrice (setprice) that has not returned after 1 s and 3 s, or a search (search) after 2.2 s and 3.2 s, waits: a comma-separated list of those watched, each logged 3 times a run at most (a goroutine profile: at 300 providers each takes a minute or more and stalls the run)")
	scaleCPU       = flag.String("scale.cpuprofile", "", "a file the CPU profile of the steady-state window is written to")
	scaleStacks    = flag.String("scale.goroutines", "", "a file prefix the goroutines, grouped by stack, are written to as each role finishes joining (PREFIX-providers.txt, ...)")
	scaleLinks     = flag.String("scale.links", "quic", "how nodes are linked: quic (each on its own loopback address) or mocknet (simulated in memory, scale_mocknet_test.go)")
)

type scaleNet struct {
	t        *testing.T
	coordKey crypto.PrivKey
	coord    *Node

	mu        sync.Mutex
	providers []*Node
	renters   []*Node
	started   int // nodes started: the next one's address
	ledgers   []*ledger.Ledger

	links *mockLinks // the simulated network in mocknet mode; nil over QUIC

	// heap is the Go heap in use after a GC as each role finished joining, for the
	// marginal heap per node of each role.
	heapBase, heapCoord, heapProviders, heapRenters heapMark
}

// heapMark is the Go heap and goroutine stacks in use, after a GC.
type heapMark struct{ heap, stacks uint64 }

func (s *scaleNet) markHeap(what string) heapMark {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.t.Logf("heap %s: %.1f MB heap, %.1f MB stacks in use, %d goroutines", what, float64(ms.HeapInuse)/1e6, float64(ms.StackInuse)/1e6, runtime.NumGoroutine())
	if *scaleStacks != "" {
		name := fmt.Sprintf("%s-%s.txt", *scaleStacks, strings.ReplaceAll(what, " ", "-"))
		if f, err := os.Create(name); err == nil {
			pprof.Lookup("goroutine").WriteTo(f, 1)
			f.Close()
		}
	}
	return heapMark{ms.HeapInuse, ms.StackInuse}
}

// perNode is the heap and stacks from a to b divided among n nodes, in MB.
func perNode(a, b heapMark, n int) string {
	d := func(x, y uint64) float64 { return (float64(y) - float64(x)) / float64(max(n, 1)) / 1e6 }
	return fmt.Sprintf("%.2f MB heap + %.2f MB stacks", d(a.heap, b.heap), d(a.stacks, b.stacks))
}

// close stops every node at once (one by one, a thousand nodes would take many minutes).
func (s *scaleNet) close() {
	var wg sync.WaitGroup
	for _, n := range s.all() {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n.Close(ctx)
		}()
	}
	wg.Wait()
	for _, l := range s.ledgers {
		l.Close()
	}
	if s.links != nil {
		s.links.close() // the hosts: p2p.Peer closes only a host it built
	}
}

// scaleConfig is a node's configuration in the harness: the defaults (offer TTL, republish,
// search timeout, probe interval, connection limits), QUIC on loopback, reachable (no NAT here: relays and AutoNAT
// have nothing to do), with the test network's loose benchmark minimums.
func scaleConfig(c config.Config) config.Config {
	d := config.Defaults(c.Role)
	c.Offers = d.Offers
	c.Coordinator.ProbeInterval = d.Coordinator.ProbeInterval
	c.P2P.MaxPeers = d.P2P.MaxPeers
	c.P2P.Reachability = "public"
	return c
}

// start starts one node. It may run on any goroutine: it returns its errors rather than
// failing the test.
func (s *scaleNet) start(cfg config.Config) (*Node, error) {
	// Each node on its own loopback address (Linux routes 127.0.0.0/8 to lo), so that the
	// per-address limits of the protocols (catalogue syncs, benchmark transfers) see a
	// thousand hosts, not one. QUIC: one socket per node; over TCP, both ends of every
	// connection in this process would need more descriptors than a container may open.
	s.mu.Lock()
	i := s.started + 1
	s.started++
	s.mu.Unlock()
	cfg.P2P.Listen = []string{fmt.Sprintf("/ip4/127.%d.%d.%d/udp/0/quic-v1", 1+i/62500, i/250%250, 1+i%250)}
	var sk crypto.PrivKey
	var h host.Host // the simulated network's, prepared (mocknet); nil: p2p.New builds one
	var err error
	if s.links != nil {
		sk, h, err = s.links.take(cfg.Role)
	} else {
		sk, _, err = crypto.GenerateEd25519Key(rand.Reader)
	}
	if err != nil {
		return nil, err
	}
	id, _ := peer.IDFromPrivateKey(sk)
	l, err := ledger.Open(ledger.Options{InMemory: true, Small: true, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			l.Close()
		}
	}()
	if s.coord != nil {
		cfg.P2P.Bootstrap = s.coord.Addrs()[:1]
		cfg.Trust.Coordinators = []string{s.coord.ID().String()}
	}
	if cfg.Role == config.RoleProvider {
		var gpus []protocol.CertifiedGPU
		for _, g := range cfg.Provider.GPUs {
			gpus = append(gpus, protocol.CertifiedGPU{Model: protocol.NormalizeModel(g.Model), Count: g.Count})
		}
		if err := l.Applicant.SetOwnCertificate(testCertificate(s.t, s.coordKey, id, gpus, time.Now())); err != nil {
			return nil, err
		}
		// The coordinator probes the providers whose application it approved.
		now := time.Now()
		if err := s.coord.ledger.Applications.PutApplication(ledger.Application{ID: id.String()[len(id.String())-12:], Provider: id.String(),
			Status: protocol.StatusApproved, SubmittedAt: now, UpdatedAt: now}); err != nil {
			return nil, err
		}
	}
	deps := Deps{Ledger: l, Logger: quietLogger(), Host: h}
	// The node's goroutines carry its role and its ID as profiler labels (the window's CPU
	// profile, by role: go tool pprof -tags; where a slow SetPrice waits:
	// setPriceWatched); the goroutine that starts it gets its own labels back.
	prev := context.Background()
	pprof.SetGoroutineLabels(pprof.WithLabels(prev, pprof.Labels("role", cfg.Role, "node", id.String())))
	n, err := New(context.Background(), cfg, sk, deps)
	pprof.SetGoroutineLabels(prev)
	if err != nil {
		return nil, err
	}
	started = true
	s.mu.Lock()
	s.ledgers = append(s.ledgers, l)
	s.mu.Unlock()
	if s.coord == nil {
		s.coordKey, s.coord = sk, n
	}
	return n, nil
}

// watchJoins writes the process's goroutines, grouped by stack, to
// $TMPDIR/gpunex-scale-stall-N.txt whenever a minute passes with no provider joining, so
// that a stalled join shows what it waits on. It returns the function that stops it.
func (s *scaleNet) watchJoins() (stop func()) {
	done := make(chan struct{})
	go func() {
		last, dumps := -1, 0
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Minute):
			}
			s.mu.Lock()
			n := len(s.providers)
			s.mu.Unlock()
			if n == last && dumps < 3 {
				dumps++
				name := fmt.Sprintf("%s/gpunex-scale-stall-%d.txt", os.TempDir(), dumps)
				if f, err := os.Create(name); err == nil {
					pprof.Lookup("goroutine").WriteTo(f, 1)
					f.Close()
					s.t.Logf("no provider joined for a minute (%d joined): goroutines in %s", n, name)
				}
			}
			last = n
		}
	}()
	return func() { close(done) }
}

// all returns every node: the coordinator, the providers, the renters.
func (s *scaleNet) all() []*Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(append([]*Node{s.coord}, s.providers...), s.renters...)
}

func TestScaleHarness(t *testing.T) {
	raiseFileLimit(t)
	nProv, nRent := *scaleProviders, *scaleRenters
	s := &scaleNet{t: t}
	linkModel := "QUIC on loopback, each node on its own address (127.x.y.z), hosts built by p2p.New as in production"
	switch *scaleLinks {
	case "quic":
	case "mocknet":
		s.links = newMockLinks()
		linkModel = s.links.describe()
		roles := []string{config.RoleCoordinator}
		for range nProv {
			roles = append(roles, config.RoleProvider)
		}
		for range nRent {
			roles = append(roles, config.RoleRenter)
		}
		t0 := time.Now()
		if err := s.links.prepare(roles, func(role string) int { return scaleConfig(testConfig(role)).P2P.MaxPeers }); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d hosts made and %d links in %s", len(roles), s.links.linkCount(), time.Since(t0).Round(time.Second))
	default:
		t.Fatalf("-scale.links %q: quic or mocknet", *scaleLinks)
	}
	t.Cleanup(s.close)
	report := &scaleReport{}
	report.add("links: %s", linkModel)
	started := time.Now()
	s.heapBase = s.markHeap("before any node")
	if _, err := s.start(scaleConfig(testConfig(config.RoleCoordinator))); err != nil {
		t.Fatal(err)
	}
	s.heapCoord = s.markHeap("with the coordinator")

	// Providers join eight at a time, then the renters.
	cpu0 := cpuTime()
	stopWatch := s.watchJoins()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range nProv {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, err := s.start(scaleConfig(providerConfig(i)))
			if err != nil {
				t.Errorf("provider %d: %v", i, err)
				return
			}
			s.mu.Lock()
			s.providers = append(s.providers, n)
			if k := len(s.providers); k%100 == 0 {
				t.Logf("%s: %d providers started", time.Since(started).Round(time.Second), k)
			}
			s.mu.Unlock()
		}()
	}
	wg.Wait()
	stopWatch()
	if t.Failed() {
		t.FailNow()
	}
	report.add("nodes started (1 coordinator, %d providers, %d renters)", nProv, nRent)
	report.add("  %d providers joined in %s, %s of CPU", nProv, time.Since(started).Round(time.Second), (cpuTime() - cpu0).Round(time.Second))
	s.measureEarlyPriceChanges(report)
	s.waitOffers(report, "the coordinator held every provider's offer", []*Node{s.coord})
	s.heapProviders = s.markHeap("with the providers")

	// Renters join a network that is up: their first catalogue sync brings every offer, and
	// the scores of the providers the coordinator has scored by then, half of them at least
	// (its first probe of each falls within a probe interval).
	scored := s.waitScored(report, nProv/2)
	joined := time.Now()
	var began sync.Map // *Node: renterStart
	joinProbe, scoreSyncs := startWakeProbe(), s.timeScoreSyncs()
	scoresHeld := s.watchScores(&began, nRent, scored, joinProbe, scoreSyncs)
	for range nRent {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			at := time.Now()
			n, err := s.start(scaleConfig(testConfig(config.RoleRenter)))
			if err != nil {
				t.Errorf("renter: %v", err)
				return
			}
			began.Store(n, renterStart{at: at, up: time.Now()})
			s.mu.Lock()
			s.renters = append(s.renters, n)
			s.mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	report.add("  %d renters joined in %s", nRent, time.Since(joined).Round(100*time.Millisecond))
	s.waitOffers(report, fmt.Sprintf("the %d renters held every offer", nRent), s.renters)
	report.add("  %s", scoresHeld())
	joinProbe.stop()
	var synced []int
	for _, r := range s.renters {
		synced = append(synced, int(counterSum(r, "gpunex_offer_sync_records_total", nil)))
	}
	report.add("  offer records each renter received by catalogue sync: %v", synced)
	s.heapRenters = s.markHeap("with the renters")

	s.measureSearches(report)
	if wait := *scaleChangesAt - time.Since(started); wait > 0 {
		report.add("  price changes waited %s, until the network was %s old", wait.Round(time.Second), *scaleChangesAt)
		time.Sleep(wait)
	}
	s.measurePriceChanges(report)
	s.measureWindow(report)
	report.add("run: %s in all; peak resident memory of the process %.0f MB", time.Since(started).Round(time.Second), float64(procStatusBytes("VmHWM"))/1e6)
	out := fmt.Sprintf("=== scale harness: %d providers, %d renters, %d nodes, links %s, %s ===\n%s\n", nProv, nRent, nProv+nRent+1,
		*scaleLinks, time.Now().UTC().Format(time.DateTime), report)
	fmt.Print("\n" + out)
	if *scaleOut != "" {
		if err := os.WriteFile(*scaleOut, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// waitOffers waits until every node of nodes holds a record of every provider's offer
// (live, or withdrawn by its own benchmarks: simulated GPUs on a loaded machine may fall
// under a threshold), or for four minutes (past one republish interval, 3 minutes), and
// reports how long it took or how many records the node that holds fewest has.
func (s *scaleNet) waitOffers(report *scaleReport, what string, nodes []*Node) {
	t := s.t
	start, lastLog := time.Now(), time.Now()
	for {
		short, least := 0, len(s.providers)
		for _, n := range nodes {
			k := 0
			for _, p := range s.providers {
				if so, _ := n.book.Get(p.ID()); so != nil {
					k++
				}
			}
			if k < len(s.providers) {
				short, least = short+1, min(least, k)
			}
		}
		took := time.Since(start).Round(100 * time.Millisecond)
		if short == 0 {
			report.add("  %s %s later", what, took)
			return
		}
		if took > 4*time.Minute {
			report.add("  NOT DONE: %s: after %s, %d of %d nodes short, the least holding %d of %d", what, took, short, len(nodes), least, len(s.providers))
			s.whyMissing(report, nodes)
			return
		}
		if time.Since(lastLog) > 15*time.Second {
			t.Logf("%s: %d of %d nodes still short, the least holds %d offers", took, short, len(nodes), least)
			lastLog = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scoredProviders are the providers the coordinator has scored by now.
func (s *scaleNet) scoredProviders() []peer.ID {
	var out []peer.ID
	for _, p := range s.providers {
		if s.coord.scores.Score(p.ID(), s.coord.ID()) != nil {
			out = append(out, p.ID())
		}
	}
	return out
}

// watchScores times, for each renter from when it began starting, until it holds the
// coordinator's score of every provider it had scored by then: how soon a new renter ranks
// providers by their real score (the join's score sync, then gossip). began gives each
// renter's start, nRent how many renters are coming. It returns the function that waits
// for the report's line.
func (s *scaleNet) watchScores(began *sync.Map, nRent int, scored []peer.ID, probe *wakeProbe, handled *handlerTimes) func() string {
	done := make(chan string, 1)
	coord := s.coord.ID()
	// held counts the scored providers whose score r holds; holds says whether it holds
	// them all, stopping at the first it lacks: each look takes the renter's score book's
	// lock, which its score sync takes record after record, and the whole count of 150
	// providers for 50 renters every 100 ms held those syncs up.
	held := func(r *Node) int {
		k := 0
		for _, p := range scored {
			if r.scores.Score(p, coord) != nil {
				k++
			}
		}
		return k
	}
	holds := func(r *Node) bool {
		for _, p := range scored {
			if r.scores.Score(p, coord) == nil {
				return false
			}
		}
		return true
	}
	go func() {
		first := time.Now()
		took := map[*Node]time.Duration{}
		for {
			s.mu.Lock()
			renters := slices.Clone(s.renters)
			s.mu.Unlock()
			for _, r := range renters {
				if _, ok := took[r]; ok || !holds(r) {
					continue
				}
				if t, ok := began.Load(r); ok {
					took[r] = time.Since(t.(renterStart).at)
				}
			}
			switch {
			case len(took) == nRent:
				var d []time.Duration
				for _, v := range took {
					d = append(d, v)
				}
				slices.Sort(d)
				line := fmt.Sprintf("renters holding the coordinator's scores of the %d providers it had scored, from each renter's start: p50 %s, p95 %s, max %s",
					len(scored), pct(d, 0.5), pct(d, 0.95), ms(d[len(d)-1]))
				done <- line + slowJoins(took, began, probe, handled)
				return
			case time.Since(first) > 4*time.Minute:
				least := len(scored)
				for _, r := range renters {
					least = min(least, held(r))
				}
				done <- fmt.Sprintf("NOT DONE: after %s, %d of %d renters held the coordinator's %d scores; the least held %d",
					time.Since(first).Round(time.Second), len(took), nRent, len(scored), least)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() string { return <-done }
}

// waitScored waits, a probe interval at most, until the coordinator has scored want
// providers, and returns those it has scored.
func (s *scaleNet) waitScored(report *scaleReport, want int) []peer.ID {
	start := time.Now()
	scored := s.scoredProviders()
	for len(scored) < want && time.Since(start) < s.coord.cfg.Coordinator.ProbeInterval.Duration {
		time.Sleep(time.Second)
		scored = s.scoredProviders()
	}
	report.add("  the coordinator had scored %d providers %s later", len(scored), time.Since(start).Round(time.Second))
	return scored
}

// renterStart is when a renter began starting, and when its start returned.
type renterStart struct{ at, up time.Time }

// slowJoins are the lines of the renters that took over 3 s to hold the coordinator's
// scores, the slowest first, at most five: how long their start took, then each join sync,
// from the renter's start, with the coordinator's streams' traces, when the coordinator's
// handler of its score sync ran, and the longest late wake-up of the process meanwhile.
func slowJoins(took map[*Node]time.Duration, began *sync.Map, probe *wakeProbe, handled *handlerTimes) string {
	var slow []*Node
	for r, d := range took {
		if d > 3*time.Second {
			slow = append(slow, r)
		}
	}
	slices.SortFunc(slow, func(a, b *Node) int { return cmp.Compare(took[b], took[a]) })
	var out strings.Builder
	for _, r := range slow[:min(len(slow), 5)] {
		v, _ := began.Load(r)
		st := v.(renterStart)
		fmt.Fprintf(&out, "\n    a renter's scores after %s: its start took %s, it joined at %s, its models synced at %s; the coordinator's score sync handler ran %s",
			ms(took[r]), ms(st.up.Sub(st.at)), ms(time.Unix(0, r.joinedAt.Load()).Sub(st.at)), ms(time.Unix(0, r.modelsSyncedAt.Load()).Sub(st.at)),
			handled.of(r.ID(), st.at))
		for i, j := range r.catalogue.JoinSyncs() {
			end := time.Now()
			if j.Took > 0 {
				end = j.At.Add(j.Took)
			}
			took := "still running"
			if j.Took > 0 {
				took = fmt.Sprintf("took %s, answered %v", ms(j.Took), j.Answered)
			}
			fmt.Fprintf(&out, "\n      join sync %d at %s, %s, late wake-up at most %s; the coordinator's scores: %s; revocations: %s; offers: %s",
				i+1, ms(j.At.Sub(st.at)), took, ms(probe.worst(j.At, end)),
				j.Coordinator[protocol.KindScore], j.Coordinator[protocol.KindRevocation], j.Coordinator[protocol.KindOffer])
		}
	}
	return out.String()
}

// handlerTimes are when the coordinator's handler of score syncs began and returned, by
// asker.
type handlerTimes struct {
	mu sync.Mutex
	by map[peer.ID][][2]time.Time
}

// timeScoreSyncs has the coordinator's handler of score syncs timed.
func (s *scaleNet) timeScoreSyncs() *handlerTimes {
	h := &handlerTimes{by: map[peer.ID][][2]time.Time{}}
	s.coord.peer.Handle(protocol.ScoreSyncProtocol, func(st network.Stream) {
		began := time.Now()
		s.coord.catalogue.HandleScoreSync(st)
		h.mu.Lock()
		h.by[st.Conn().RemotePeer()] = append(h.by[st.Conn().RemotePeer()], [2]time.Time{began, time.Now()})
		h.mu.Unlock()
	})
	return h
}

// of says when the handler ran for p, from t.
func (h *handlerTimes) of(p peer.ID, t time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var runs []string
	for _, r := range h.by[p] {
		runs = append(runs, fmt.Sprintf("%s to %s", ms(r[0].Sub(t)), ms(r[1].Sub(t))))
	}
	if len(runs) == 0 {
		return "never"
	}
	return strings.Join(runs, ", ")
}

// scoreOf is the gossip score a peer gives id, or "none".
func scoreOf(by *p2p.Peer, id peer.ID) string {
	if v, ok := by.GossipScore(id); ok {
		return fmt.Sprintf("%.1f", v)
	}
	return "none"
}

// whyMissing reports, for the first node short of offers, up to five providers whose offer
// it lacks: whether they are connected, the provider's gossip peers on each of its offer
// topics, and its offer's sequence.
func (s *scaleNet) whyMissing(report *scaleReport, nodes []*Node) {
	for _, n := range nodes {
		shown := 0
		for _, p := range s.providers {
			if so, _ := n.book.Get(p.ID()); so != nil || shown == 5 {
				continue
			}
			shown++
			seq := uint64(0)
			if cur := p.publisher.Current(); cur != nil {
				seq = cur.Offer.Seq
			}
			report.add("    %s lacks %s: connected %v, the provider's gossip peers %v, its offer seq %d; the provider gossips with the coordinator (connected %v, %d connections) on %v, the coordinator with it on %v; the provider's repairs %d, its gossip streams tried again %d, its gossip peers by topic %v, its connections %d; gossip scores: the coordinator's of it %s, its of the coordinator %s; identify failed (the provider's %d in all, %d replaced) with the coordinator %q, the coordinator's with it %q; the provider's dials of the coordinator while unheard %d; its connections to the coordinator (direction, age) %s; protocols known from identify: the provider's of the coordinator %d, the coordinator's of it %d",
				n.ID().ShortString(), p.ID().ShortString(), n.peer.Host.Network().Connectedness(p.ID()), p.publisher.GossipPeers(), seq,
				p.peer.Host.Network().Connectedness(s.coord.ID()), len(p.peer.Host.Network().ConnsToPeer(s.coord.ID())), p.peer.GossipsWith(s.coord.ID()),
				s.coord.peer.GossipsWith(p.ID()), p.peer.GossipRepairs(), p.peer.GossipStreamRetries(), p.peer.GossipPeerCounts(), p.peer.Connected(),
				scoreOf(s.coord.peer, p.ID()), scoreOf(p.peer, s.coord.ID()),
				p.peer.IdentifyFailures(), p.peer.IdentifyReplacements(), p.peer.IdentifyFailedWith(s.coord.ID()), s.coord.peer.IdentifyFailedWith(p.ID()), p.peer.BootstrapRedials(),
				connsAged(p.peer, s.coord.ID()), protocolsKnown(p.peer, s.coord.ID()), protocolsKnown(s.coord.peer, p.ID()))
		}
		if shown > 0 {
			return
		}
	}
}

// measureSearches times renters' searches, warm (a renter following gossip) and cold (a
// renter whose book was emptied: catalogue sync, then the DHT), for one model and for every
// offer.
func (s *scaleNet) measureSearches(report *scaleReport) {
	// What a search should find: the live offers the coordinator holds.
	model := protocol.NormalizeModel(testModels[0].model)
	want := map[string]int{}
	for _, so := range s.coord.book.Live(time.Now()) {
		want[""] += len(offers.Rows(api.SearchFilter{}, so))
		want[model] += len(offers.Rows(api.SearchFilter{Model: model}, so))
	}
	// Warm and cold searches alternate, so that both meet the network in the same state.
	type series struct {
		lat   []time.Duration
		worst float64
		// slow counts the searches over a second, by the phase that took most of it.
		slowSync, slowDHT, slowOther int
		// wakeOver2s is, for each search over 2 s, the longest a sleeping goroutine of
		// this process was woken late while it ran.
		wakeOver2s []time.Duration
	}
	results := map[string]*series{}
	probe := startWakeProbe()
	defer func() {
		all := probe.stop()
		report.add("a sleeping goroutine woken late during the searches (10 ms sleeps, %d): p50 %s, p99 %s, max %s", len(all), pct(all, 0.5), pct(all, 0.99), pct(all, 1))
	}()
	// Every offer, benchmarked or not: the harness's providers are not all benchmarked, and
	// it measures how offers travel.
	filters := []api.SearchFilter{{Model: model, Unbenchmarked: true}, {Unbenchmarked: true}}
	for range *scaleRounds {
		for _, r := range s.renters {
			for _, mode := range []string{"warm", "cold"} {
				for _, f := range filters {
					if mode == "cold" {
						r.book.Reset()
					}
					start := time.Now()
					var rows []api.OfferRow
					var st offers.SearchStats
					var err error
					// A search past its sync's bound (2 s) and the walk's: where it waits.
					s.whySlow("search", []time.Duration{2200 * time.Millisecond, time.Second}, nil, func(ctx context.Context) {
						rows, st, err = r.catalogue.SearchMeasured(ctx, f)
					})
					took := time.Since(start)
					if err != nil {
						s.t.Fatalf("search: %v", err)
					}
					if len(rows) < want[f.Model] || took > 1500*time.Millisecond {
						s.t.Logf("%s search %q found %d of %d in %s: %+v; %d peers", mode, f.Model, len(rows), want[f.Model], took.Round(time.Millisecond), st, r.peer.Connected())
					}
					k := mode + "/" + f.Model
					if results[k] == nil {
						results[k] = &series{worst: 1}
					}
					results[k].lat = append(results[k].lat, took)
					if took > time.Second {
						switch {
						case st.Sync > took/2:
							results[k].slowSync++
						case st.DHT > took/2:
							results[k].slowDHT++
						default:
							results[k].slowOther++
						}
					}
					if took > 2*time.Second {
						results[k].wakeOver2s = append(results[k].wakeOver2s, probe.worst(start, start.Add(took)))
					}
					results[k].worst = min(results[k].worst, float64(len(rows))/float64(max(want[f.Model], 1)))
				}
			}
		}
	}
	for _, mode := range []string{"warm", "cold"} {
		for _, f := range filters {
			r := results[mode+"/"+f.Model]
			if r == nil {
				continue
			}
			what := "every offer"
			if f.Model != "" {
				what = fmt.Sprintf("one model (%d offers)", want[f.Model])
			}
			report.add("search %s, %s: p50 %s, p95 %s, max %s over %d searches; the worst found %.1f%%; over 1 s: %d (%d in the sync, %d in the DHT, %d elsewhere)", mode, what,
				pct(r.lat, 0.5), pct(r.lat, 0.95), pct(r.lat, 1), len(r.lat), 100*r.worst, r.slowSync+r.slowDHT+r.slowOther, r.slowSync, r.slowDHT, r.slowOther)
			if len(r.wakeOver2s) > 0 {
				report.add("  over 2 s: %d; the longest late wake-up while each ran: least %s, median %s", len(r.wakeOver2s), pct(r.wakeOver2s, 0), pct(r.wakeOver2s, 0.5))
			}
		}
	}
}

// A wakeProbe measures how late this process wakes a sleeping goroutine: one goroutine
// sleeps 10 ms again and again and records by how much each sleep overran. A search waits
// on many wake-ups (timers, one goroutine handing work to another); when the process's run
// queue is deep, they come late whatever the protocol does, and a search's own bounds (2 s
// for its sync, 3 s in all) are overrun by as much.
type wakeProbe struct {
	mu   sync.Mutex
	at   []time.Time // when each sleep ended
	late []time.Duration
	quit chan struct{}
	done chan struct{}
}

func startWakeProbe() *wakeProbe {
	w := &wakeProbe{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			t := time.Now()
			select {
			case <-w.quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			now := time.Now()
			w.mu.Lock()
			w.at, w.late = append(w.at, now), append(w.late, now.Sub(t)-10*time.Millisecond)
			w.mu.Unlock()
		}
	}()
	return w
}

// stop ends the probe and returns every delay it measured.
func (w *wakeProbe) stop() []time.Duration {
	close(w.quit)
	<-w.done
	return w.late
}

// worst is the longest delay of the sleeps that ended within [from, to].
func (w *wakeProbe) worst(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for i, at := range w.at {
		if !at.Before(from) && !at.After(to) {
			d = max(d, w.late[i])
		}
	}
	return d
}

// measurePriceChanges times price changes of providers taken in turn until every node holds
// the new offer (or 30 s pass).
func (s *scaleNet) measurePriceChanges(report *scaleReport) {
	// The nodes that hold the market's offers: the renters and the coordinator (providers
	// hold their own offer only, docs/protocols/offers.md, section 6).
	s.mu.Lock()
	nodes := append([]*Node{s.coord}, s.renters...)
	s.mu.Unlock()
	var at95, at100, setPrice []time.Duration
	missed := 0
	for i := range *scaleChanges {
		prov := s.providers[(i*7919)%len(s.providers)]
		model := declaredModel(prov)
		start := time.Now()
		so := s.setPriceWatched(prov, model, protocol.MicroUSDC(500_000+i))
		setPrice = append(setPrice, time.Since(start))
		gossipPeers := prov.publisher.GossipPeers()
		arrivals := offerArrivals(nodes, so, start, 30*time.Second, 5*time.Millisecond)
		// Where it was slow: the coordinator's arrival, and who still lacked it at the end.
		var late []string
		for k, n := range nodes {
			if cur, _ := n.book.Get(so.Signer); cur == nil || cur.Offer.Seq < so.Offer.Seq {
				late = append(late, fmt.Sprint(k))
			}
		}
		s.t.Logf("price change %d (%s): arrivals %v; gossip peers on its topics when it published %v; nodes without it after 30 s (0: the coordinator): %v",
			i, model, arrivals, gossipPeers, late)
		for _, r := range nodes[1:min(len(nodes), 4)] { // how the first renters and the coordinator see each other
			byCoord, _ := s.coord.peer.GossipScore(r.ID())
			byRenter, _ := r.peer.GossipScore(s.coord.ID())
			s.t.Logf("  renter %s: the coordinator gossips with it on the model's topic %v (score %.1f), it with the coordinator %v (score %.1f)",
				r.ID().ShortString(), s.coord.peer.GossipsWith(r.ID())[protocol.ModelTopic(model)], byCoord,
				r.peer.GossipsWith(s.coord.ID())[protocol.ModelTopic(model)], byRenter)
		}
		if n95 := (len(nodes)*95 + 99) / 100; len(arrivals) >= n95 {
			at95 = append(at95, arrivals[n95-1])
		}
		if len(arrivals) == len(nodes) {
			at100 = append(at100, arrivals[len(arrivals)-1])
		} else {
			missed++
		}
		time.Sleep(time.Second)
	}
	line := fmt.Sprintf("price change, %d changes, to the renters and the coordinator: 95%% of them median %s, worst %s (SetPrice itself returned in: median %s, worst %s)",
		*scaleChanges, pct(at95, 0.5), pct(at95, 1), pct(setPrice, 0.5), pct(setPrice, 1))
	if len(at100) > 0 {
		line += fmt.Sprintf("; 100%% median %s, worst %s", pct(at100, 0.5), pct(at100, 1))
	}
	if missed > 0 {
		line += fmt.Sprintf("; %d changes had not reached every one of them after 30 s", missed)
	}
	report.add("%s", line)
}

// measureEarlyPriceChanges times SetPrice itself at providers taken in turn, a second apart,
// in the network's first minute (the changes measured later are in a network a few minutes
// old).
func (s *scaleNet) measureEarlyPriceChanges(report *scaleReport) {
	var took []time.Duration
	for i := range *scaleChanges {
		prov := s.providers[(i*7907+1)%len(s.providers)]
		start := time.Now()
		s.setPriceWatched(prov, declaredModel(prov), protocol.MicroUSDC(400_000+i))
		took = append(took, time.Since(start))
		time.Sleep(time.Second)
	}
	report.add("  SetPrice at %d providers in the network's first minute returned in: median %s, worst %s", len(took), pct(took, 0.5), pct(took, 1))
}

// setPriceWatched changes a provider's price and, with -scale.whyslow=setprice, while SetPrice has
// not returned after 1 s and again after 3 s, logs where it waits: its goroutine's stack and
// the provider's gossipsub goroutines.
func (s *scaleNet) setPriceWatched(prov *Node, model string, price protocol.MicroUSDC) *protocol.SignedOffer {
	var so *protocol.SignedOffer
	var err error
	// And what the provider's gossipsub is doing: a publish waits for its event loop.
	s.whySlow("setprice", []time.Duration{time.Second, 2 * time.Second}, func(g string) bool {
		return strings.Contains(g, prov.ID().String()) && strings.Contains(g, "go-libp2p-pubsub")
	}, func(ctx context.Context) {
		so, err = prov.publisher.SetPrice(ctx, model, price)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return so
}

// whySlowDumps counts whySlow's goroutine profiles of what, this one included.
func whySlowDumps(what string) int {
	dumps.mu.Lock()
	defer dumps.mu.Unlock()
	if dumps.n == nil {
		dumps.n = map[string]int{}
	}
	dumps.n[what]++
	return dumps.n[what]
}

var dumps struct {
	mu sync.Mutex
	n  map[string]int
}

// whySlow runs f, labelled what; with -scale.whyslow naming what, each time f has not returned after
// the next of waits, it logs the stacks of the goroutines f started (they carry its label)
// and of those match picks, grouped (the full dump stops at 64 MB, a few hundred thousand
// goroutines short of the end at 300 providers).
func (s *scaleNet) whySlow(what string, waits []time.Duration, match func(stack string) bool, f func(ctx context.Context)) {
	done := make(chan struct{})
	start := time.Now()
	go pprof.Do(context.Background(), pprof.Labels("scale", what), func(ctx context.Context) {
		defer close(done)
		f(ctx)
	})
	for _, wait := range waits {
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
		if !slices.Contains(strings.Split(*scaleWhySlow, ","), what) || whySlowDumps(what) > 3 {
			continue
		}
		var all strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&all, 1)
		for _, g := range strings.Split(all.String(), "\n\n") {
			if strings.Contains(g, `"scale":"`+what+`"`) || match != nil && match(g) {
				s.t.Logf("%s has not returned after %s:\n%s", what, time.Since(start).Round(time.Millisecond), g)
			}
		}
	}
	<-done
}

// roleOf is the role of the i-th of s.all()'s nodes: 0 the coordinator, 1 a provider, 2 a
// renter.
func (s *scaleNet) roleOf(i int) int {
	switch {
	case i == 0:
		return 0
	case i <= len(s.providers):
		return 1
	}
	return 2
}

// measureWindow measures a steady-state window: CPU, memory, connections, gossip and DHT
// records per node, and the coordinator's probes and score records.
func (s *scaleNet) measureWindow(report *scaleReport) {
	nodes := s.all()
	w := *scaleWindow
	// One gather per node at each end, the roles' sums taken from it: gathering a thousand
	// nodes' metrics takes a while on a loaded machine.
	tg0 := time.Now()
	gossip0 := gossipByNode(nodes)
	roles := []struct {
		name  string
		nodes []*Node
	}{{"coordinator", []*Node{s.coord}}, {"provider", s.providers}, {"renter", s.renters}}
	probes0 := counterSum(s.coord, "gpunex_uptime_probes_total", nil)
	// Score records are counted where they arrive: at a renter, or the last provider.
	witness := nodes[len(nodes)-1]
	scores0 := counterSum(witness, "gpunex_records_accepted_total", map[string]string{"kind": string(protocol.KindScore)})
	openings := s.countConnOpenings()
	if s.links != nil {
		s.links.counting.Store(true)
	}
	cpu0, t0 := cpuTime(), time.Now()
	if *scaleCPU != "" {
		if f, err := os.Create(*scaleCPU); err == nil {
			defer f.Close() // after the profile is stopped and written
			if pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	time.Sleep(w)
	cpu := cpuTime() - cpu0
	if s.links != nil {
		s.links.counting.Store(false)
	}
	elapsed := time.Since(t0)
	// Each node's count spans from its gather at the start to its gather at the end.
	gossipPerMin := float64(time.Minute) / float64(time.Since(tg0))
	gossip1 := gossipByNode(nodes)
	gossip := 0.0
	roleGossip := make([]float64, len(roles))
	for i := range nodes {
		gossip += gossip1[i] - gossip0[i]
		roleGossip[s.roleOf(i)] += gossip1[i] - gossip0[i]
	}
	probes := counterSum(s.coord, "gpunex_uptime_probes_total", nil) - probes0
	scores := counterSum(witness, "gpunex_records_accepted_total", map[string]string{"kind": string(protocol.KindScore)}) - scores0
	heapEnd := s.markHeap("at the end of the window")

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if *scaleHeap != "" {
		if f, err := os.Create(*scaleHeap); err == nil {
			pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	n := float64(len(nodes))
	// The marketplace's keys: every offer, each region, each model.
	keys := []cid.Cid{protocol.AllOffersKey()}
	for _, r := range testRegions {
		keys = append(keys, protocol.RegionKey(protocol.NormalizeRegion(r)))
	}
	for _, m := range testModels {
		keys = append(keys, protocol.ModelKey(protocol.NormalizeModel(m.model)))
	}
	conns, provRecs := 0, []int{}
	for _, x := range nodes {
		conns += x.peer.Connected()
		p, err := x.peer.StoredProviders(context.Background(), keys)
		if err != nil {
			s.t.Fatal(err)
		}
		provRecs = append(provRecs, p)
	}
	slices.Sort(provRecs)
	perMin := float64(time.Minute) / float64(elapsed)
	report.add("steady state over %s:", elapsed.Round(time.Second))
	report.add("  CPU: %.3f of a core per node (%.2f cores for the process)", cpu.Seconds()/elapsed.Seconds()/n, cpu.Seconds()/elapsed.Seconds())
	report.add("  memory: %.1f MB per node in use by Go (heap and stacks, after a GC), %.1f MB resident per node; %d goroutines per node",
		float64(ms.HeapInuse+ms.StackInuse)/n/1e6, float64(procStatusBytes("VmRSS"))/n/1e6, runtime.NumGoroutine()/len(nodes))
	report.add("  connections: %.1f per node", float64(conns)/n)
	report.add("  %s", openings.report(len(s.providers), perMin))
	report.add("  %s", heldBy(s.providers))
	report.add("  gossip: %.1f records validated per node per minute", float64(gossip)/n*gossipPerMin)
	retried, takenIn, repaired, unidentified, replaced, redialled := make([]int64, len(roles)), make([]int64, len(roles)), make([]int64, len(roles)), make([]int64, len(roles)), make([]int64, len(roles)), make([]int64, len(roles))
	for i, x := range nodes {
		retried[s.roleOf(i)] += x.peer.GossipStreamRetries()
		takenIn[s.roleOf(i)] += x.peer.GossipPeersTakenIn()
		repaired[s.roleOf(i)] += x.peer.GossipRepairs()
		unidentified[s.roleOf(i)] += x.peer.IdentifyFailures()
		replaced[s.roleOf(i)] += x.peer.IdentifyReplacements()
		redialled[s.roleOf(i)] += x.peer.BootstrapRedials()
	}
	reasons := map[string]int{}
	for _, x := range nodes {
		for r, k := range x.peer.IdentifyFailureReasons() {
			reasons[r] += k
		}
	}
	report.add("  identify failures by reason (one per peer and node): %v", reasons)
	report.add("  since the start, gossip streams tried again after failing to open: coordinator %d, providers %d, renters %d; reconnections to the coordinator connected but out of gossip: providers %d, renters %d; connections whose identify failed: coordinator %d, providers %d, renters %d; peers whose connections were replaced for it: coordinator %d, providers %d, renters %d",
		retried[0], retried[1], retried[2], repaired[1], repaired[2], unidentified[0], unidentified[1], unidentified[2], replaced[0], replaced[1], replaced[2])
	report.add("  peers taken into gossip by their stream, identify having ended without gossipsub taking them in: coordinator %d, providers %d, renters %d", takenIn[0], takenIn[1], takenIn[2])
	report.add("  providers' dials of the coordinator while their offer had no gossip peer: %d", redialled[1])
	report.add("  DHT provider records stored per node: mean %.1f, median %d, max %d (%d announced per provider)",
		float64(sumInts(provRecs))/n, provRecs[len(provRecs)/2], provRecs[len(provRecs)-1], 3)
	report.add("  coordinator: %.0f uptime probes and %.0f score records per hour; %.0f offers caught up after probes since the start (gossip had not brought them)",
		probes*perMin*60, scores*perMin*60, counterSum(s.coord, "gpunex_offers_caught_up_total", nil))
	for _, kind := range []string{"offers", "revocations", "scores"} {
		served := counterSum(s.coord, "gpunex_syncs_served_total", map[string]string{"kind": kind, "outcome": "served"})
		busy := counterSum(s.coord, "gpunex_syncs_served_total", map[string]string{"kind": kind, "outcome": "busy"})
		limited := counterSum(s.coord, "gpunex_syncs_served_total", map[string]string{"kind": kind, "outcome": "rate_limited"})
		k, waited, waitedLong := histogramSum(s.coord, "gpunex_sync_answer_seconds", map[string]string{"kind": kind, "phase": "wait"}, 1)
		_, wrote, wroteLong := histogramSum(s.coord, "gpunex_sync_answer_seconds", map[string]string{"kind": kind, "phase": "write"}, 1)
		report.add("  coordinator's %s syncs since the start: %.0f served, %.0f sent away busy, %.0f rate-limited; waited for a slot mean %s (%d over 1 s), written in mean %s (%d over 1 s)",
			kind, served, busy, limited, time.Duration(waited/float64(max(k, 1))*float64(time.Second)).Round(time.Millisecond), waitedLong,
			time.Duration(wrote/float64(max(k, 1))*float64(time.Second)).Round(time.Millisecond), wroteLong)
	}
	if s.links != nil {
		report.add("  mocknet links: %d, every pair", s.links.linkCount())
		report.add("  %s", s.links.dialReport(len(nodes), perMin))
	}
	report.add("per role (Go heap in use after a GC; marginal: the growth while the role joined, divided by its nodes):")
	report.add("  heap: %.1f MB before any node, %.1f MB with the coordinator, %.1f MB with the providers, %.1f MB with the renters, %.1f MB at the end of the window",
		float64(s.heapBase.heap)/1e6, float64(s.heapCoord.heap)/1e6, float64(s.heapProviders.heap)/1e6, float64(s.heapRenters.heap)/1e6, float64(heapEnd.heap)/1e6)
	report.add("  coordinator: %s at start; providers: %s each; renters: %s each; from the renters' join to the window's end: %s in all",
		perNode(s.heapBase, s.heapCoord, 1), perNode(s.heapCoord, s.heapProviders, len(s.providers)), perNode(s.heapProviders, s.heapRenters, len(s.renters)),
		perNode(s.heapRenters, heapEnd, 1))
	now := time.Now()
	for i, r := range roles {
		held, conns := []int{}, []int{}
		for _, x := range r.nodes {
			held = append(held, len(x.book.Live(now)))
			conns = append(conns, x.peer.Connected())
		}
		slices.Sort(held)
		slices.Sort(conns)
		k := float64(max(len(r.nodes), 1))
		report.add("  %s (%d): live offers held mean %.0f, min %d, max %d; connections mean %.1f, max %d; gossip %.1f records validated per node per minute",
			r.name, len(r.nodes), float64(sumInts(held))/k, held[0], held[len(held)-1], float64(sumInts(conns))/k, conns[len(conns)-1], roleGossip[i]/k*gossipPerMin)
	}
}

type scaleReport struct{ lines []string }

func (r *scaleReport) add(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

func (r *scaleReport) String() string { return strings.Join(r.lines, "\n") }

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// pct is the p-th percentile of d in milliseconds, or "none" when nothing was measured (a
// network that did not converge).
func pct(d []time.Duration, p float64) string {
	if len(d) == 0 {
		return "none"
	}
	return ms(percentile(d, p))
}

func sumInts(v []int) int {
	t := 0
	for _, x := range v {
		t += x
	}
	return t
}

// gossipByNode is the gossip records each node validated (accepted or rejected).
func gossipByNode(nodes []*Node) []float64 {
	t := make([]float64, len(nodes))
	for i, n := range nodes {
		t[i] = counterSum(n, "gpunex_records_accepted_total", map[string]string{"source": "gossip"}) +
			counterSum(n, "gpunex_records_rejected_total", map[string]string{"source": "gossip"})
	}
	return t
}

// counterSum adds up a counter family's series whose labels match.
func counterSum(n *Node, name string, labels map[string]string) float64 {
	t := 0.0
	for _, m := range seriesOf(n, name, labels) {
		t += m.GetCounter().GetValue()
	}
	return t
}

// histogramSum adds up a histogram family's series whose labels match: how many were
// observed, their sum, and how many were over the bucket bound over.
func histogramSum(n *Node, name string, labels map[string]string, over float64) (count uint64, sum float64, above uint64) {
	for _, m := range seriesOf(n, name, labels) {
		h := m.GetHistogram()
		count += h.GetSampleCount()
		sum += h.GetSampleSum()
		above += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == over {
				above -= b.GetCumulativeCount()
			}
		}
	}
	return count, sum, above
}

// seriesOf is a metric family's series whose labels match.
func seriesOf(n *Node, name string, labels map[string]string) []*dto.Metric {
	mfs, err := n.metrics.Registry.Gather()
	if err != nil {
		return nil
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			out = append(out, m)
		}
	}
	return out
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatusBytes is one of the process's memory figures in /proc/self/status: VmRSS, its
// resident memory, or VmHWM, its peak.
func procStatusBytes(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == key+":" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// raiseFileLimit lets the process hold every node's sockets: a thousand nodes with tens of
// connections each, both ends in this process.
func raiseFileLimit(t *testing.T) {
	lim := syscall.Rlimit{Cur: 1 << 20, Max: 1 << 20}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		t.Logf("open files limited to %d: %v", lim.Cur, err)
	}
}

// connsAged lists a node's connections to id with their direction and age.
func connsAged(p *p2p.Peer, id peer.ID) string {
	var out []string
	for _, c := range p.Host.Network().ConnsToPeer(id) {
		out = append(out, fmt.Sprintf("%s %s", c.Stat().Direction, time.Since(c.Stat().Opened).Round(time.Second)))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// protocolsKnown is how many of id's protocols a node learnt from identify (0: no identify
// with id ever completed).
func protocolsKnown(p *p2p.Peer, id peer.ID) int {
	ps, _ := p.Host.Peerstore().GetProtocols(id)
	return len(ps)
}
