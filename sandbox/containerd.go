package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1/stats"
	statsv2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/platforms"
	"github.com/containerd/typeurl/v2"
	godigest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
)

// Defaults of ContainerdOptions.
const (
	DefaultContainerdAddress = "/run/containerd/containerd.sock"
	DefaultNamespace         = "gpunex"
	DefaultSnapshotter       = "overlayfs"
	DefaultKillGrace         = 2 * time.Second
	DefaultMaxLogBytes       = 64 << 20
)

// How often the monitor of a running job measures its log (a stat) and its /output (a
// walk of the folder).
const (
	logCheckEvery    = 200 * time.Millisecond
	outputCheckEvery = time.Second
)

// networkCheckEvery is how often the jobs' network rules are checked while a runtime runs.
const networkCheckEvery = 30 * time.Second

// maxReasonLen bounds the kill reason kept in a label.
const maxReasonLen = 256

// What Containerd keeps about a job, as labels on its container: labels live in
// containerd's database, so a new Containerd (after the node restarted) reads them back.
const (
	labelJob        = "gpunex/job"         // "1": a container made by Start
	labelStartedAt  = "gpunex/started-at"  // RFC 3339 time the job's container was made, just before its start
	labelWallClock  = "gpunex/wallclock"   // Spec.WallClock, a Go duration
	labelOutputDir  = "gpunex/output-dir"  // Spec.OutputDir, measured by the monitor
	labelOutputMax  = "gpunex/output-max"  // Spec.ScratchBytes, the most /output may hold
	labelLogPath    = "gpunex/log-path"    // Spec.LogPath, measured by the monitor
	labelLogMax     = "gpunex/log-max"     // ContainerdOptions.MaxLogBytes when it started
	labelKillReason = "gpunex/kill-reason" // the first reason given to Kill (or timeout)
	labelExit       = "gpunex/exit"        // the Exit as JSON, once known
	// labelOwner names the node that started the job (ContainerdOptions.Owner): a runtime
	// sees, watches, kills and removes only its own jobs, so that nodes sharing a
	// containerd namespace (a devnet, a misconfigured host) never touch each other's.
	labelOwner = "gpunex/owner"
	labelNetns = "gpunex/netns" // the pinned network namespace of a job with egress
)

// ContainerdOptions configure NewContainerd. Zero values take the defaults.
type ContainerdOptions struct {
	Address     string        // containerd's gRPC socket (DefaultContainerdAddress)
	Namespace   string        // the containerd namespace holding the jobs (DefaultNamespace)
	Snapshotter string        // DefaultSnapshotter
	KillGrace   time.Duration // time between SIGTERM and SIGKILL in Kill (DefaultKillGrace)
	// MaxLogBytes bounds a job's log (DefaultMaxLogBytes): the job logger (joblog.go)
	// writes at most this much and discards the rest, and the monitor then kills the job
	// with ReasonLogLimit (SIGKILL at once) within logCheckEvery.
	MaxLogBytes int64
	// LogBinary is the program containerd's shim runs to write a job's log: a binary
	// that calls RunLoggerIfInvoked first thing (the running one, os.Executable(), by
	// default; an absolute path).
	LogBinary string
	// Owner identifies the node running the jobs (its peer ID): jobs are labelled with it,
	// and List, Wait, Kill and Remove ignore containers another owner labelled. Containers
	// without an owner (made by versions before it existed) belong to every runtime.
	Owner string
	// Network is what jobs with egress get (network.go); its zero value refuses egress.
	Network NetworkOptions
	// MaxUnpackedBytes bounds what an image may hold once unpacked, checked before it is
	// (imagelimits.go; DefaultMaxUnpackedBytes); MaxImageEntries its files
	// (DefaultMaxImageEntries).
	MaxUnpackedBytes int64
	MaxImageEntries  int64
	// MaxPullBytes bounds the compressed layers a pull downloads (DefaultMaxPullBytes).
	MaxPullBytes int64
	// Registries are the registries PullImage may pull from (DefaultRegistries), at public
	// addresses only unless PrivateRegistries.
	Registries        []string
	PrivateRegistries bool
	// CDISpecDirs are where the CDI specs of the host's GPUs are (DefaultCDISpecDirs).
	CDISpecDirs []string
	// NoUserNamespaces runs jobs without user namespaces even where the host has them
	// (userns.go); their uid 65534 is then the host's.
	NoUserNamespaces bool
	Logger           *slog.Logger // slog.Default() with subsystem=sandbox
}

// Containerd runs jobs as containerd containers (runc). It needs root on the host running
// the containerd daemon, and runs the jobs as described at specOpts. Everything it knows
// about a job lives in containerd (labels on the job's container), so a Containerd made
// after a restart of the node finds, watches and reports the jobs of the one before.
//
// A running job is watched by a goroutine of this process (its monitor), which kills it at
// its wall-clock limit, and when its /output or its log grows past its limit.
// NewContainerd, List and Wait start monitors for the running jobs they find, so limits
// are also enforced for jobs started before a restart, at once if their time ran out
// meanwhile. Close stops the monitors and leaves the jobs running.
//
// Besides the job's own folders, containerd's runc shim keeps state in
// /run/containerd/runc/<namespace> and its sockets in /run/containerd/s (fixed paths in
// containerd 1.6), whichever daemon started it.
type Containerd struct {
	client *client.Client
	opts   ContainerdOptions
	log    *slog.Logger
	devDir string // the host's device nodes: "/dev"
	net    *jobNetwork
	// nsPool holds namespaces ready for the next jobs with egress (jobns.go).
	nsPool   chan jobNamespaces
	nsRefill sync.Mutex
	pid      int // this process (os.Getpid), in the names of the namespaces it makes
	gpus     *gpuDevices
	// userns is whether jobs get user namespaces; usernsOff says why not.
	userns    bool
	usernsOff string

	ctx    context.Context // namespaced; the monitors run under it until Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	monitors map[string]*monitor
	configs  map[string]ocispec.Image // image configs by manifest digest (immutable)
	unpacked map[string]bool          // manifest digests known to be unpacked
	uidBases map[uint32]string        // user-namespace ranges in use, by first host uid: the job
}

type monitor struct{ cancel context.CancelFunc }

var _ Runtime = (*Containerd)(nil)

// NewContainerd connects to containerd and starts monitoring the jobs already in its
// namespace. It fails with an error saying how to install or configure containerd when
// the socket does not answer.
func NewContainerd(ctx context.Context, o ContainerdOptions) (*Containerd, error) {
	if o.Address == "" {
		o.Address = DefaultContainerdAddress
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Snapshotter == "" {
		o.Snapshotter = DefaultSnapshotter
	}
	if o.KillGrace <= 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.MaxLogBytes <= 0 {
		o.MaxLogBytes = DefaultMaxLogBytes
	}
	if o.MaxUnpackedBytes <= 0 {
		o.MaxUnpackedBytes = DefaultMaxUnpackedBytes
	}
	if o.MaxImageEntries <= 0 {
		o.MaxImageEntries = DefaultMaxImageEntries
	}
	if o.MaxPullBytes <= 0 {
		o.MaxPullBytes = DefaultMaxPullBytes
	}
	if o.Registries == nil {
		o.Registries = DefaultRegistries
	}
	if o.Logger == nil {
		o.Logger = slog.Default().With("subsystem", "sandbox")
	}
	if o.LogBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this binary to write job logs: %w", err)
		}
		o.LogBinary = exe
	}
	unreachable := func(err error) error {
		return fmt.Errorf("containerd not reachable at %s (%v): install it with apt-get install containerd runc, or set jobs.containerd_address", o.Address, err)
	}
	if _, err := os.Stat(o.Address); err != nil {
		return nil, unreachable(err)
	}
	cl, err := client.New(o.Address, client.WithDefaultNamespace(o.Namespace), client.WithTimeout(5*time.Second))
	if err != nil {
		return nil, unreachable(err)
	}
	nctx := namespaces.WithNamespace(ctx, o.Namespace)
	if ok, err := cl.IsServing(nctx); err != nil || !ok {
		cl.Close()
		if err == nil {
			err = errors.New("not serving")
		}
		return nil, unreachable(err)
	}
	if _, err := cl.SnapshotService(o.Snapshotter).Stat(nctx, "gpunex-probe"); err != nil && !errdefs.IsNotFound(err) {
		cl.Close()
		return nil, fmt.Errorf("containerd at %s has no usable %q snapshotter (%v): check its config and log", o.Address, o.Snapshotter, err)
	}
	jn, err := newJobNetwork(o.Network)
	if err != nil {
		cl.Close()
		return nil, err
	}
	c := &Containerd{
		client: cl, opts: o, log: o.Logger, devDir: "/dev", net: jn, gpus: newGPUDevices(o.CDISpecDirs),
		nsPool: make(chan jobNamespaces, namespacePoolSize), pid: os.Getpid(), monitors: map[string]*monitor{}, configs: map[string]ocispec.Image{}, unpacked: map[string]bool{}, uidBases: map[uint32]string{},
	}
	c.userns, c.usernsOff = usernsSupport()
	if o.NoUserNamespaces {
		c.userns, c.usernsOff = false, "turned off by the node's configuration (jobs.user_namespaces = false)"
	}
	if !c.userns {
		c.log.Warn("jobs run without user namespaces: a process escaping its container would be the host's uid 65534", "why", c.usernsOff)
	}
	c.ctx, c.cancel = context.WithCancel(namespaces.WithNamespace(context.Background(), o.Namespace))
	if jn.opts.Policy != EgressDeny {
		c.wg.Add(1)
		go c.guardNetworkRules()
	}
	if _, err := c.List(ctx); err != nil { // starts the monitors of running jobs
		c.Close()
		return nil, fmt.Errorf("list the jobs in containerd namespace %s: %w", o.Namespace, err)
	}
	if jn.opts.Policy != EgressDeny {
		if err := c.removeNamespaceLeftovers(nctx); err != nil {
			c.log.Warn("namespaces left by a node process that ended could not all be taken down", "err", err)
		}
	}
	return c, nil
}

// ns puts the runtime's namespace on a context.
func (c *Containerd) ns(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, c.opts.Namespace)
}

// Egress is what the runtime's jobs with egress get: its policy and bandwidth cap.
func (c *Containerd) Egress() (policy string, mbps int64) {
	return c.net.opts.Policy, c.net.opts.EgressMbps
}

// ensureNetworkRules checks the jobs' network rules, putting them back when something
// removed them, and says so.
func (c *Containerd) ensureNetworkRules() error {
	reinstalled, err := c.net.ensure()
	if reinstalled && err == nil {
		c.log.Warn("the jobs' network rules were missing (a firewall reload?): put back", "network", c.net.opts.Name)
	}
	return err
}

// guardNetworkRules checks the jobs' network rules every networkCheckEvery while jobs
// with egress may run, so that a firewall reload leaves them unprotected that long at most.
func (c *Containerd) guardNetworkRules() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(networkCheckEvery):
		}
		if c.net.installed() {
			if err := c.ensureNetworkRules(); err != nil {
				c.log.Error("the jobs' network rules cannot be put back: jobs with egress are not protected", "err", err)
			}
		}
	}
}

// UserNamespaces says whether jobs get user namespaces, and why not.
func (c *Containerd) UserNamespaces() (bool, string) { return c.userns, c.usernsOff }

// RemoveNetworkRules removes the iptables rules of the jobs' network (tests, and a
// provider that turns egress off; running jobs with egress lose their network).
func (c *Containerd) RemoveNetworkRules() error {
	if c.net.opts.Policy == EgressDeny {
		return nil
	}
	return c.net.Uninstall()
}

// Client is the containerd client, for callers that need more (tests, benchmarks). Its
// calls need a context carrying the runtime's namespace (Namespace).
func (c *Containerd) Client() *client.Client { return c.client }

// Namespace is the containerd namespace holding the jobs.
func (c *Containerd) Namespace() string { return c.opts.Namespace }

// ImportImage loads an OCI layout tar, unpacks it for the snapshotter, and returns the
// name jobs use, import.gpunex.local/image@<manifest digest> (whatever name the archive
// gives itself), and its manifest digest. Only the host's platform is imported.
func (c *Containerd) ImportImage(ctx context.Context, archive io.Reader) (ref, digest string, err error) {
	ctx = c.ns(ctx)
	imgs, err := c.client.Import(ctx, archive,
		client.WithAllPlatforms(false),
		client.WithDigestRef(func(d godigest.Digest) string { return "import.gpunex.local/image@" + d.String() }),
		client.WithSkipDigestRef(func(name string) bool { return name != "" }),
	)
	if err != nil {
		return "", "", fmt.Errorf("import the image archive (an OCI layout tar is expected): %w", err)
	}
	// An index may name one manifest per platform: take this host's.
	i := slices.IndexFunc(imgs, func(img images.Image) bool {
		return img.Target.Platform == nil || platforms.Default().Match(*img.Target.Platform)
	})
	if i < 0 {
		return "", "", fmt.Errorf("import the image archive: it holds no image for %s", platforms.DefaultString())
	}
	img := imgs[i]
	if err := c.checkUnpackedSize(ctx, img.Target); err != nil {
		for _, im := range imgs {
			c.dropImage(ctx, im.Name)
		}
		return "", "", fmt.Errorf("import the image archive: %w", err)
	}
	if err := client.NewImage(c.client, img).Unpack(ctx, c.opts.Snapshotter); err != nil {
		return "", "", fmt.Errorf("unpack image %s: %w", img.Name, err)
	}
	// Jobs refer to the image by its manifest digest: an archive's own name is chosen by
	// whoever built it, and another renter's archive with the same name would replace it.
	name := "import.gpunex.local/image@" + img.Target.Digest.String()
	if img.Name != name {
		is := c.client.ImageService()
		if _, err := is.Create(ctx, images.Image{Name: name, Target: img.Target}); err != nil {
			if !errdefs.IsAlreadyExists(err) {
				return "", "", fmt.Errorf("name image %s: %w", name, err)
			}
			if _, err := is.Update(ctx, images.Image{Name: name, Target: img.Target}); err != nil {
				return "", "", fmt.Errorf("name image %s: %w", name, err)
			}
		}
		// The archive's own name is not used: drop it (the content stays, named by digest).
		if err := is.Delete(ctx, img.Name); err != nil && !errdefs.IsNotFound(err) {
			return "", "", fmt.Errorf("drop image name %s: %w", img.Name, err)
		}
	}
	c.mu.Lock()
	c.unpacked[img.Target.Digest.String()] = true
	c.mu.Unlock()
	return name, img.Target.Digest.String(), nil
}

// PullImage fetches an image from one of the allowed registries (Registries, at public
// addresses), at most MaxPullBytes of layers, checks what it unpacks to
// (checkUnpackedSize), and unpacks it.
func (c *Containerd) PullImage(ctx context.Context, ref string) (digest string, err error) {
	ctx = c.ns(ctx)
	name, err := c.checkRegistry(ref)
	if err != nil {
		return "", err
	}
	img, err := c.client.Pull(ctx, name, append(c.pullOpts(), client.WithPullSnapshotter(c.opts.Snapshotter))...)
	if err != nil {
		if errors.Is(err, ErrImageTooLarge) || errors.Is(err, ErrRegistryRefused) {
			return "", fmt.Errorf("pull %s: %w", ref, err)
		}
		return "", fmt.Errorf("pull %s (can this machine reach its registry? otherwise import an archive): %w", ref, err)
	}
	if err := c.checkUnpackedSize(ctx, img.Target()); err != nil {
		c.dropImage(ctx, img.Name())
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	if err := img.Unpack(ctx, c.opts.Snapshotter); err != nil {
		return "", fmt.Errorf("unpack %s: %w", ref, err)
	}
	return img.Target().Digest.String(), nil
}

// ImageSize returns the size of the unpacked layers of an image (the sum of the usage of
// its snapshots).
func (c *Containerd) ImageSize(ctx context.Context, ref string) (int64, error) {
	ctx = c.ns(ctx)
	img, err := c.image(ctx, ref)
	if err != nil {
		return 0, err
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the layers of %s: %w", ref, err)
	}
	sn := c.client.SnapshotService(c.opts.Snapshotter)
	var size int64
	for _, chain := range identity.ChainIDs(diffIDs) {
		u, err := sn.Usage(ctx, chain.String())
		if err != nil {
			return 0, fmt.Errorf("image %s is not unpacked (%w): import or pull it again", ref, err)
		}
		size += u.Size
	}
	return size, nil
}

// image finds a present image.
func (c *Containerd) image(ctx context.Context, ref string) (client.Image, error) {
	img, err := c.client.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s: import or pull it first", ErrImageNotFound, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("look up image %s: %w", ref, err)
	}
	return img, nil
}

// imageConfig returns the config of an image, unpacking it first if it is not.
func (c *Containerd) imageConfig(ctx context.Context, img client.Image) (ocispec.Image, error) {
	key := img.Target().Digest.String()
	c.mu.Lock()
	cfg, ok := c.configs[key]
	unpacked := c.unpacked[key]
	c.mu.Unlock()
	if !unpacked {
		done, err := img.IsUnpacked(ctx, c.opts.Snapshotter)
		if err != nil {
			return cfg, fmt.Errorf("check image %s: %w", img.Name(), err)
		}
		if !done {
			if err := img.Unpack(ctx, c.opts.Snapshotter); err != nil {
				return cfg, fmt.Errorf("unpack image %s: %w", img.Name(), err)
			}
		}
	}
	if !ok {
		var err error
		if cfg, err = img.Spec(ctx); err != nil {
			return cfg, fmt.Errorf("read the config of image %s: %w", img.Name(), err)
		}
	}
	c.mu.Lock()
	c.configs[key], c.unpacked[key] = cfg, true
	c.mu.Unlock()
	return cfg, nil
}

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

// load finds a job's container; another owner's is not found.
func (c *Containerd) load(ctx context.Context, id string) (client.Container, error) {
	ctr, err := c.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("load job %s: %w", id, err)
	}
	labels, err := ctr.Labels(ctx)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("load job %s: %w", id, err)
	}
	if !c.owns(labels) {
		return nil, fmt.Errorf("%w: %s (it belongs to another node using containerd namespace %s)", ErrNotFound, id, c.opts.Namespace)
	}
	return ctr, nil
}

// owns tells whether a container with these labels is this runtime's.
func (c *Containerd) owns(labels map[string]string) bool {
	o := labels[labelOwner]
	return o == "" || c.opts.Owner == "" || o == c.opts.Owner
}

// Wait blocks until the job's process has ended and returns its Exit, which is also
// recorded on the container so that later calls return the same. It fails for a job
// whose task is gone without a recorded exit (the host rebooted, or containerd lost it).
func (c *Containerd) Wait(ctx context.Context, id string) (Exit, error) {
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return Exit{}, err
	}
	if e, ok, err := recordedExit(ctx, ctr); err != nil || ok {
		return e, err
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		if e, ok, err := recordedExit(ctx, ctr); err != nil || ok {
			return e, err
		}
		return Exit{}, fmt.Errorf("job %s: its process is gone and its end was not recorded (did the host or containerd restart?)", id)
	}
	if err != nil {
		return Exit{}, fmt.Errorf("job %s: %w", id, err)
	}
	c.watch(id)
	exitC, err := task.Wait(ctx)
	if err != nil {
		return Exit{}, fmt.Errorf("wait for job %s: %w", id, err)
	}
	select {
	case st := <-exitC:
		if err := st.Error(); err != nil {
			if ctx.Err() != nil {
				return Exit{}, ctx.Err()
			}
			return Exit{}, fmt.Errorf("wait for job %s: %w", id, err)
		}
		e, err := c.exitOf(ctx, ctr, task, st.ExitCode(), st.ExitTime())
		if err != nil {
			return e, err
		}
		// Deleting the ended task makes the shim finish copying the job's output into
		// its log: without it a reader right after Wait may find the log short. The exit
		// is recorded in a label, so later Waits still report it.
		if _, derr := task.Delete(ctx); derr != nil && !errdefs.IsNotFound(derr) && ctx.Err() == nil {
			c.log.Warn("deleting an ended job's task failed", "job", id, "err", derr)
		}
		return e, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// recordedExit returns the exit recorded on a container, if any.
func recordedExit(ctx context.Context, ctr client.Container) (Exit, bool, error) {
	labels, err := ctr.Labels(ctx)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return Exit{}, false, fmt.Errorf("%w: %s", ErrNotFound, ctr.ID())
		}
		return Exit{}, false, err
	}
	return exitLabel(labels)
}

func exitLabel(labels map[string]string) (Exit, bool, error) {
	raw, ok := labels[labelExit]
	if !ok {
		return Exit{}, false, nil
	}
	var e Exit
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return Exit{}, false, fmt.Errorf("the recorded exit %q is unreadable: %w", raw, err)
	}
	return e, true, nil
}

// exitOf works out how an ended job ended and records it: the reason given to Kill (or
// the monitor's timeout) when it was killed, oom when the kernel's OOM killer killed a
// process of the job and it exited with an error, or exited.
func (c *Containerd) exitOf(ctx context.Context, ctr client.Container, task client.Task, code uint32, at time.Time) (Exit, error) {
	info, err := ctr.Info(ctx)
	if err != nil {
		return Exit{}, fmt.Errorf("job %s: %w", ctr.ID(), err)
	}
	if e, ok, err := exitLabel(info.Labels); err != nil || ok {
		return e, err
	}
	e := Exit{Code: int(code), StartedAt: startedAt(info.Labels, info.CreatedAt), EndedAt: at.UTC(), Reason: ReasonExited}
	if r := info.Labels[labelKillReason]; r != "" {
		e.Reason = r
	} else if code != 0 && c.oomKilled(ctx, task, info.Spec) {
		e.Reason = ReasonOOM
	} else if code > 128 && code < 128+65 {
		// The job's first process cannot be killed by its own processes (it is the init of
		// its PID namespace), so this is either its own exit code or a signal sent from the
		// host by something other than gpunex: containerd's exit status cannot tell which.
		c.log.Warn("a job ended with a signal's exit code that no gpunex node sent and the OOM killer did not: either the job exited so, or a process on the host outside gpunex killed it",
			"job", ctr.ID(), "code", code, "signal", syscall.Signal(code-128).String())
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return e, err
	}
	if _, err := ctr.SetLabels(ctx, map[string]string{labelExit: string(raw)}); err != nil && !errdefs.IsNotFound(err) && ctx.Err() == nil {
		c.log.Warn("recording a job's exit failed", "job", ctr.ID(), "err", err)
	}
	return e, nil
}

// startedAt is when the job's task was started, or, if that was not recorded, when its
// container was created.
func startedAt(labels map[string]string, created time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, labels[labelStartedAt]); err == nil {
		return t
	}
	return created.UTC()
}

// oomKilled tells whether the kernel's OOM killer killed a process in the job's memory
// cgroup: its oom_kill counter, read from the task's metrics (cgroup v1
// memory.oom_control, v2 memory.events), or from cgroupfs directly when the daemon does
// not report it. The cgroup and its counter live until the task is deleted.
func (c *Containerd) oomKilled(ctx context.Context, task client.Task, rawSpec typeurl.Any) bool {
	if m, err := task.Metrics(ctx); err == nil && m.Data != nil {
		switch {
		case strings.HasSuffix(m.Data.GetTypeUrl(), "io.containerd.cgroups.v1.Metrics"):
			var v1 stats.Metrics
			if proto.Unmarshal(m.Data.GetValue(), &v1) == nil && v1.MemoryOomControl != nil {
				return v1.MemoryOomControl.OomKill > 0
			}
		case strings.HasSuffix(m.Data.GetTypeUrl(), "io.containerd.cgroups.v2.Metrics"):
			var v2 statsv2.Metrics
			if proto.Unmarshal(m.Data.GetValue(), &v2) == nil && v2.MemoryEvents != nil {
				return v2.MemoryEvents.OomKill > 0
			}
		}
	}
	return oomKillsFromCgroupfs(cgroupsPath(rawSpec)) > 0
}

// Kill stops a running job: SIGTERM to all its processes, SIGKILL after KillGrace, and
// returns once it has ended. The first reason given (ReasonCancelled when empty) is what
// Wait reports. Killing an ended job does nothing.
func (c *Containerd) Kill(ctx context.Context, id, reason string) error {
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return err
	}
	return c.kill(ctx, ctr, reason, c.opts.KillGrace)
}

// kill records the reason and ends the task: SIGTERM, then SIGKILL after grace (at once
// when grace is 0).
func (c *Containerd) kill(ctx context.Context, ctr client.Container, reason string, grace time.Duration) error {
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	st, err := task.Status(ctx)
	if errdefs.IsNotFound(err) || (err == nil && st.Status == client.Stopped) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	if reason == "" {
		reason = ReasonCancelled
	}
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	if labels[labelKillReason] == "" {
		if _, err := ctr.SetLabels(ctx, map[string]string{labelKillReason: reason}); err != nil {
			return fmt.Errorf("kill job %s: record the reason: %w", ctr.ID(), err)
		}
	}
	c.log.Info("stopping a job", "job", ctr.ID(), "reason", reason, "sigterm_grace", grace)
	exitC, err := task.Wait(ctx)
	if err != nil {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	gone := func(err error) bool { return errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) }
	if grace > 0 {
		if err := task.Kill(ctx, syscall.SIGTERM, client.WithKillAll); err != nil && !gone(err) {
			return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-exitC:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	if err := task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil && !gone(err) {
		return fmt.Errorf("kill job %s: %w", ctr.ID(), err)
	}
	select {
	case <-exitC:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Remove kills the job if it still runs, deletes its task, its container and its
// snapshot, and checks that containerd holds none of them any more.
func (c *Containerd) Remove(ctx context.Context, id string) error {
	ctx = c.ns(ctx)
	ctr, err := c.load(ctx, id)
	if err != nil {
		return err
	}
	c.unwatch(id)
	if task, err := ctr.Task(ctx, nil); err == nil {
		if st, err := task.Status(ctx); err == nil && st.Status != client.Stopped {
			c.log.Warn("removing a job that still runs: SIGKILL", "job", id)
		}
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove job %s: delete its task: %w", id, err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove job %s: %w", id, err)
	}
	labels, err := ctr.Labels(ctx)
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove job %s: %w", id, err)
	}
	if labels[labelNetns] != "" {
		if err := c.net.detach(ctx, labels[labelNetns]); err != nil {
			return fmt.Errorf("remove job %s: %w", id, err)
		}
	}
	if labels[labelUserns] != "" {
		if err := unpinNetns(labels[labelUserns]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove job %s: its user namespace: %w", id, err)
		}
	}
	if base, ok := parseUIDBase(labels); ok {
		defer c.releaseUserns(base, id)
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove job %s: delete its container: %w", id, err)
	}
	var left []string
	if _, err := c.client.LoadContainer(ctx, id); !errdefs.IsNotFound(err) {
		left = append(left, "container")
	}
	if _, err := c.client.TaskService().Get(ctx, &tasksapi.GetRequest{ContainerID: id}); !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		left = append(left, "task")
	}
	if _, err := c.client.SnapshotService(c.opts.Snapshotter).Stat(ctx, id); !errdefs.IsNotFound(err) {
		left = append(left, "snapshot")
	}
	if len(left) > 0 {
		return fmt.Errorf("remove job %s: its %s still in containerd namespace %s", id, strings.Join(left, ", "), c.opts.Namespace)
	}
	return nil
}

// List returns every container in the namespace, sorted by ID, with the exit of those
// that ended. Ended tasks have their exit recorded; running ones get a monitor, which
// kills at once those whose wall clock ran out while nobody watched.
func (c *Containerd) List(ctx context.Context) ([]Info, error) {
	ctx = c.ns(ctx)
	ctrs, err := c.client.Containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var out []Info
	for _, ctr := range ctrs {
		in := Info{ID: ctr.ID()}
		info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
		if err != nil {
			return nil, err
		}
		if !c.owns(info.Labels) {
			continue
		}
		if base, ok := parseUIDBase(info.Labels); ok {
			c.mu.Lock()
			if c.uidBases[base] != ctr.ID() {
				c.uidBases[base] = ctr.ID()
				claimUserns(base, c.opts.Namespace+"/"+ctr.ID()) // again after a restart (or still claimed)
			}
			c.mu.Unlock()
		}
		if e, ok, err := exitLabel(info.Labels); err == nil && ok {
			in.Exit = &e
			out = append(out, in)
			continue
		}
		task, err := ctr.Task(ctx, nil)
		if err == nil {
			st, serr := task.Status(ctx)
			switch {
			case serr == nil && st.Status == client.Stopped:
				if e, err := c.exitOf(ctx, ctr, task, st.ExitStatus, st.ExitTime); err == nil {
					in.Exit = &e
				}
			case serr == nil:
				in.Running = true
				c.watch(ctr.ID())
			}
		} else if !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("job %s: %w", ctr.ID(), err)
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Close stops the monitors and disconnects; the jobs keep running in containerd.
func (c *Containerd) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		if err := c.drainNamespaces(context.Background()); err != nil {
			c.log.Warn("the namespaces made ahead for jobs could not all be taken down", "err", err)
		}
		c.net.close()
		c.closeErr = c.client.Close()
	})
	return c.closeErr
}

// watch starts the monitor of a job unless one runs.
func (c *Containerd) watch(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil || c.monitors[id] != nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	m := &monitor{cancel: cancel}
	c.monitors[id] = m
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			cancel()
			c.mu.Lock()
			if c.monitors[id] == m {
				delete(c.monitors, id)
			}
			c.mu.Unlock()
		}()
		if err := c.monitor(ctx, id); err != nil && ctx.Err() == nil {
			c.log.Warn("watching a job failed: its limits are enforced again by the next Wait or List", "job", id, "err", err)
		}
	}()
}

// unwatch stops the monitor of a job.
func (c *Containerd) unwatch(id string) {
	c.mu.Lock()
	m := c.monitors[id]
	delete(c.monitors, id)
	c.mu.Unlock()
	if m != nil {
		m.cancel()
	}
}

// monitor enforces a running job's wall clock and output limit, and records its exit.
func (c *Containerd) monitor(ctx context.Context, id string) error {
	ctr, err := c.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	info, err := ctr.Info(ctx)
	if err != nil {
		return err
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return err
	}
	exitC, err := task.Wait(ctx)
	if err != nil {
		return err
	}
	if info.Labels[labelJob] == "" || !c.owns(info.Labels) {
		return nil // not ours: nothing to enforce
	}
	wall, err := time.ParseDuration(info.Labels[labelWallClock])
	if err != nil {
		return fmt.Errorf("the job's %s label is unreadable: %w", labelWallClock, err)
	}
	deadline := time.NewTimer(time.Until(startedAt(info.Labels, info.CreatedAt).Add(wall)))
	defer deadline.Stop()
	outDir, logPath := info.Labels[labelOutputDir], info.Labels[labelLogPath]
	outMax, _ := strconv.ParseInt(info.Labels[labelOutputMax], 10, 64)
	logMax, _ := strconv.ParseInt(info.Labels[labelLogMax], 10, 64)
	ticker := time.NewTicker(logCheckEvery)
	defer ticker.Stop()
	tick := ticker.C
	lastOutputCheck := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case st := <-exitC:
			if err := st.Error(); err != nil {
				return err
			}
			_, err := c.exitOf(ctx, ctr, task, st.ExitCode(), st.ExitTime())
			return err
		case <-deadline.C:
			c.log.Info("killing a job at its wall-clock limit", "job", id, "wallclock", wall)
			if err := c.kill(ctx, ctr, ReasonTimeout, c.opts.KillGrace); err != nil {
				return err
			}
		case <-tick:
			reason := ""
			if outDir != "" && outMax > 0 && time.Since(lastOutputCheck) >= outputCheckEvery {
				lastOutputCheck = time.Now()
				if used := diskUsage(outDir, outMax); used > outMax {
					reason = ReasonOutputLimit
					c.log.Info("killing a job whose output is over its limit", "job", id, "bytes", used, "limit", outMax)
				}
			}
			if logPath != "" {
				state := readLogState(logPath)
				// (Jobs logged by an earlier build of the logger leave mark files instead.)
				if why, err := os.ReadFile(logPath + ".error"); err == nil && state == "" {
					state = stateError + string(why)
				} else if _, err := os.Stat(logPath + ".over"); err == nil && state == "" {
					state = stateOver
				}
				if strings.HasPrefix(state, stateError) {
					reason = ReasonLogFailed
					c.log.Warn("killing a job whose log cannot be written", "job", id, "log", logPath, "err", strings.TrimPrefix(state, stateError))
				} else if state == stateOver {
					reason = ReasonLogLimit
					c.log.Info("killing a job that printed more than its log limit", "job", id, "limit", logMax)
				} else if st, err := os.Stat(logPath); err == nil && logMax > 0 && st.Size() > logMax {
					// A job started by a version whose shim wrote the log itself.
					reason = ReasonLogLimit
					c.log.Info("killing a job whose log is over its limit", "job", id, "bytes", st.Size(), "limit", logMax)
				}
			}
			if reason != "" { // abuse: no grace
				tick = nil
				if err := c.kill(ctx, ctr, reason, 0); err != nil {
					return err
				}
			}
		}
	}
}

// diskUsage returns the disk space the files below dir use, counting up to just past
// limit. Symbolic links are not followed.
func diskUsage(dir string, limit int64) int64 {
	var used int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			used += allocated(info)
		}
		if used > limit {
			return filepath.SkipAll
		}
		return nil
	})
	return used
}

// oomKillsFromCgroupfs reads the oom_kill counter of a cgroup (cgroup v1 or v2); 0 when
// it cannot.
func oomKillsFromCgroupfs(path string) int64 {
	if path == "" || strings.Contains(path, ":") { // systemd cgroup paths are not handled
		return 0
	}
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", path, "memory.oom_control"),
		filepath.Join("/sys/fs/cgroup", path, "memory.events"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return 0
}

// cgroupsPath is the cgroup of a container, from its stored runtime spec.
func cgroupsPath(spec typeurl.Any) string {
	if spec == nil {
		return ""
	}
	var s specs.Spec
	if json.Unmarshal(spec.GetValue(), &s) != nil || s.Linux == nil {
		return ""
	}
	return s.Linux.CgroupsPath
}

// reserveUserns picks and holds a user-namespace range for a job.
func (c *Containerd) reserveUserns(id string) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	used := make(map[uint32]bool, len(c.uidBases))
	for b := range c.uidBases {
		used[b] = true
	}
	base, err := pickUserns(id, used, func(b uint32) bool { return claimUserns(b, c.opts.Namespace+"/"+id) })
	if err == nil {
		c.uidBases[base] = id
	}
	return base, err
}

// releaseUserns frees a job's range.
func (c *Containerd) releaseUserns(base uint32, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.uidBases[base] == id {
		delete(c.uidBases, base)
		unclaimUserns(base)
	}
}
