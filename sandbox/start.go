package sandbox

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
)

// Start creates the job's container (its own snapshot of the image, the spec described at
// specOpts), gives OutputDir to the job's user, starts its process with stdout and stderr
// appended to LogPath by the job logger (joblog.go, run by containerd's shim), and starts
// its monitor.
func (c *Containerd) Start(ctx context.Context, spec Spec) (err error) {
	if err := spec.Validate(); err != nil {
		return err
	}
	ctx = c.ns(ctx)
	img, err := c.image(ctx, spec.Image)
	if err != nil {
		return err
	}
	// The container's snapshot and spec are made from the record as read here (img),
	// never from the name again: what is checked here is what the job runs.
	if got := img.Target().Digest.String(); spec.ImageDigest != "" && got != spec.ImageDigest {
		return fmt.Errorf("job %s: %w: %s is %s now, not %s: import or pull it again", spec.ID, ErrImageChanged, spec.Image, got, spec.ImageDigest)
	}
	cfg, err := c.imageConfig(ctx, img)
	if err != nil {
		return err
	}
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.markUsed(context.WithoutCancel(ctx), img.Name()) }()
	var ns jobNamespaces // a job with egress joins namespaces made ahead
	if spec.Egress {
		if c.net.opts.Policy == EgressDeny {
			return fmt.Errorf("job %s: %w", spec.ID, ErrEgressOff)
		}
		if err := c.net.install(); err != nil {
			return fmt.Errorf("job %s: set up the jobs' network: %w", spec.ID, err)
		}
		// The pool is refilled once this job has started (or failed to): making
		// namespaces takes kernel locks the start needs too.
		defer c.refillNamespaces()
		if ns, err = c.takeNamespaces(ctx, spec.ID); err != nil {
			return fmt.Errorf("job %s: %w", spec.ID, err)
		}
		defer func() {
			if err != nil {
				c.dropNamespaces(context.WithoutCancel(ctx), ns, spec.ID)
			}
		}()
	}
	uid, gid := uint32(JobUID), uint32(JobGID)
	var base uint32
	if c.userns {
		if ns.user != "" {
			base = ns.base
		} else if base, err = c.reserveUserns(spec.ID); err != nil {
			return fmt.Errorf("job %s: %w", spec.ID, err)
		} else {
			defer func() {
				if err != nil {
					c.releaseUserns(base, spec.ID)
				}
			}()
		}
		uid, gid = base+JobUID, base+JobGID
	}
	if err := os.Chown(spec.OutputDir, int(uid), int(gid)); err != nil {
		return fmt.Errorf("give OutputDir to the job's user %d (the runtime must run as root): %w", uid, err)
	}
	var cdiGPUs oci.SpecOpts
	if names, ok := c.gpus.names(spec.GPUs); ok {
		cdiGPUs = c.gpus.withCDI(names)
	} else if slices.ContainsFunc(spec.GPUs, func(g GPU) bool { return !g.Simulated }) {
		c.log.Warn("no CDI spec names this job's GPUs: giving it their device nodes and a short list of driver libraries instead (run nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)", "job", spec.ID)
	}
	opts, err := specOpts(cfg, spec, c.devDir, c.net.resolv, cdiGPUs)
	if err != nil {
		return fmt.Errorf("job %s: %w", spec.ID, err)
	}
	if c.userns {
		opts = append(opts, withUserns(base))
	}
	if ns.net != "" {
		opts = append(opts, withNamespacePaths(ns)) // after withUserns
	}
	// The logger appends to them; a log that cannot be created fails the start here.
	if err := createLogFiles(spec.LogPath); err != nil {
		return fmt.Errorf("job %s: its log: %w", spec.ID, err)
	}
	return c.createAndStart(ctx, spec, img, opts, c.jobLabels(spec, base, ns))
}

// jobLabels are what the runtime records on a job's container (the label constants):
// the job's limits and paths, its owner, its user-namespace range and pinned namespaces.
func (c *Containerd) jobLabels(spec Spec, base uint32, ns jobNamespaces) map[string]string {
	labels := map[string]string{
		labelJob:       "1",
		labelWallClock: spec.WallClock.String(),
		labelOutputDir: spec.OutputDir,
		labelOutputMax: strconv.FormatInt(spec.ScratchBytes, 10),
		labelLogPath:   spec.LogPath,
		labelLogMax:    strconv.FormatInt(c.opts.MaxLogBytes, 10),
	}
	if c.opts.Owner != "" {
		labels[labelOwner] = c.opts.Owner
	}
	if c.userns {
		labels[labelUIDBase] = strconv.FormatUint(uint64(base), 10)
	}
	if ns.net != "" { // Remove takes them down
		labels[labelNetns] = ns.net
		if ns.user != "" {
			labels[labelUserns] = ns.user
		}
	}
	return labels
}

// createAndStart creates the job's container and task and starts it; on an error it leaves
// neither behind.
func (c *Containerd) createAndStart(ctx context.Context, spec Spec, img client.Image, opts []oci.SpecOpts, labels map[string]string) (err error) {
	// The job's wall clock counts from here, the few milliseconds before its process
	// starts included (one call to containerd fewer than recording it after the start).
	labels[labelStartedAt] = time.Now().UTC().Format(time.RFC3339Nano)
	ctr, err := c.client.NewContainer(ctx, spec.ID,
		client.WithImage(img),
		client.WithSnapshotter(c.opts.Snapshotter),
		client.WithNewSnapshot(spec.ID, img),
		client.WithNewSpec(opts...),
		client.WithContainerLabels(labels),
	)
	if err != nil {
		if errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("job %s already exists in containerd (%w): Remove it first", spec.ID, err)
		}
		// The snapshot may have been made before the container failed.
		if _, lerr := c.client.LoadContainer(ctx, spec.ID); errdefs.IsNotFound(lerr) {
			c.client.SnapshotService(c.opts.Snapshotter).Remove(ctx, spec.ID)
		}
		return fmt.Errorf("create the container of job %s: %w", spec.ID, err)
	}
	defer func() {
		if err != nil {
			ctr.Delete(context.WithoutCancel(ctx), client.WithSnapshotCleanup)
		}
	}()
	if c.userns {
		if err := c.prepareRootfs(ctx, ctr); err != nil {
			return fmt.Errorf("job %s: prepare its root file system: %w", spec.ID, err)
		}
	}
	// The rules of the jobs' network are checked (and put back if something flushed
	// them) while the task is created, and must be in place before the job runs.
	var rulesChecked chan error
	if spec.Egress {
		rulesChecked = make(chan error, 1)
		go func() { rulesChecked <- c.ensureNetworkRules() }()
	}
	task, err := ctr.NewTask(ctx, cio.BinaryIO(c.opts.LogBinary, map[string]string{
		loggerPathArg: spec.LogPath, loggerMaxArg: strconv.FormatInt(c.opts.MaxLogBytes, 10),
	}))
	if err != nil {
		return fmt.Errorf("create the task of job %s: %w", spec.ID, err)
	}
	defer func() {
		if err != nil {
			task.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		}
	}()
	if spec.Egress {
		if err = <-rulesChecked; err != nil {
			return fmt.Errorf("job %s: the jobs' network rules: %w", spec.ID, err)
		}
	}
	if err := task.Start(ctx); err != nil {
		return fmt.Errorf("start job %s: %w", spec.ID, err)
	}
	c.watch(spec.ID)
	return nil
}
