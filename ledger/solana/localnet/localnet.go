// Package localnet runs a local Solana JSON-RPC server for tests and the devnet: a small
// Node.js program (server.js, embedded here) around one LiteSVM instance, the Solana
// runtime packaged as the npm module "litesvm". It speaks standard Solana JSON-RPC, so the
// code under test talks to it exactly as it would to a real cluster.
//
// The npm packages live in ledger/solana/localnet/node_modules (installed by `make deps`,
// which runs `npm ci` there). Node.js must be on PATH.
package localnet

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

//go:embed web3check.js
var web3CheckJS []byte

//go:embed server.js
var serverJS []byte

// ModulesEnv names the environment variable that may point at the node_modules folder
// holding litesvm; otherwise it is searched for (see FindModules).
const ModulesEnv = "GPUNEX_SOLANA_MODULES"

// SlotEnv names the environment variable that may set the milliseconds per block height
// tick (default 400 like mainnet; "0" stops time-based ticking, leaving one block per
// landed transaction).
const SlotEnv = "GPUNEX_SOLANA_SLOT_MS"

const modulesRel = "ledger/solana/localnet/node_modules"

// Runtime is a running local Solana RPC server.
type Runtime struct {
	URL         string // JSON-RPC over HTTP, e.g. http://127.0.0.1:40123
	WSURL       string // websocket (signatureSubscribe), same port
	GenesisHash string // random per start

	cmd     *exec.Cmd
	stdin   io.WriteCloser
	dir     string
	done    chan struct{}
	waitErr error
	stopped sync.Once
	stopErr error
}

// FindModules returns the node_modules folder that holds litesvm: $GPUNEX_SOLANA_MODULES if
// set, else the first ledger/solana/localnet/node_modules found walking up from the current
// directory and then from the executable's directory.
func FindModules() (string, error) {
	if d := os.Getenv(ModulesEnv); d != "" {
		if st, err := os.Stat(filepath.Join(d, "litesvm")); err == nil && st.IsDir() {
			return filepath.Abs(d)
		}
		return "", fmt.Errorf("localnet: %s=%s holds no litesvm package; run `make deps` (npm ci in ledger/solana/localnet)", ModulesEnv, d)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			cand := filepath.Join(dir, filepath.FromSlash(modulesRel))
			if st, err := os.Stat(filepath.Join(cand, "litesvm")); err == nil && st.IsDir() {
				return cand, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("localnet: the litesvm npm package is not installed (no %s found above the current directory or the executable); run `make deps` (npm ci --no-audit --no-fund in ledger/solana/localnet) or set %s", modulesRel, ModulesEnv)
}

// Start starts a local Solana RPC server on a free port of 127.0.0.1 and waits until it
// answers. ctx bounds the start only; the server runs until Stop (or until this process
// exits: the server quits when its stdin closes). The server's stderr goes to logw (may be
// nil).
func Start(ctx context.Context, logw io.Writer) (*Runtime, error) {
	if logw == nil {
		logw = io.Discard
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("localnet: node (Node.js) is not on PATH; run `make deps` or install nodejs and npm")
	}
	modules, err := FindModules()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpunex-localnet-")
	if err != nil {
		return nil, fmt.Errorf("localnet: %w", err)
	}
	script := filepath.Join(dir, "server.js")
	if err := os.WriteFile(script, serverJS, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localnet: %w", err)
	}
	args := []string{script, "--port", "0"}
	if ms := os.Getenv(SlotEnv); ms != "" {
		if _, err := strconv.Atoi(ms); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("localnet: %s=%q is not a number", SlotEnv, ms)
		}
		args = append(args, "--slot-ms", ms)
	}
	cmd := exec.Command(node, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	cmd.Stderr = logw
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localnet: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localnet: %w", err)
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localnet: starting node: %w", err)
	}
	r := &Runtime{cmd: cmd, stdin: stdin, dir: dir, done: make(chan struct{})}

	type ready struct {
		URL         string `json:"url"`
		WS          string `json:"ws"`
		GenesisHash string `json:"genesis_hash"`
	}
	lines := make(chan ready, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, err := br.ReadBytes('\n')
		if err == nil {
			var rd ready
			if json.Unmarshal(line, &rd) == nil && rd.URL != "" {
				lines <- rd
			} else {
				fmt.Fprintf(logw, "localnet: unexpected first line: %s", line)
			}
		}
		// Keep draining stdout so the server never blocks on a full pipe.
		io.Copy(logw, br)
	}()
	go func() {
		r.waitErr = cmd.Wait()
		close(r.done)
	}()

	select {
	case rd := <-lines:
		r.URL, r.WSURL, r.GenesisHash = rd.URL, rd.WS, rd.GenesisHash
	case <-r.done:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localnet: server exited before it was ready (%v); is litesvm installed (`make deps`)?", r.waitErr)
	case <-ctx.Done():
		r.Stop()
		return nil, fmt.Errorf("localnet: waiting for the server: %w", ctx.Err())
	case <-time.After(60 * time.Second):
		r.Stop()
		return nil, errors.New("localnet: the server did not become ready within 60s")
	}
	if err := r.call(ctx, "getHealth", nil); err != nil {
		r.Stop()
		return nil, fmt.Errorf("localnet: server not healthy: %w", err)
	}
	return r, nil
}

// Stop stops the server (closing its stdin, then SIGTERM, then SIGKILL) and removes its
// temporary files. Safe to call more than once.
func (r *Runtime) Stop() error {
	r.stopped.Do(func() {
		r.stdin.Close()
		select {
		case <-r.done:
		case <-time.After(3 * time.Second):
			r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(2 * time.Second):
				r.cmd.Process.Kill()
				<-r.done
			}
		}
		r.stopErr = os.RemoveAll(r.dir)
	})
	return r.stopErr
}

// ExpireBlockhash makes every blockhash issued so far invalid and moves the block height
// past every lastValidBlockHeight handed out (a non-standard method of this server).
func (r *Runtime) ExpireBlockhash(ctx context.Context) error {
	return r.call(ctx, "gpunex_expireBlockhash", nil)
}

// PruneHistory makes the runtime answer for no transaction that landed before now, like an
// RPC node without archival history, until it is called with false.
func (r *Runtime) PruneHistory(ctx context.Context, prune bool) error {
	return r.call(ctx, "gpunex_pruneHistory", []any{prune})
}

// HoldFinality makes transactions landing from now on only "confirmed" (not finalized)
// until it is called with false: for tests of what waits for finality.
func (r *Runtime) HoldFinality(ctx context.Context, hold bool) error {
	return r.call(ctx, "gpunex_holdFinality", []any{hold})
}

func (r *Runtime) call(ctx context.Context, method string, params []any) error {
	if params == nil {
		params = []any{}
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("localnet %s: %w", method, err)
	}
	defer resp.Body.Close()
	var out struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return fmt.Errorf("localnet %s: %w", method, err)
	}
	if out.Error != nil {
		return fmt.Errorf("localnet %s: %d %s", method, out.Error.Code, strings.TrimSpace(out.Error.Message))
	}
	return nil
}

// Web3Check is what CheckWithWeb3 reads back: deposits into the treasury and payouts to
// owners, amounts in base units.
type Web3Check struct {
	RPC      string         `json:"rpc"`
	Mint     string         `json:"mint"`
	Treasury string         `json:"treasury"`
	Deposits []Web3Transfer `json:"deposits"`
	Payouts  []Web3Transfer `json:"payouts"`
}

// Web3Transfer is one transaction and the amount it should move (to Owner, for a payout).
type Web3Transfer struct {
	Signature string `json:"signature"`
	Owner     string `json:"owner,omitempty"`
	Amount    string `json:"amount"`
}

// CheckWithWeb3 reads the deposits and payouts with Solana's official JavaScript client
// (@solana/web3.js, web3check.js) and returns an error naming every amount it does not
// find as expected: the proof that real clients and explorers understand this runtime.
func CheckWithWeb3(ctx context.Context, c Web3Check) error {
	node, err := exec.LookPath("node")
	if err != nil {
		return errors.New("localnet: node (Node.js) is not on PATH")
	}
	modules, err := FindModules()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(modules, "@solana", "web3.js")); err != nil {
		return fmt.Errorf("localnet: @solana/web3.js is not installed in %s; run `make deps`", modules)
	}
	dir, err := os.MkdirTemp("", "gpunex-web3check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "web3check.js")
	if err := os.WriteFile(script, web3CheckJS, 0o600); err != nil {
		return err
	}
	in, err := json.Marshal(c)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, node, script, string(in))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, runErr := cmd.Output()
	var res struct {
		OK      bool     `json:"ok"`
		Checked int      `json:"checked"`
		Errors  []string `json:"errors"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return fmt.Errorf("web3check: %v (%v): %s", err, runErr, out)
	}
	if !res.OK || runErr != nil {
		return fmt.Errorf("@solana/web3.js read other amounts: %s", strings.Join(res.Errors, "; "))
	}
	if res.Checked != len(c.Deposits)+len(c.Payouts) {
		return fmt.Errorf("web3check checked %d transactions of %d", res.Checked, len(c.Deposits)+len(c.Payouts))
	}
	return nil
}
