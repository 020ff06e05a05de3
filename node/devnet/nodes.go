package devnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
)

// The devnet's nodes: each a process of the gpunex binary on its own home, started, watched
// and stopped here.

// start creates a fresh home for a node of the devnet and starts it.
func (d *devnet) start(ctx context.Context, name string, opts config.InitOptions) (*devnetProc, error) {
	h := config.Home{Dir: filepath.Join(d.dir, name)}
	opts.Listen = d.listen
	if name == d.outage {
		// Over TCP only, to the coordinator as well: once the provider is killed, the
		// kernel closes its connection and refuses new ones at once, so that each probe
		// round counts a miss. A QUIC connection or dial to a dead peer would hang until
		// the probe's 10 s timeout (and a live-looking connection for up to its idle
		// timeout), leaving one miss per 12 s and holding up every round.
		opts.Listen = d.listen[:1]
		var tcp []string
		for _, a := range opts.Bootstrap {
			if strings.Contains(a, "/tcp/") {
				tcp = append(tcp, a)
			}
		}
		opts.Bootstrap = tcp
	}
	opts.OfferTTL, opts.Republish = "2m", "30s"
	opts.Force = true // a devnet starts fresh every time
	opts.Version = api.Version
	opts.BenchStorageMB, opts.BenchNetworkMB = 16, 4
	if err := os.RemoveAll(h.Path(config.DataDir)); err != nil {
		return nil, err
	}
	if _, _, err := config.Init(h.Dir, opts); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := d.money.configure(ctx, h); err != nil {
		return nil, fmt.Errorf("%s: money settings: %w", name, err)
	}
	p := &devnetProc{Node: Node{Name: name, Role: opts.Role, Home: h.Dir}}
	if err := d.launch(ctx, p, false); err != nil {
		return nil, err
	}
	d.say("started %-12s %s  %s", name, p.PeerID, p.API)
	return p, nil
}

// launch runs a node on its home and waits for its API; a restart appends to node.log.
func (d *devnet) launch(ctx context.Context, p *devnetProc, restart bool) error {
	h := config.Home{Dir: p.Home}
	h.RemoveAPIAddr()
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if restart {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logf, err := os.OpenFile(h.Path("node.log"), flags, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(d.o.Binary, "node", "run", "--home", h.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	p.cmd, p.done, p.PID, p.Offline = cmd, done, cmd.Process.Pid, false
	if !restart {
		d.procs = append(d.procs, p)
	}
	cl, st, err := waitAPI(ctx, h, p)
	if err != nil {
		return fmt.Errorf("%s did not start (see %s): %w", p.Name, h.Path("node.log"), err)
	}
	p.API, p.PeerID = cl.Base, st.PeerID
	return nil
}

// waitAPI waits until the node's API answers.
func waitAPI(ctx context.Context, h config.Home, p *devnetProc) (*api.Client, api.Status, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return nil, api.Status{}, fmt.Errorf("exited: %v", err)
		case <-ctx.Done():
			return nil, api.Status{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		cl, err := api.NewClient(h)
		if err != nil {
			continue
		}
		st, err := cl.Status(ctx)
		if err == nil {
			return cl, st, nil
		}
	}
	return nil, api.Status{}, errors.New("API not up after 30 s")
}

func checkAlive(procs []*devnetProc) error {
	for _, p := range procs {
		if p.Offline {
			continue
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited unexpectedly (%v); see %s", p.Name, err, filepath.Join(p.Home, "node.log"))
		default:
		}
	}
	return nil
}

// stopAll sends SIGTERM to every node (renter and providers first, coordinator last) and
// waits for each; a node still running after 10 s is killed. A node taken offline has
// exited already: its done channel holds its exit.
func stopAll(procs []*devnetProc, say func(string, ...any)) {
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			say("%s did not stop in time: killing it", p.Name)
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(b, '\n'), 0o644)
}
