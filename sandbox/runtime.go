// Package sandbox runs jobs in isolated containers: the Runtime interface, its containerd
// implementation, and the security test suite it must pass (docs/sandbox.md).
package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// GPU is one GPU allocated to a job.
type GPU struct {
	Index int    // NVML's index of the GPU
	UUID  string // GPU-xxxxxxxx...
	// Minor is N of the GPU's device node /dev/nvidiaN (NVML's minor number, which need
	// not equal Index); unused for simulated GPUs.
	Minor int
	// Simulated GPUs have no device nodes: the job sees them only through the
	// GPUNEX_VISIBLE_GPUS environment variable (comma-separated UUIDs).
	Simulated bool
}

// Spec is everything a job's container gets. Whatever is not granted here, the job does
// not have: no host mounts besides its own output directory, no network unless Egress,
// no GPU but its own.
type Spec struct {
	ID    string // job ID: [a-z0-9-], at most 64 characters; names the container and snapshot
	Image string // image reference, already present (ImportImage or PullImage)
	// ImageDigest is the manifest digest ImportImage or PullImage returned for Image
	// ("sha256:..."). When set, Start refuses (ErrImageChanged) a job whose image name
	// resolves to other content by the time its container is made.
	ImageDigest string
	Args        []string // command and arguments; empty runs the image's entrypoint and cmd
	Env         []string // K=V, added to the image's environment
	GPUs        []GPU

	Egress       bool          // network access through NAT, as the runtime's egress policy allows; without it the job has only its own loopback
	MemoryBytes  int64         // hard memory limit (required)
	CPUMillis    int64         // CPU quota in thousandths of a CPU (required)
	Pids         int64         // most processes and threads at once (required)
	ScratchBytes int64         // size of the writable /scratch and /tmp (tmpfs), and of /output
	WallClock    time.Duration // the job is killed with reason "timeout" after this long (required)

	// OutputDir is a host directory, created by the caller for this job only, mounted
	// read-write at /output: what the job leaves there can be fetched by the renter.
	OutputDir string
	// InputDir, when set, is a host directory holding the job's input, mounted read-only
	// at /input (input.go).
	InputDir string
	// LogPath is a host file that receives the job's stdout and stderr, written by the
	// runtime's shim so that it keeps logging while the node restarts.
	LogPath string
}

// Exit reasons.
const (
	ReasonExited    = "exited"    // the process ended by itself (Code tells how)
	ReasonOOM       = "oom"       // killed at its memory limit
	ReasonTimeout   = "timeout"   // killed at its wall-clock limit
	ReasonCancelled = "cancelled" // killed by Kill (the reason given there is reported instead when set)

	ReasonOutputLimit = "output limit exceeded" // killed because /output grew past ScratchBytes
	ReasonLogLimit    = "log limit exceeded"    // killed because its log grew past the runtime's limit
	// ReasonLogFailed: killed because the provider could not write its log (a full or
	// failing disk): the provider's fault, hence "lost".
	ReasonLogFailed = "lost: the job's log could not be written"
)

// Exit is how a job ended.
type Exit struct {
	Code      int       `json:"code"`   // process exit status; 128+signal when killed
	Reason    string    `json:"reason"` // one of the Reason constants, or Kill's reason
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
}

// Info describes a job the runtime holds (running or ended, not yet removed).
type Info struct {
	ID      string
	Running bool
	Exit    *Exit // set once it has ended
}

// ErrNotFound is returned for a job the runtime does not hold.
var ErrNotFound = errors.New("no such job in the sandbox runtime")

// ErrEgressOff is returned by Start for a job with Egress on a runtime whose egress
// policy is protocol.EgressDeny.
var ErrEgressOff = errors.New("this provider gives jobs no network (jobs.egress = \"deny\")")

// ErrImageNotFound is returned by Start and ImageSize for an image that is not present:
// import or pull it first.
var ErrImageNotFound = errors.New("no such image in the sandbox runtime")

// ErrImageChanged is returned by Start when the image Spec.Image names is no longer the
// one Spec.ImageDigest says (its name was moved to other content): import or pull it again.
var ErrImageChanged = errors.New("the job's image is not the one it was given")

// Runtime runs sandboxed jobs. Implementations are safe for concurrent use.
type Runtime interface {
	// ImportImage loads an OCI image archive (an OCI layout tar) and returns the image
	// reference to use in Spec.Image and the manifest digest ("sha256:...").
	ImportImage(ctx context.Context, archive io.Reader) (ref, digest string, err error)
	// PullImage fetches an image from a registry and returns its manifest digest.
	PullImage(ctx context.Context, ref string) (digest string, err error)
	// ImageSize returns the unpacked size of a present image, in bytes.
	ImageSize(ctx context.Context, ref string) (int64, error)
	// Start creates the job's container and starts its process.
	Start(ctx context.Context, spec Spec) error
	// Wait blocks until the job ends (or ctx ends) and says how it ended. It may be
	// called again, also after a restart of the caller, until Remove.
	Wait(ctx context.Context, id string) (Exit, error)
	// Kill stops a running job; reason is reported by Wait ("cancelled by the renter",
	// "lease expired", "provider shutting down"). Killing an ended job does nothing.
	Kill(ctx context.Context, id, reason string) error
	// Remove deletes everything the job left in the runtime: task, container, snapshot.
	// The caller removes OutputDir and LogPath when it no longer needs them.
	Remove(ctx context.Context, id string) error
	// PruneImages deletes the least recently used images no job uses until the rest take
	// at most maxBytes, and returns their names.
	PruneImages(ctx context.Context, maxBytes int64) ([]string, error)
	// List returns every job the runtime holds, for reconciliation after a restart.
	List(ctx context.Context) ([]Info, error)
	// Exec runs another process in a running job's container, with the job's user,
	// namespaces, seccomp profile and limits, never more (exec.go); ErrJobNotRunning once
	// the job has ended.
	Exec(ctx context.Context, id string, e ExecSpec) (ExecProcess, error)
	// Dial connects to a TCP port of a running job, to 127.0.0.1:port inside the job's own
	// network namespace (dial.go): a port is never published on the host. It fails with
	// ErrNotFound for a job that is not running here, ErrPortClosed when nothing in the
	// job listens on the port.
	Dial(ctx context.Context, id string, port int) (net.Conn, error)
	Close() error
	// ExtendWallClock lets a running job run by longer than its wall clock so far (a lease
	// that grew); an ended or ending job is an error.
	ExtendWallClock(ctx context.Context, id string, by time.Duration) error
}
