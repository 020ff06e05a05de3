package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	godigest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The user every job runs as: nobody. Its numeric IDs are used, so the image needs no
// /etc/passwd entry.
const (
	JobUID = 65534
	JobGID = 65534
)

// EnvVisibleGPUs is the environment variable listing the UUIDs of the job's GPUs,
// comma-separated (empty without GPUs). The job cannot override it.
const EnvVisibleGPUs = "GPUNEX_VISIBLE_GPUS"

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// minCPUMillis is the smallest CPU quota the kernel accepts (1 ms of CPU per 100 ms).
const minCPUMillis = 10

// cpuPeriod is the CFS period in microseconds; the quota is CPUMillis/1000 of it.
const cpuPeriod = 100_000

// Validate checks a spec before anything is created and says what is wrong with it.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !idPattern.MatchString(s.ID) {
		bad("job ID %q: use 1 to 64 characters of a-z, 0-9 and -, starting with a letter or digit", s.ID)
	}
	if s.Image == "" {
		bad("no image: set Spec.Image to a reference returned by ImportImage or PullImage")
	}
	if s.ImageDigest != "" {
		if _, err := godigest.Parse(s.ImageDigest); err != nil {
			bad("ImageDigest %q: give the digest ImportImage or PullImage returned (%v)", s.ImageDigest, err)
		}
	}
	if s.MemoryBytes <= 0 {
		bad("MemoryBytes must be > 0 (the job's hard memory limit)")
	}
	if s.CPUMillis < minCPUMillis {
		bad("CPUMillis is %d: it must be at least %d (1%% of a CPU)", s.CPUMillis, minCPUMillis)
	}
	if s.Pids <= 0 {
		bad("Pids must be > 0 (the most processes and threads at once)")
	}
	if s.ScratchBytes <= 0 {
		bad("ScratchBytes must be > 0 (a tmpfs of size 0 would have no limit)")
	}
	if s.WallClock <= 0 {
		bad("WallClock must be > 0")
	}
	if !filepath.IsAbs(s.OutputDir) {
		bad("OutputDir %q must be an absolute path to a folder made for this job", s.OutputDir)
	} else if st, err := os.Stat(s.OutputDir); err != nil || !st.IsDir() {
		bad("OutputDir %q must be an existing folder (create it first)", s.OutputDir)
	}
	if !filepath.IsAbs(s.LogPath) {
		bad("LogPath %q must be an absolute file path", s.LogPath)
	} else if st, err := os.Stat(filepath.Dir(s.LogPath)); err != nil || !st.IsDir() {
		bad("the folder of LogPath %q must exist", s.LogPath)
	}
	if err := s.validateInput(); err != nil { // input.go
		errs = append(errs, err)
	}
	for _, e := range s.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			bad("environment entry %q is not K=V", e)
		}
	}
	seen := map[string]bool{}
	for _, g := range s.GPUs {
		if g.UUID == "" || strings.ContainsAny(g.UUID, ", \t\n") || g.Index < 0 {
			bad("GPU %+v: it needs a UUID without commas or spaces and an index >= 0", g)
		}
		if seen[g.UUID] {
			bad("GPU %s is given twice", g.UUID)
		}
		seen[g.UUID] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid job spec: %w", errors.Join(errs...))
	}
	return nil
}

// specOpts builds the OCI runtime spec of a job, on top of containerd's default Linux
// spec (new PID, IPC, UTS, mount and network namespaces; /proc, /dev, /dev/pts, /dev/shm,
// /dev/mqueue, /run as kernel or tmpfs mounts and /sys read-only: none of them shows
// host files; default masked and read-only paths under /proc and /sys; a device cgroup
// that denies everything but runc's standard null, zero, full, random, urandom, tty and
// ptmx).
//
// On top of it:
//   - the image's environment, working directory and command (Spec.Args replaces the
//     image's entrypoint and command together; the image's user is ignored), Spec.Env,
//     and GPUNEX_VISIBLE_GPUS;
//   - a read-only root filesystem, with tmpfs /scratch and /tmp of ScratchBytes each;
//   - OutputDir bind-mounted read-write at /output: the only host folder the job sees
//     besides its input (InputDir, read-only at /input: input.go).
//     Its size is not bounded by the kernel (a bind mount has no size and we use no disk
//     quotas): RLIMIT_FSIZE caps each file the job writes at ScratchBytes, and the
//     runtime's monitor measures the folder every outputCheckEvery and kills the job
//     (SIGKILL at once) with ReasonOutputLimit once it holds more than ScratchBytes, so
//     a job may overshoot by what it writes between two checks (its CPU quota slows it
//     down; the folder should be on a file system where that cannot hurt the host). The job may also leave
//     symbolic links there pointing anywhere: whoever reads the folder on the host must
//     not follow them;
//   - uid/gid 65534 with no supplementary groups, no capabilities at all, no new
//     privileges, containerd's default seccomp profile less ptrace (which it allows on
//     recent kernels: a job could stop and inspect its own processes, and a debugger is
//     not worth the attack surface);
//   - memory limit MemoryBytes with memory+swap = MemoryBytes (no swap), a CFS quota of
//     CPUMillis, a pids limit;
//   - its own network namespace, with only its loopback; with Egress the runtime then
//     connects it to the jobs' network (network.go: a veth to the host, NAT, the egress
//     policy's rules) and resolvConf, the jobs' nameservers, is bind-mounted read-only at
//     /etc/resolv.conf. IPv6 is off in it (the jobs' network is IPv4: a link-local IPv6
//     address would reach the host past the IPv4 rules);
//   - its real GPUs as the host's CDI specs describe them (cdiGPUs, cdi.go), or else:
//     for each real (not simulated) GPU its /dev/nvidia<Minor>, plus /dev/nvidiactl,
//     /dev/nvidia-uvm and /dev/nvidia-uvm-tools, where present on the host, each with a
//     device cgroup rule allowing only it, and the NVIDIA driver's user-space libraries
//     bind-mounted read-only (see gpuMounts).
func specOpts(img ocispec.Image, s Spec, devDir, resolvConf string, cdiGPUs oci.SpecOpts) ([]oci.SpecOpts, error) {
	uuids := make([]string, len(s.GPUs))
	for i, g := range s.GPUs {
		uuids[i] = g.UUID
	}
	env := append(append([]string{}, s.Env...), EnvVisibleGPUs+"="+strings.Join(uuids, ","))

	opts := []oci.SpecOpts{
		withImageConfig(img.Config, s.Args),
		oci.WithEnv(env),
		oci.WithHostname("job"),
		oci.WithRootFSReadonly(),
		withNobody,
		withNoCapabilities,
		oci.WithNoNewPrivileges,
		seccomp.WithDefaultProfile(), // after the capabilities: the profile depends on them
		withoutSyscalls("ptrace"),    // after the profile
		withNativeSyscallsOnly,       // after the profile
		oci.WithMounts(jobMounts(s)),
		oci.WithMemoryLimit(uint64(s.MemoryBytes)),
		withNoSwap(s.MemoryBytes),
		oci.WithCPUCFS(s.CPUMillis*cpuPeriod/1000, cpuPeriod),
		oci.WithPidsLimit(s.Pids),
		oci.WithRlimit(&specs.POSIXRlimit{Type: "RLIMIT_FSIZE", Hard: uint64(s.ScratchBytes), Soft: uint64(s.ScratchBytes)}),
	}
	if s.Egress && resolvConf != "" {
		opts = append(opts, oci.WithMounts([]specs.Mount{{Destination: "/etc/resolv.conf", Type: "bind", Source: resolvConf, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}}}))
	}
	opts = append(opts, withoutIPv6)
	if cdiGPUs != nil {
		return append(opts, cdiGPUs), nil
	}
	gpus, err := gpuOpts(s.GPUs, devDir)
	if err != nil {
		return nil, err
	}
	return append(opts, gpus...), nil
}

// jobMounts are the job's own mounts: scratch space, its output folder and its input.
func jobMounts(s Spec) []specs.Mount {
	// runc gives a tmpfs the mode of the folder it covers (0755 when the image has none),
	// so the job's user owns them to be able to write.
	opts := []string{"nosuid", "nodev", "size=" + strconv.FormatInt(s.ScratchBytes, 10),
		"uid=" + strconv.Itoa(JobUID), "gid=" + strconv.Itoa(JobGID)}
	return append([]specs.Mount{
		{Destination: "/scratch", Type: "tmpfs", Source: "tmpfs", Options: opts},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: opts},
		{Destination: "/output", Type: "bind", Source: s.OutputDir, Options: []string{"rbind", "rw", "nosuid", "nodev", "rprivate"}},
	}, inputMounts(s)...) // input.go
}

// defaultPath is the PATH of an image whose config sets no environment.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// withImageConfig takes the environment, working directory and command from the image's
// config; args, when given, replace its entrypoint and command. (containerd's
// oci.WithImageConfig does the same but also mounts the image on the host to read its
// /etc/group, which we do not need: the job runs as nobody without groups.)
func withImageConfig(c ocispec.ImageConfig, args []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.Env = append([]string{}, c.Env...)
		if len(s.Process.Env) == 0 {
			s.Process.Env = []string{defaultPath}
		}
		s.Process.Args = append(append([]string{}, c.Entrypoint...), c.Cmd...)
		if len(args) > 0 {
			s.Process.Args = append([]string{}, args...)
		}
		if len(s.Process.Args) == 0 {
			return errors.New("no command: the image has no entrypoint or command, and Spec.Args is empty")
		}
		s.Process.Cwd = c.WorkingDir
		if s.Process.Cwd == "" {
			s.Process.Cwd = "/"
		}
		return nil
	}
}

// withNobody runs the process as nobody with no supplementary groups (the image's config
// may have named another user, and its /etc/group may have added groups).
func withNobody(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Process.User = specs.User{UID: JobUID, GID: JobGID}
	return nil
}

// withNoCapabilities empties every capability set.
func withNoCapabilities(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Process.Capabilities = &specs.LinuxCapabilities{
		Bounding: []string{}, Effective: []string{}, Permitted: []string{}, Inheritable: []string{}, Ambient: []string{},
	}
	return nil
}

// withNoSwap sets memory+swap to the memory limit, where the kernel accounts swap (cgroup
// v2, or v1 with memory.memsw.*); without swap accounting there is nothing to set, and
// runc would fail on the missing file.
func withNoSwap(memory int64) oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, ctr *containers.Container, s *oci.Spec) error {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
			return oci.WithMemorySwap(memory)(ctx, c, ctr, s)
		}
		if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil {
			return oci.WithMemorySwap(memory)(ctx, c, ctr, s)
		}
		return nil
	}
}

// nvidiaLibraries are the driver libraries a CUDA job needs from the host, as
// nvidia-container-toolkit mounts them (its list is longer: graphics, video, IPC sockets
// and firmware are left out here).
var nvidiaLibraries = []string{
	"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4",
	"libcudadebugger.so.1", "libnvidia-opencl.so.1",
}

// nvidiaLibraryDirs are where Debian and other distributions install them.
var nvidiaLibraryDirs = []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"}

// gpuOpts gives a job its real GPUs: device nodes with device cgroup rules allowing only
// them, and the driver's libraries read-only (at the same paths as on the host, where the
// dynamic linker of a Debian- or Ubuntu-based image looks) plus nvidia-smi. This is best
// effort and untested with a real driver (no GPU on the test machines): a GPU's own device
// node must exist (else an error: the driver is not loaded, or the GPU is gone), the other
// nodes and libraries missing on the host are left out, and images that need more should be
// run with nvidia-container-toolkit.
// Simulated GPUs get nothing but their UUID in GPUNEX_VISIBLE_GPUS.
//
// devDir is where the host's device nodes are ("/dev"; tests use a folder of fake ones).
func gpuOpts(gpus []GPU, devDir string) ([]oci.SpecOpts, error) {
	var opts []oci.SpecOpts
	for _, g := range gpus {
		if g.Simulated {
			continue
		}
		if g.Minor < 0 {
			return nil, fmt.Errorf("GPU %s: its device node is unknown (NVML gave no minor number)", g.UUID)
		}
		name := fmt.Sprintf("nvidia%d", g.Minor)
		dev, err := oci.DeviceFromPath(filepath.Join(devDir, name))
		if err != nil {
			return nil, fmt.Errorf("GPU %s: device node %s: %w (is the NVIDIA driver loaded?)", g.UUID, filepath.Join(devDir, name), err)
		}
		opts = append(opts, withDevice(*dev, filepath.Join(devDir, name), "/dev/"+name))
	}
	if len(opts) == 0 {
		return nil, nil
	}
	for _, d := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		if dev, err := oci.DeviceFromPath(filepath.Join(devDir, d)); err == nil {
			opts = append(opts, withDevice(*dev, filepath.Join(devDir, d), "/dev/"+d))
		}
	}
	var mounts []specs.Mount
	ro := []string{"rbind", "ro", "nosuid", "nodev"}
	for _, lib := range nvidiaLibraries {
		for _, dir := range nvidiaLibraryDirs {
			p := filepath.Join(dir, lib)
			if _, err := os.Stat(p); err == nil {
				mounts = append(mounts, specs.Mount{Destination: p, Type: "bind", Source: p, Options: ro})
				break
			}
		}
	}
	if _, err := os.Stat("/usr/bin/nvidia-smi"); err == nil {
		mounts = append(mounts, specs.Mount{Destination: "/usr/bin/nvidia-smi", Type: "bind", Source: "/usr/bin/nvidia-smi", Options: ro})
	}
	if len(mounts) > 0 {
		opts = append(opts, oci.WithMounts(mounts))
	}
	return opts, nil
}

// withDevice adds a host device node at path in the job's /dev, bind-mounted from the
// host's node (runc would do the same for a device in a user namespace, where it may not
// create nodes, but from the container's path), with a device cgroup rule allowing it: the
// default rules deny every other device but runc's standard ones.
func withDevice(dev specs.LinuxDevice, hostPath, path string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: path, Type: "bind", Source: hostPath, Options: []string{"bind", "rw", "nosuid"}})
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{
			Allow: true, Type: dev.Type, Major: &dev.Major, Minor: &dev.Minor, Access: "rwm",
		})
		return nil
	}
}

// withoutIPv6 turns IPv6 off in the job's network namespace, where the host has IPv6.
func withoutIPv6(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		return nil
	}
	if s.Linux.Sysctl == nil {
		s.Linux.Sysctl = map[string]string{}
	}
	s.Linux.Sysctl["net.ipv6.conf.all.disable_ipv6"] = "1"
	s.Linux.Sysctl["net.ipv6.conf.default.disable_ipv6"] = "1"
	return nil
}

// nativeSeccompArch is the seccomp architecture of the node's own instruction set.
var nativeSeccompArch = map[string]specs.Arch{
	"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64, "riscv64": specs.ArchRISCV64,
	"s390x": specs.ArchS390X, "loong64": specs.ArchLOONGARCH64, "ppc64le": specs.ArchPPC64LE,
}

// withNativeSyscallsOnly keeps only the native architecture in the seccomp profile
// (containerd's default also lists the 32-bit ones: x86 and x32 on amd64, arm on arm64).
// A job's 32-bit system calls (int 0x80 on amd64) then get the filter's action for an
// unknown architecture, which kills the calling thread: the kernel's compat layer, a
// frequent source of privilege-escalation bugs, is out of a job's reach, and runc has a
// third of the filter to compile at each start (about 7 ms here). GPU jobs have no use
// for 32-bit code.
func withNativeSyscallsOnly(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	arch, ok := nativeSeccompArch[runtime.GOARCH]
	if !ok || s.Linux == nil || s.Linux.Seccomp == nil {
		return nil
	}
	s.Linux.Seccomp.Architectures = []specs.Arch{arch}
	return nil
}

// withoutSyscalls takes system calls out of the seccomp profile's allow rules: they then
// fail with the profile's default action (EPERM).
func withoutSyscalls(names ...string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil || s.Linux.Seccomp == nil {
			return errors.New("no seccomp profile to take system calls out of")
		}
		var kept []specs.LinuxSyscall
		for _, sc := range s.Linux.Seccomp.Syscalls {
			if sc.Action == specs.ActAllow {
				sc.Names = slices.DeleteFunc(slices.Clone(sc.Names), func(n string) bool { return slices.Contains(names, n) })
				if len(sc.Names) == 0 {
					continue
				}
			}
			kept = append(kept, sc)
		}
		s.Linux.Seccomp.Syscalls = kept
		return nil
	}
}
