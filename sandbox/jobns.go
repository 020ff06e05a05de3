package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A job with egress joins namespaces made and connected ahead of it: connecting a network
// namespace (the CNI plugins are programs to run) takes about 25 ms, which a pool of
// ready namespaces takes off the job's start. The network namespace must belong to the
// job's user namespace (the job's runc mounts /sys, which the kernel allows only to the
// owner of the network namespace), so both are made together, by a short-lived process
// of the node's own binary (sandbox/internal/nshold) started in new namespaces with the
// job's id mapping, and pinned (bind-mounted) under RunDir/netns.

// namespacePoolSize is how many ready namespace pairs wait for the next jobs with egress.
const namespacePoolSize = 1

// labelUserns records the pinned user namespace a job joined.
const labelUserns = "gpunex/userns"

// jobNamespaces are a job's network namespace, connected, and its user namespace.
type jobNamespaces struct {
	net  string // pin of the network namespace (RunDir/netns/NAME); detach takes it down
	user string // pin of the user namespace (NAME.user); empty without user namespaces
	base uint32 // first host id of the user namespace's range
}

// namespaceOwnerPrefix starts the pin names of a runtime's namespaces: its containerd
// namespace and owner; the process id follows, so that a restart finds what a killed
// process left (removeNamespaceLeftovers).
func namespaceOwnerPrefix(namespace, owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return namespace + "-" + hex.EncodeToString(sum[:4]) + "-ns-"
}

// makeNamespaces makes a connected network namespace and, with user namespaces, the
// user namespace that owns it, mapped to a range of its own.
func (c *Containerd) makeNamespaces(ctx context.Context) (ns jobNamespaces, err error) {
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return ns, err
	}
	key := fmt.Sprintf("%s%s-%s", namespaceOwnerPrefix(c.opts.Namespace, c.opts.Owner), c.self, hex.EncodeToString(rnd[:]))
	if c.userns {
		if ns.base, err = c.reserveUserns(key); err != nil {
			return ns, err
		}
		holder := key
		key += "-" + strconv.FormatUint(uint64(ns.base), 10)
		c.mu.Lock()
		if c.uidBases[ns.base] == holder {
			c.uidBases[ns.base] = key
		}
		c.mu.Unlock()
	}
	dir := filepath.Join(c.net.opts.RunDir, "netns")
	ns.net = filepath.Join(dir, key)
	if c.userns {
		ns.user = ns.net + ".user"
	}
	if err := c.net.pins.holdNamespaces(c.opts.LogBinary, c.userns, ns.base, ns.user, ns.net); err != nil {
		c.releaseUserns(ns.base, key)
		return jobNamespaces{}, fmt.Errorf("the job's namespaces: %w", err)
	}
	if err := c.net.connect(ctx, ns.net); err != nil {
		c.dropNamespaces(context.WithoutCancel(ctx), ns, key)
		return jobNamespaces{}, err
	}
	return ns, nil
}

// takeNamespaces gives a job (id) ready namespaces: from the pool, or made now when the
// pool is empty. The caller refills the pool once the job has started.
func (c *Containerd) takeNamespaces(ctx context.Context, id string) (ns jobNamespaces, err error) {
	select {
	case ns = <-c.nsPool:
	default:
		if ns, err = c.makeNamespaces(ctx); err != nil {
			return ns, err
		}
	}
	if ns.user != "" {
		c.mu.Lock()
		c.uidBases[ns.base] = id // the job's range now
		c.mu.Unlock()
	}
	return ns, nil
}

// refillNamespaces fills the pool in the background, one refill at a time, at the lowest
// CPU priority: the programs it runs (the holder, the CNI plugins) inherit it, so that
// making namespaces ahead never slows the start of the job that emptied the pool.
func (c *Containerd) refillNamespaces() {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		runtime.LockOSThread()
		setThreadPriority(19)
		defer func() {
			if err := setThreadPriority(0); err != nil {
				c.log.Warn("a thread of the node keeps the lowest CPU priority", "err", err)
			}
			runtime.UnlockOSThread()
		}()
		c.nsRefill.Lock()
		defer c.nsRefill.Unlock()
		for len(c.nsPool) < cap(c.nsPool) && c.ctx.Err() == nil {
			ns, err := c.makeNamespaces(c.ctx)
			if err != nil {
				if c.ctx.Err() == nil {
					c.log.Warn("namespaces for the next job with egress could not be made ahead: they will be at its start", "err", err)
				}
				return
			}
			c.nsPool <- ns // only a refill adds, and it checked the room
		}
	}()
}

// dropNamespaces takes a job's namespaces down and frees their range (holder: whom the
// range was reserved for).
func (c *Containerd) dropNamespaces(ctx context.Context, ns jobNamespaces, holder string) error {
	var err error
	if ns.net != "" { // (a user namespace left alone has none)
		err = c.net.detach(ctx, ns.net)
	}
	if ns.user != "" {
		if uerr := c.net.pins.unpinNetns(ns.user); uerr != nil && !errors.Is(uerr, os.ErrNotExist) {
			err = errors.Join(err, uerr)
		}
		c.releaseUserns(ns.base, holder)
	}
	return err
}

// drainNamespaces takes down the namespaces waiting in the pool (Close).
func (c *Containerd) drainNamespaces(ctx context.Context) error {
	var errs []error
	for {
		select {
		case ns := <-c.nsPool:
			errs = append(errs, c.dropNamespaces(ctx, ns, filepath.Base(ns.net)))
		default:
			return errors.Join(errs...)
		}
	}
}

// removeNamespaceLeftovers takes down the namespaces that an ended process of this node
// (same containerd namespace and owner) made and that no job joined: pairs made ahead, and
// user namespaces left pinned alone by a take-down that stopped half-way. Whether their
// maker ended is told by its processID, not its pid alone: a pid is reused, and a node in
// a container is pid 1 at every start.
func (c *Containerd) removeNamespaceLeftovers(ctx context.Context) error {
	inUse, err := c.pinsInUse(ctx)
	if err != nil {
		return err
	}
	dir := filepath.Join(c.net.opts.RunDir, "netns")
	entries, _ := os.ReadDir(dir)
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	prefix := namespaceOwnerPrefix(c.opts.Namespace, c.opts.Owner)
	var errs []error
	for _, e := range entries {
		netName, userOnly := strings.CutSuffix(e.Name(), ".user")
		rest, ok := strings.CutPrefix(netName, prefix)
		pin := filepath.Join(dir, netName)
		if !ok || (userOnly && names[netName]) || inUse[pin] || inUse[pin+".user"] || !c.makerEnded(rest) {
			continue // not ours, taken down with its network namespace, or in use
		}
		ns := jobNamespaces{net: pin}
		if userOnly {
			ns = jobNamespaces{user: pin + ".user"}
		}
		// rest is PROCESS-RANDOM[-BASE]
		if f := strings.Split(rest, "-"); len(f) == 3 {
			if b, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				ns.user, ns.base = pin+".user", uint32(b)
				c.mu.Lock()
				if _, used := c.uidBases[ns.base]; !used {
					c.uidBases[ns.base] = netName
				}
				c.mu.Unlock()
			}
		}
		c.log.Info("taking down namespaces made ahead by a node process that ended", "pin", e.Name())
		errs = append(errs, c.dropNamespaces(ctx, ns, netName))
	}
	return errors.Join(errs...)
}

// pinsInUse are the namespace pins the containers of the namespace name, whatever their
// owner: read in one list, so that a failed read never passes for "no job uses it".
func (c *Containerd) pinsInUse(ctx context.Context) (map[string]bool, error) {
	ctrs, err := c.client.ContainerService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the jobs' containers: %w", err)
	}
	inUse := map[string]bool{}
	for _, ctr := range ctrs {
		for _, k := range []string{labelNetns, labelUserns} {
			if v := ctr.Labels[k]; v != "" {
				inUse[v] = true
			}
		}
	}
	return inUse, nil
}

// makerEnded tells whether the process that made a pin has ended; rest is the pin's name
// after the owner's prefix, PROCESS-RANDOM[-BASE].
func (c *Containerd) makerEnded(rest string) bool {
	first, _, _ := strings.Cut(rest, "-")
	if p, ok := parseProcessID(first); ok {
		return p != c.self && !p.running(c.self.boot)
	}
	// Named by a version before processID, by the pid alone.
	pid, err := strconv.Atoi(first)
	return err == nil && (pid == c.self.pid || !processAlive(pid))
}

// processID names a process of a node on this host across pid reuse and reboots: the
// boot it runs in, its pid and its start time. The pins of the namespaces a process makes
// carry it, so that the next process of the node knows whether their maker still runs.
type processID struct {
	boot  string // the first 8 hex digits of /proc/sys/kernel/random/boot_id
	pid   int
	start uint64 // field 22 of /proc/PID/stat: clock ticks after boot
}

func (p processID) String() string { return fmt.Sprintf("b%s.%d.%d", p.boot, p.pid, p.start) }

// parseProcessID reads what String wrote.
func parseProcessID(s string) (processID, bool) {
	rest, ok := strings.CutPrefix(s, "b")
	f := strings.Split(rest, ".")
	if !ok || len(f) != 3 {
		return processID{}, false
	}
	pid, err := strconv.Atoi(f[1])
	start, serr := strconv.ParseUint(f[2], 10, 64)
	if err != nil || serr != nil || pid <= 0 {
		return processID{}, false
	}
	return processID{boot: f[0], pid: pid, start: start}, true
}

// thisProcess is the running process's processID.
func thisProcess() processID {
	pid := os.Getpid()
	start, _ := processStart(pid)
	return processID{boot: bootID(), pid: pid, start: start}
}

// bootID names the host's current boot (the kernel makes a random one at each boot).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")
	if err != nil || len(id) < 8 {
		return "00000000"
	}
	return id[:8]
}

// running tells whether the process p names still runs: it is of this boot, and the
// process with its pid started when it did.
func (p processID) running(boot string) bool {
	if p.boot != boot {
		return false
	}
	start, err := processStart(p.pid)
	return err == nil && start == p.start
}

// processStart reads when a process started: field 22 of /proc/PID/stat, after the
// command's name in parentheses (which may hold spaces and parentheses itself).
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat is unreadable", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// withNamespacePaths makes the job join its pinned namespaces.
func withNamespacePaths(ns jobNamespaces) oci.SpecOpts {
	return func(ctx context.Context, cl oci.Client, ctr *containers.Container, s *oci.Spec) error {
		if ns.user != "" {
			if err := oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.UserNamespace, Path: ns.user})(ctx, cl, ctr, s); err != nil {
				return err
			}
		}
		return oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: ns.net})(ctx, cl, ctr, s)
	}
}
