//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// Job tunnels under attack (docs/protocols/jobs.md, "Job tunnels"). renter-1 runs a real
// job on provider-1 that serves a page on its declared port 8000 (busybox httpd, no
// egress). In tunnel-hog, renter-1 turned hostile (its own identity, from a network of its
// own) opens tunnels to its own job as fast as it can and holds every one it gets: at most
// jobs.max_tunnels are held, the rest refused for the limit, then for the rate
// (jobs.tunnels_per_minute), and once it stops its renter's tunnels work again. In
// tunnel-flood, strangers with rotating identities open tunnels to a random job, to
// renter-1's job and silent ones, while renter-1 fetches its job's page through its
// tunnel: none of them reaches the job. The job is charged for its time alone.

const (
	tunnelPort = 8000
	tunnelPage = "served-from-the-job"
	// tunnelHogWorkers is how many tunnels the hog opens at once.
	tunnelHogWorkers = 16
	// tunnelHogLeast is the least the hog attacks, whatever the scenario's duration: long
	// enough to pass the rate's burst (jobs.tunnels_per_minute at once).
	tunnelHogLeast = 5 * time.Second
)

// The job under attack and what the tunnel scenarios' checks read.
var (
	tunnelJobMu sync.Mutex
	tunnelJob   string // renter-1's running httpd job on provider-1, once it serves

	tunnelHonestOpened atomic.Int64 // tunnels renter-1's honest fetches had opened
	floodConnected     atomic.Int64 // strangers' streams answered ok
	floodBytes         atomic.Int64 // bytes strangers read after the provider's answer
	floodRefused       atomic.Int64 // strangers' streams refused with a code
	floodBefore        map[string]float64
	floodOpened0       float64
)

// tunnelScenarios: tunnel-flood comes after tunnel-hog, whose job it attacks and its renter
// fetches from (run alone, it starts the job itself, and its first honest fetches fail).
func tunnelScenarios() []scenario {
	return []scenario{tunnelHogScenario(), tunnelFloodScenario()}
}

// tunnelOutcomes are the refusal outcomes of gpunex_job_sessions_total{kind="tunnel"}.
var tunnelOutcomes = []string{"not_renter", "not_running", "port", "limit", "rate_limited", "closed", "other"}

func tunnelFloodScenario() scenario {
	return scenario{
		name: "tunnel-flood", victim: "provider-1", honest: honestTunnelPage,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			job := ensureTunnelJob(t, e)
			// Reset before the provider's count is read (a scrape takes a while): an honest
			// tunnel opened meanwhile is then counted on the renter's side too.
			tunnelHonestOpened.Store(0)
			floodConnected.Store(0)
			floodBytes.Store(0)
			floodRefused.Store(0)
			floodOpened0 = tunnelSessions(t, e, "opened")
			floodBefore = map[string]float64{}
			for _, o := range tunnelOutcomes {
				floodBefore[o] = tunnelSessions(t, e, o)
			}
			var i atomic.Int64
			return sybil(ctx, t, e, "provider-1", protocol.JobTunnelProtocol, 10, func(a *attacker, s network.Stream) {
				s.SetDeadline(time.Now().Add(2 * time.Second))
				switch i.Add(1) % 3 {
				case 0: // someone's job, maybe
					protocol.WriteJSONFrame(s, protocol.TunnelOpen{Job: randomHex(8), Port: tunnelPort})
				case 1: // renter-1's job, serving on that port
					protocol.WriteJSONFrame(s, protocol.TunnelOpen{Job: job, Port: tunnelPort})
				case 2: // silent
					s.CloseWrite()
				}
				in := bufio.NewReader(s)
				var answer protocol.TunnelAnswer
				err := protocol.ReadJSONFrame(in, protocol.MaxTunnelFrame, &answer)
				switch {
				case err == nil && answer.OK:
					floodConnected.Add(1)
					s.Write([]byte("GET /index.html HTTP/1.0\r\nHost: job\r\n\r\n"))
				case err == nil:
					floodRefused.Add(1)
				}
				k, _ := io.Copy(io.Discard, in)
				floodBytes.Add(k)
			})
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			if n := floodConnected.Load(); n != 0 {
				t.Errorf("%d strangers' tunnel streams were connected to a job", n)
			}
			if n := floodBytes.Load(); n != 0 {
				t.Errorf("strangers read %d bytes after the provider's answer", n)
			}
			if got, honest := tunnelSessions(t, e, "opened")-floodOpened0, tunnelHonestOpened.Load(); got > float64(honest) {
				t.Errorf("the provider opened %.0f tunnels, its renter %d", got, honest)
			}
			var counted float64
			var by []string
			for _, o := range tunnelOutcomes {
				if d := tunnelSessions(t, e, o) - floodBefore[o]; d > 0 {
					counted += d
					by = append(by, fmt.Sprintf("%s %.0f", o, d))
				}
			}
			// Every stream is refused (or, silent, dropped) and counted by the provider.
			if counted < float64(floodRefused.Load()) || counted == 0 {
				t.Errorf("the provider counted %.0f tunnel refusals, the strangers saw %d", counted, floodRefused.Load())
			}
			charge := endTunnelJob(t, e)
			return fmt.Sprintf("0 of %d streams connected, 0 bytes of the job; %d refused at their first frame, the provider counted %s; %s",
				ops, floodRefused.Load(), strings.Join(by, ", "), charge)
		},
	}
}

// honestTunnelPage is renter-1 fetching its job's page through a tunnel (the local API's,
// as `gpunex job forward` does).
func honestTunnelPage(ctx context.Context, e *advEnv) error {
	tunnelJobMu.Lock()
	job := tunnelJob
	tunnelJobMu.Unlock()
	if job == "" {
		return errors.New("renter-1's job does not serve yet")
	}
	opened, err := fetchJobPage(ctx, e, job)
	if opened {
		// The provider opened it, whether or not the page then came whole before ctx ended.
		tunnelHonestOpened.Add(1)
	}
	return err
}

// fetchJobPage fetches the page of job through a tunnel of renter-1; opened says whether
// the tunnel was opened.
func fetchJobPage(ctx context.Context, e *advEnv, job string) (opened bool, err error) {
	conn, err := e.clients["renter-1"].DialTunnel(ctx, job, tunnelPort)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	fmt.Fprintf(conn, "GET /index.html HTTP/1.0\r\nHost: job\r\n\r\n")
	raw, err := io.ReadAll(conn)
	if !bytes.Contains(raw, []byte(tunnelPage)) {
		return true, fmt.Errorf("the job's page through its tunnel: %q (%v)", raw, err)
	}
	return true, nil
}

// ensureTunnelJob has renter-1 run, once, a job on provider-1 that serves a page on port
// 8000 without egress, and returns it once the page comes through a tunnel.
func ensureTunnelJob(t *testing.T, e *advEnv) string {
	t.Helper()
	tunnelJobMu.Lock()
	defer tunnelJobMu.Unlock()
	if tunnelJob != "" {
		return tunnelJob
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var offer string
	rows, _ := e.clients["renter-1"].Search(ctx, nil)
	for _, r := range rows {
		if r.Provider == e.nodes["provider-1"].PeerID && (offer == "" || r.Model == "H100-80GB") {
			offer = r.ID
		}
	}
	if offer == "" {
		t.Fatal("renter-1 finds no offer of provider-1")
	}
	var archive bytes.Buffer
	sandbox.BusyboxImage(&archive, "gpunex.devnet/busybox:1")
	path := filepath.Join(t.TempDir(), "busybox.tar")
	if err := os.WriteFile(path, archive.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := e.clients["renter-1"].ProposeJob(ctx, api.JobRequest{Offer: offer, GPUs: 1, MaxSeconds: 600, ImageArchive: path,
		Ports: []int{tunnelPort}, Args: []string{"sh", "-c", "mkdir /tmp/www && echo " + tunnelPage + " > /tmp/www/index.html && exec httpd -f -p 8000 -h /tmp/www"}})
	if err != nil {
		t.Fatalf("renter-1's job with a port: %v", err)
	}
	for { // httpd listens a moment after the job started
		octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := fetchJobPage(octx, e, v.ID)
		ocancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("renter-1's job never served its page: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	tunnelJob = v.ID
	return v.ID
}

// endTunnelJob cancels renter-1's job and checks what it was charged: its seconds at its
// price, whatever its tunnels carried. It says so in words.
func endTunnelJob(t *testing.T, e *advEnv) string {
	tunnelJobMu.Lock()
	job := tunnelJob
	tunnelJob = ""
	tunnelJobMu.Unlock()
	ctx := context.Background()
	if _, err := e.clients["renter-1"].CancelJob(ctx, job); err != nil {
		t.Errorf("cancel renter-1's job: %v", err)
		return "its job not cancelled"
	}
	var v api.JobView
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		v, err = e.clients["renter-1"].Job(ctx, job)
		if err == nil && v.State == "ended" && len(v.Receipt) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("renter-1's job has no receipt 30 s after its cancel: %s %v", v.State, err)
			return "its job not ended"
		}
	}
	if ran := time.Since(v.StartedAt) + time.Second; v.Seconds > int64(ran/time.Second) {
		t.Errorf("the job is charged %d s, it ran %s", v.Seconds, ran.Round(time.Second))
	}
	if want := protocol.Cost(v.Price, v.GPUs, v.Seconds); v.Cost != want {
		t.Errorf("the job's tunnels changed its charge: %d micro-USDC for %d s, want %d", v.Cost, v.Seconds, want)
	}
	return fmt.Sprintf("the job charged %d s x its price (%s USDC)", v.Seconds, v.CostUSDC)
}

// hogResult is what the hog's streams got.
type hogResult struct {
	held, limit, rated, dropped atomic.Int64
	took                        time.Duration // its attack, from the first stream to the last
	fds0, fdsPeak               float64       // the provider's open descriptors, before and at most
	goroutines0, goroutinesPeak float64
	recovered                   time.Duration // from the hog's end to its renter's next page
	recoverErr                  error
	maxTunnels, perMinute       int
}

func tunnelHogScenario() scenario {
	res := &hogResult{}
	return scenario{
		name: "tunnel-hog", victim: "provider-1", honest: honestSearch,
		attack: func(ctx context.Context, t *testing.T, e *advEnv) int64 {
			job := ensureTunnelJob(t, e)
			cfg, err := config.Home{Dir: e.nodes["provider-1"].Home}.Config()
			if err != nil {
				t.Fatal(err)
			}
			res.maxTunnels, res.perMinute = cfg.Jobs.MaxTunnels, cfg.Jobs.TunnelsPerMinute
			key, err := config.Home{Dir: e.nodes["renter-1"].Home}.Identity()
			if err != nil {
				t.Fatal(err)
			}
			// Its own network (127.0.0.4): the strangers' streams do not spend its budget.
			a := newAttackerKeyed(t, e, key, "127.0.0.4", "provider-1")
			defer a.close()
			if remaining := time.Until(deadlineOf(ctx)); remaining < tunnelHogLeast {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(context.Background(), tunnelHogLeast)
				defer cancel()
			}
			res.fds0 = nodeMetric(t, e, "provider-1", "process_open_fds")
			res.goroutines0 = nodeMetric(t, e, "provider-1", "go_goroutines")
			sampled := make(chan struct{})
			go func() { // the provider's descriptors and goroutines while it is hogged
				defer close(sampled)
				for ctx.Err() == nil {
					res.fdsPeak = max(res.fdsPeak, nodeMetric(t, e, "provider-1", "process_open_fds"))
					res.goroutinesPeak = max(res.goroutinesPeak, nodeMetric(t, e, "provider-1", "go_goroutines"))
					time.Sleep(250 * time.Millisecond)
				}
			}()
			t0 := time.Now()
			n := hogTunnels(ctx, a, job, res)
			res.took = time.Since(t0)
			<-sampled
			a.close() // the hog is gone: its held tunnels are reset
			res.recovered, res.recoverErr = tunnelsBack(e, job)
			return n
		},
		check: func(t *testing.T, e *advEnv, ops int64) string {
			held, limit, rated := res.held.Load(), res.limit.Load(), res.rated.Load()
			if held > int64(res.maxTunnels) {
				t.Errorf("the hog held %d tunnels to one job, over jobs.max_tunnels (%d)", held, res.maxTunnels)
			}
			if held < int64(res.maxTunnels) || limit == 0 {
				t.Errorf("the hog held %d tunnels and was refused %d for the limit: it never reached jobs.max_tunnels (%d)", held, limit, res.maxTunnels)
			}
			// Past the rate's check: its burst, then jobs.tunnels_per_minute.
			passed := ops - rated - res.dropped.Load()
			if most := int64(float64(res.perMinute)*(1+res.took.Minutes())) + 1; passed > most {
				t.Errorf("%d of the hog's tunnels in %s passed the rate, over its budget of %d", passed, res.took.Round(time.Millisecond), most)
			} else if ops > most+tunnelHogWorkers && rated == 0 {
				t.Errorf("%d tunnels in %s, none refused for the rate", ops, res.took.Round(time.Millisecond))
			}
			if grew := res.fdsPeak - res.fds0; grew > float64(res.maxTunnels+32) {
				t.Errorf("the provider's open descriptors grew by %.0f under the hog, over %d tunnels' worth", grew, res.maxTunnels)
			}
			// A tunnel is a handler and two copiers; the refused ones leave nothing.
			if grew := res.goroutinesPeak - res.goroutines0; grew > float64(8*res.maxTunnels+200) {
				t.Errorf("the provider's goroutines grew by %.0f under the hog", grew)
			}
			if res.recoverErr != nil {
				t.Errorf("renter-1's tunnel %s after the hog stopped: %v", res.recovered.Round(time.Millisecond), res.recoverErr)
			}
			return fmt.Sprintf("%d tunnels tried in %s: %d held (max_tunnels), %d refused for the limit, %d for the rate, %d dropped; provider +%.0f fds, +%.0f goroutines; its renter's tunnels back %s after it left",
				ops, res.took.Round(time.Millisecond), held, limit, rated, res.dropped.Load(), res.fdsPeak-res.fds0, res.goroutinesPeak-res.goroutines0, res.recovered.Round(time.Millisecond))
		},
	}
}

// tunnelsBack is how long renter-1 waits, once the hog is gone, for its job's page through
// a tunnel; then it fetches it twice more at an honest renter's pace, which must work too.
func tunnelsBack(e *advEnv, job string) (time.Duration, error) {
	fetch := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := fetchJobPage(ctx, e, job)
		return err
	}
	stopped := time.Now()
	err := fetch()
	for ; err != nil && time.Since(stopped) < 15*time.Second; err = fetch() {
		time.Sleep(100 * time.Millisecond)
	}
	back := time.Since(stopped)
	for i := 0; i < 2 && err == nil; i++ {
		time.Sleep(700 * time.Millisecond)
		err = fetch()
	}
	return back, err
}

// hogTunnels opens tunnels to port 8000 of job from a, tunnelHogWorkers at once, until ctx
// ends, holding each one the provider connects (closing a resets them). It returns how
// many it tried.
func hogTunnels(ctx context.Context, a *attacker, job string, res *hogResult) int64 {
	var tries atomic.Int64
	var wg sync.WaitGroup
	for range tunnelHogWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				tries.Add(1)
				s, err := a.stream(ctx, "provider-1", protocol.JobTunnelProtocol)
				if err != nil {
					res.dropped.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				s.SetDeadline(time.Now().Add(5 * time.Second))
				protocol.WriteJSONFrame(s, protocol.TunnelOpen{Job: job, Port: tunnelPort})
				err = protocol.ReadTunnelAnswer(bufio.NewReader(s))
				var refusal *protocol.TunnelRefusal
				switch {
				case err == nil:
					s.SetDeadline(time.Time{})
					res.held.Add(1)
					continue // held: never read, never closed
				case errors.As(err, &refusal) && refusal.Code == protocol.TunnelLimit:
					res.limit.Add(1)
				case errors.As(err, &refusal) && refusal.Code == protocol.TunnelRateLimited:
					res.rated.Add(1)
				default:
					res.dropped.Add(1)
				}
				s.Reset()
			}
		}()
	}
	wg.Wait()
	return tries.Load()
}

// deadlineOf is ctx's deadline, or now when it has none.
func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now()
	}
	return d
}

// tunnelSessions reads gpunex_job_sessions_total{kind="tunnel",outcome} from provider-1.
func tunnelSessions(t *testing.T, e *advEnv, outcome string) float64 {
	return nodeMetric(t, e, "provider-1", `gpunex_job_sessions_total{kind="tunnel",outcome="`+outcome+`"}`)
}

// nodeMetric reads one series of a node's /metrics, named as it is written there (name and
// labels); 0 when absent.
func nodeMetric(t *testing.T, e *advEnv, name, series string) float64 {
	t.Helper()
	resp, err := http.Get(e.nodes[name].API + "/metrics")
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
