package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger/solana"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// `gpunex doctor`: the pre-flight check of a node. Each check has a status, what it found
// and, when it is not ok, how to fix it; the exit code says whether the node can serve its
// role (1 when a check failed). docs/operations.md, "Doctor".

// Check statuses: ok; warn (the node serves its role, less well); fail (it cannot); skip
// (does not apply here).
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "fail"
	checkSkip = "skip"
)

// doctorCheck is one line of the report.
type doctorCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Found  string `json:"found"`
	Fix    string `json:"fix,omitempty"`
}

// doctorReport is what `gpunex doctor --json` prints.
type doctorReport struct {
	Home   string        `json:"home"`
	Role   string        `json:"role,omitempty"`
	OK     bool          `json:"ok"` // no check failed: the node can serve its role
	Checks []doctorCheck `json:"checks"`
}

func doctorCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Check that this node can serve its role: configuration, keys, GPUs, containerd, the network, the certificate",
		Long: "Check that this node can serve its role. Each check says what it found and, when it is not ok, how to fix it.\n" +
			"The exit code is 1 when a check failed (the node cannot serve its role), 0 otherwise (warnings included).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := runDoctor(cmd.Context(), home(cmd))
			if asJSON {
				if err := printJSON(cmd.OutOrStdout(), r); err != nil {
					return err
				}
			} else {
				printDoctor(cmd.OutOrStdout(), r)
			}
			if !r.OK {
				return exitError{1}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}

// runDoctor runs the checks of a home's role.
func runDoctor(ctx context.Context, h config.Home) doctorReport {
	r := doctorReport{Home: h.Dir}
	add := func(name, status, found, fix string) {
		r.Checks = append(r.Checks, doctorCheck{Name: name, Status: status, Found: found, Fix: fix})
	}
	cfg, err := h.Config()
	if err == nil {
		err = cfg.Check()
	}
	if err != nil {
		add("config", checkFail, err.Error(), "create the home with `gpunex init --home "+h.Dir+" --role ROLE`, or correct "+h.Path(config.ConfigFile)+" (docs/config.md)")
		r.OK = false
		return r
	}
	r.Role = cfg.Role
	add("config", checkOK, fmt.Sprintf("role %s, %s valid", cfg.Role, h.Path(config.ConfigFile)), "")
	doctorKeys(h, add)
	st := doctorNode(ctx, h, cfg, add)
	if cfg.Role != config.RoleCoordinator {
		doctorClock(ctx, h, st, add)
		doctorReachability(st, cfg, add)
	}
	doctorDisk(h, cfg, add)
	switch cfg.Role {
	case config.RoleProvider:
		doctorGPUs(cfg, add)
		doctorJobs(ctx, cfg, st, add)
		doctorCertificate(ctx, h, st, add)
	case config.RoleCoordinator:
		doctorSolana(ctx, cfg, add)
	}
	r.OK = true
	for _, c := range r.Checks {
		r.OK = r.OK && c.Status != checkFail
	}
	return r
}

// doctorKeys checks that the identity key and the API token are the owner's alone.
func doctorKeys(h config.Home, add func(name, status, found, fix string)) {
	for _, f := range []string{config.IdentityFile, config.TokenFile} {
		p := h.Path(f)
		st, err := os.Stat(p)
		switch {
		case err != nil:
			add("key "+f, checkFail, err.Error(), "create the home with `gpunex init --home "+h.Dir+" --role ROLE`")
		case st.Mode().Perm()&0o077 != 0:
			add("key "+f, checkFail, fmt.Sprintf("%s is mode %04o: others can read it", p, st.Mode().Perm()), "chmod 600 "+p)
		default:
			add("key "+f, checkOK, fmt.Sprintf("%s, mode %04o", p, st.Mode().Perm()), "")
		}
	}
}

// doctorNode asks the running node for its status: running, peers, addresses. It returns
// the status, nil when the node does not answer.
func doctorNode(ctx context.Context, h config.Home, cfg config.Config, add func(name, status, found, fix string)) *api.Status {
	start := "start it: `gpunex node run --home " + h.Dir + "` (or `systemctl start gpunex`, docs/operations.md)"
	cl, err := api.NewClient(h)
	if err != nil {
		add("node", checkFail, err.Error(), start)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		add("node", checkFail, "not answering: "+err.Error(), start)
		return nil
	}
	found := fmt.Sprintf("running since %s, %d peers, listening on %s", st.StartedAt.Local().Format(time.DateTime), st.Peers, strings.Join(st.Addrs, " "))
	switch {
	case st.Peers == 0 && cfg.Role != config.RoleCoordinator:
		add("node", checkFail, found, "no peer: check p2p.bootstrap (the coordinator's multiaddr) and that this machine reaches it")
	case st.Peers == 0:
		add("node", checkWarn, found, "no peer yet: providers and renters list this coordinator in p2p.bootstrap")
	default:
		add("node", checkOK, found, "")
	}
	return &st
}

// doctorReachability says how other peers reach the node: directly, through its
// coordinators' relays, or not at all (what AutoNAT found, through the running node).
func doctorReachability(st *api.Status, cfg config.Config, add func(name, status, found, fix string)) {
	if st == nil {
		add("reachability", checkSkip, "the node is not running", "")
		return
	}
	forward := "forward TCP and UDP 4001 to this machine (or enable UPnP on the router)"
	switch {
	case st.Reachability == "public":
		add("reachability", checkOK, "reachable from outside", "")
	case st.Reachability == "unknown":
		add("reachability", checkWarn, "not checked yet: no peer has dialled this node back", "ask again in a minute; with no peer at all, see the node check")
	case cfg.Role == config.RoleRenter:
		add("reachability", checkOK, "behind NAT: a renter only dials out", "")
	case st.Relayed:
		add("reachability", checkWarn, "behind NAT: renters reach this node through its coordinator's relay, then hole-punch a direct connection where the NAT allows", "for direct connections always, "+forward)
	default:
		add("reachability", checkFail, "behind NAT with no relay slot: renters cannot reach this node", forward+"; a coordinator gives relay slots to the providers it certified (`gpunex apply status`)")
	}
}

// doctorClock compares the node's clock with its coordinator's, through the running node:
// records are refused past protocol.MaxClockSkew, and offers, proofs and receipts carry
// times.
func doctorClock(ctx context.Context, h config.Home, st *api.Status, add func(name, status, found, fix string)) {
	if st == nil {
		add("clock", checkSkip, "the node is not running", "")
		return
	}
	cl, err := api.NewClient(h)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := cl.Clock(ctx)
	if err != nil {
		add("clock", checkWarn, "the coordinator's time is unknown: "+err.Error(), "check that the coordinator in trust.coordinators is reachable (the node check above)")
		return
	}
	off := time.Duration(v.OffsetMillis) * time.Millisecond
	way := "ahead of"
	if off < 0 {
		off, way = -off, "behind"
	}
	found := fmt.Sprintf("%s %s the coordinator's clock (round trip %d ms)", off, way, v.RoundTripMillis)
	fix := "turn on time synchronisation: `timedatectl set-ntp true`, or install chrony"
	switch {
	case off < 2*time.Second:
		add("clock", checkOK, found, "")
	case off < protocol.MaxClockSkew/2:
		add("clock", checkWarn, found, fix)
	default:
		add("clock", checkFail, found, fix+"; records more than "+protocol.MaxClockSkew.String()+" off are refused")
	}
}

// doctorDisk checks the free space of the home's file system: images and job folders live
// there on a provider.
func doctorDisk(h config.Home, cfg config.Config, add func(name, status, found, fix string)) {
	free, err := bench.FreeGiB(h.Dir)
	if err != nil {
		add("disk", checkWarn, err.Error(), "")
		return
	}
	need := int64(1)
	if cfg.Role == config.RoleProvider {
		need = cfg.Jobs.ImageCacheGB + 10 // the image cache, and room for jobs' output
	}
	found := fmt.Sprintf("%d GiB free under %s", free, h.Dir)
	switch {
	case free < 1:
		add("disk", checkFail, found, "free some space: the ledger and the jobs' folders need it")
	case free < need:
		add("disk", checkWarn, found, fmt.Sprintf("jobs.image_cache_gb (%d) and the jobs' output want about %d GiB: free space or lower jobs.image_cache_gb", cfg.Jobs.ImageCacheGB, need))
	default:
		add("disk", checkOK, found, "")
	}
}

// doctorGPUs checks the NVIDIA driver and the GPUs NVML lists (simulated GPUs need none).
func doctorGPUs(cfg config.Config, add func(name, status, found, fix string)) {
	simulated := len(cfg.Provider.GPUs) > 0
	for _, g := range cfg.Provider.GPUs {
		simulated = simulated && g.Simulated
	}
	if simulated {
		add("gpus", checkOK, fmt.Sprintf("%d simulated GPU entries: no NVIDIA hardware needed", len(cfg.Provider.GPUs)), "")
		add("cdi", checkSkip, "simulated GPUs", "")
		return
	}
	p, err := bench.OpenNVML()
	if err != nil {
		fix := "check the driver with `nvidia-smi`"
		if errors.Is(err, bench.ErrNoDriver) {
			fix = "install the NVIDIA driver (Debian: `apt-get install nvidia-driver`, then reboot) and check it with `nvidia-smi`"
		}
		add("gpus", checkFail, err.Error(), fix)
	} else {
		gpus, err := p.GPUs()
		p.Close()
		var names, lost []string
		for _, g := range gpus {
			if g.Health.Error != "" {
				lost = append(lost, fmt.Sprintf("GPU %d: %s", g.Index, g.Health.Error))
			} else {
				names = append(names, g.Model)
			}
		}
		switch {
		case err != nil || len(gpus) == 0:
			add("gpus", checkFail, fmt.Sprintf("NVML lists no GPU (%v)", err), "check `nvidia-smi` and the kernel log (`dmesg | grep -i nvrm`)")
		case len(lost) > 0:
			add("gpus", checkWarn, fmt.Sprintf("%d GPUs (%s, driver %s); %s", len(gpus), strings.Join(names, ", "), gpus[0].DriverVersion, strings.Join(lost, "; ")),
				"a GPU that fell off the bus usually needs a reboot; check power and seating, and the kernel log for Xid errors")
		default:
			add("gpus", checkOK, fmt.Sprintf("%d GPUs (%s), driver %s, CUDA %s", len(gpus), strings.Join(names, ", "), gpus[0].DriverVersion, gpus[0].CUDAVersion), "")
		}
	}
	if found, err := sandbox.NVIDIACDISpec(); err != nil {
		add("cdi", checkFail, err.Error(), "install the NVIDIA Container Toolkit and run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`")
	} else {
		add("cdi", checkOK, found, "")
	}
}

// doctorContainerdState checks that jobs in user namespaces can reach containerd's state
// folder (their bundles and root file systems): otherwise runc fails every job with
// "permission denied".
func doctorContainerdState(ctx context.Context, address string, add func(name, status, found, fix string)) {
	found, err := sandbox.CheckStateTraversable(ctx, address)
	switch {
	case errors.Is(err, sandbox.ErrStateNotTraversable):
		add("containerd state", checkFail, err.Error(), "let other users through the folders above containerd's state (chmod o+x on each one named), or move the state (containerd's --state, or state in its config.toml)")
	case err != nil:
		add("containerd state", checkWarn, "cannot tell whether jobs can reach containerd's state: "+err.Error(), "run gpunex doctor as root on the provider's host")
	default:
		add("containerd state", checkOK, found, "")
	}
}

// doctorJobs checks what jobs run on: containerd, runc, cgroup v2, user namespaces, and
// what the running node says of its sandbox.
func doctorJobs(ctx context.Context, cfg config.Config, st *api.Status, add func(name, status, found, fix string)) {
	if v, err := sandbox.ContainerdVersion(ctx, cfg.Jobs.ContainerdAddress); err != nil {
		add("containerd", checkFail, err.Error(), "install containerd (`apt-get install containerd runc`) and start it (`systemctl enable --now containerd`), or set jobs.containerd_address")
	} else {
		add("containerd", checkOK, v+" at "+cfg.Jobs.ContainerdAddress, "")
		if cfg.Jobs.UserNamespaces {
			doctorContainerdState(ctx, cfg.Jobs.ContainerdAddress, add)
		}
	}
	if path, err := exec.LookPath("runc"); err != nil {
		add("runc", checkFail, "runc is not on PATH", "`apt-get install runc`")
	} else if out, err := exec.CommandContext(ctx, path, "--version").Output(); err != nil {
		add("runc", checkFail, fmt.Sprintf("%s --version: %v", path, err), "reinstall runc")
	} else {
		add("runc", checkOK, strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0], "")
	}
	if found, err := sandbox.CgroupV2(); err != nil {
		status := checkFail
		if errors.Is(err, sandbox.ErrCgroupV1) {
			status = checkWarn
		}
		add("cgroup v2", status, err.Error(), "boot with the unified cgroup hierarchy (systemd's default since v247; kernel option systemd.unified_cgroup_hierarchy=1)")
	} else {
		add("cgroup v2", checkOK, found, "")
	}
	if found, err := sandbox.UserNamespacesAvailable(); err != nil {
		status := checkWarn
		if cfg.Jobs.UserNamespaces {
			status = checkFail
		}
		add("user namespaces", status, err.Error(), "`sysctl -w user.max_user_namespaces=15000` (and in /etc/sysctl.d), or set jobs.user_namespaces = false (weaker isolation, docs/sandbox.md)")
	} else {
		add("user namespaces", checkOK, found, "")
	}
	if st == nil || st.Sandbox == nil {
		return
	}
	switch s := st.Sandbox; {
	case s.Error != "":
		add("sandbox", checkFail, "the node cannot run jobs: "+s.Error, "fix the containerd check above, then restart the node")
	case s.EgressOff != "" || s.UserNamespacesOff != "":
		add("sandbox", checkWarn, strings.TrimSpace("jobs run, with less than configured: "+s.EgressOff+" "+s.UserNamespacesOff), "see docs/sandbox.md, \"Kernel requirements\"")
	default:
		add("sandbox", checkOK, fmt.Sprintf("jobs run, egress %s, user namespaces %v", s.Egress, s.UserNamespaces), "")
	}
}

// doctorCertificate checks the provider's certificate, through its running node.
func doctorCertificate(ctx context.Context, h config.Home, st *api.Status, add func(name, status, found, fix string)) {
	if st == nil {
		add("certificate", checkSkip, "the node is not running", "")
		return
	}
	cl, err := api.NewClient(h)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := cl.ApplyStatus(ctx)
	switch {
	case err != nil && errors.Is(err, api.ErrNotFound):
		add("certificate", checkFail, "no application yet", "apply: `gpunex apply --home "+h.Dir+"`")
	case err != nil:
		add("certificate", checkWarn, err.Error(), "")
	case v.Certificate == nil:
		add("certificate", checkFail, "application "+v.ID+": "+v.Status+", no certificate", "follow it: `gpunex apply status --home "+h.Dir+"`")
	default:
		left := time.Until(v.Certificate.ExpiresAt)
		found := fmt.Sprintf("%s tier, expires %s", v.Certificate.Tier, v.Certificate.ExpiresAt.Local().Format(time.DateTime))
		switch {
		case left <= 0:
			add("certificate", checkFail, "expired: "+found, "the coordinator renews approved certificates; ask it (`gpunex apply status`), or apply again")
		case left < 14*24*time.Hour:
			add("certificate", checkWarn, found, "renewal is due: the node asks the coordinator for it; check `gpunex apply status`")
		default:
			add("certificate", checkOK, found, "")
		}
	}
}

// doctorSolana checks a coordinator's Solana RPC endpoint: reachable, on the cluster
// configured.
func doctorSolana(ctx context.Context, cfg config.Config, add func(name, status, found, fix string)) {
	s := cfg.Settlement
	if s.RPC == "" {
		add("solana", checkWarn, "settlement.rpc is empty: no payouts in USDC", "set settlement.network or settlement.rpc (docs/config.md)")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hash, err := solana.Dial(s.RPC).GenesisHash(ctx)
	switch {
	case err != nil:
		add("solana", checkFail, fmt.Sprintf("%s: %v", s.RPC, err), "check settlement.rpc and that this machine reaches it")
	case s.Cluster != "" && hash != s.Cluster:
		add("solana", checkFail, fmt.Sprintf("%s serves cluster %s, not settlement.cluster %s", s.RPC, hash, s.Cluster), "point settlement.rpc at the cluster configured")
	default:
		add("solana", checkOK, fmt.Sprintf("%s, cluster %s", s.RPC, hash), "")
	}
}

func printDoctor(w io.Writer, r doctorReport) {
	tw := newTable(w)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tFOUND")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, strings.ToUpper(c.Status), c.Found)
	}
	tw.Flush()
	for _, c := range r.Checks {
		if c.Fix != "" && (c.Status == checkFail || c.Status == checkWarn) {
			fmt.Fprintf(w, "%s: %s\n", c.Name, c.Fix)
		}
	}
	if r.OK {
		fmt.Fprintf(w, "this %s node can serve its role\n", r.Role)
	} else {
		fmt.Fprintln(w, "this node cannot serve its role: fix the checks marked FAIL")
	}
}
