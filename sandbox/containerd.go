package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Defaults of ContainerdOptions.
const (
	DefaultContainerdAddress = "/run/containerd/containerd.sock"
	DefaultNamespace         = "gpunex"
	DefaultSnapshotter       = "overlayfs"
	DefaultKillGrace         = 2 * time.Second
	DefaultMaxLogBytes       = 64 << 20
)

// networkCheckEvery is how often the jobs' network rules are checked while a runtime runs.
const networkCheckEvery = 30 * time.Second

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
	self     processID // this process, in the names of the namespaces it makes
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

	// dialNS holds the network namespaces of the jobs Dial reached (dial.go).
	dialNS jobNetNamespaces
}

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
		nsPool: make(chan jobNamespaces, namespacePoolSize), self: thisProcess(), monitors: map[string]*monitor{}, configs: map[string]ocispec.Image{}, unpacked: map[string]bool{}, uidBases: map[uint32]string{},
	}
	c.userns, c.usernsOff = usernsSupport()
	if o.NoUserNamespaces {
		c.userns, c.usernsOff = false, "turned off by the node's configuration (jobs.user_namespaces = false)"
	}
	if !c.userns {
		c.log.Warn("jobs run without user namespaces: a process escaping its container would be the host's uid 65534", "why", c.usernsOff)
	} else if _, err := CheckStateTraversable(ctx, o.Address); errors.Is(err, ErrStateNotTraversable) {
		cl.Close() // refused here rather than every job failing with runc's "permission denied"
		return nil, err
	} else if err != nil {
		c.log.Warn("cannot tell whether jobs in user namespaces can reach containerd's state: if every job fails with \"permission denied\", run gpunex doctor", "err", err)
	}
	c.ctx, c.cancel = context.WithCancel(namespaces.WithNamespace(context.Background(), o.Namespace))
	if jn.opts.Policy != EgressDeny {
		if jn.pins, err = newPinner(o.Address); err != nil {
			c.log.Warn("cannot tell which mount namespace containerd runs in: jobs' namespaces are pinned in the node's", "err", err)
		} else if jn.pins != nil {
			c.log.Info("the node runs in a mount namespace of its own: jobs' namespaces are pinned in containerd's")
		}
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

// Close stops the monitors and disconnects; the jobs keep running in containerd.
func (c *Containerd) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		c.dialNS.closeAll()
		if err := c.drainNamespaces(context.Background()); err != nil {
			c.log.Warn("the namespaces made ahead for jobs could not all be taken down", "err", err)
		}
		c.net.close()
		c.closeErr = c.client.Close()
	})
	return c.closeErr
}
