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
	key := fmt.Sprintf("%s%d-%s", namespaceOwnerPrefix(c.opts.Namespace, c.opts.Owner), c.pid, hex.EncodeToString(rnd[:]))
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
	if err := holdNamespaces(c.opts.LogBinary, c.userns, ns.base, ns.user, ns.net); err != nil {
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
	err := c.net.detach(ctx, ns.net)
	if ns.user != "" {
		if uerr := unpinNetns(ns.user); uerr != nil && !errors.Is(uerr, os.ErrNotExist) {
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

// removeNamespaceLeftovers takes down the namespaces that a killed process of this node
// (same containerd namespace and owner) made and that no job joined.
func (c *Containerd) removeNamespaceLeftovers(ctx context.Context) error {
	ctrs, err := c.client.Containers(ctx)
	if err != nil {
		return err
	}
	inUse := map[string]bool{}
	for _, ctr := range ctrs {
		if labels, err := ctr.Labels(ctx); err == nil && labels[labelNetns] != "" {
			inUse[labels[labelNetns]] = true
		}
	}
	dir := filepath.Join(c.net.opts.RunDir, "netns")
	entries, _ := os.ReadDir(dir)
	prefix := namespaceOwnerPrefix(c.opts.Namespace, c.opts.Owner)
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		pin := filepath.Join(dir, e.Name())
		if !ok || strings.HasSuffix(rest, ".user") || inUse[pin] {
			continue
		}
		// rest is PID-RANDOM[-BASE]
		f := strings.Split(rest, "-")
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid == c.pid || processAlive(pid) {
			continue
		}
		ns := jobNamespaces{net: pin}
		if len(f) == 3 {
			if b, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				ns.user, ns.base = pin+".user", uint32(b)
				c.mu.Lock()
				if _, used := c.uidBases[ns.base]; !used {
					c.uidBases[ns.base] = e.Name()
				}
				c.mu.Unlock()
			}
		}
		c.log.Info("taking down namespaces made ahead by a node process that ended", "pin", pin)
		errs = append(errs, c.dropNamespaces(ctx, ns, e.Name()))
	}
	return errors.Join(errs...)
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
