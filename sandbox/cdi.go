package sandbox

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// DefaultCDISpecDirs are where CDI specs are looked for: `nvidia-ctk cdi generate
// --output=/etc/cdi/nvidia.yaml` writes the NVIDIA driver's there.
var DefaultCDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// CDIKind is the CDI device kind of NVIDIA GPUs; a GPU is named by its UUID
// ("nvidia.com/gpu=GPU-...").
const CDIKind = "nvidia.com/gpu"

// gpuDevices gives real GPUs to jobs through CDI (the Container Device Interface) when
// the host has a spec naming every one of a job's GPUs by UUID; otherwise through gpuOpts'
// own device rules and short library list.
type gpuDevices struct {
	mu    sync.Mutex
	cache *cdi.Cache // nil: no usable spec folder
}

func newGPUDevices(dirs []string) *gpuDevices {
	if len(dirs) == 0 {
		dirs = DefaultCDISpecDirs
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return &gpuDevices{}
	}
	return &gpuDevices{cache: cache}
}

// names returns the CDI names of a job's real GPUs, when the host's specs (read again
// now: a driver upgrade rewrites them) hold all of them; ok is false otherwise.
func (g *gpuDevices) names(gpus []GPU) (names []string, ok bool) {
	var real []GPU
	for _, gpu := range gpus {
		if !gpu.Simulated {
			real = append(real, gpu)
		}
	}
	if len(real) == 0 || g.cache == nil {
		return nil, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cache.Refresh()
	for _, gpu := range real {
		n := CDIKind + "=" + gpu.UUID
		if g.cache.GetDevice(n) == nil {
			return nil, false
		}
		names = append(names, n)
	}
	return names, true
}

// hostPaths maps the container paths of the device nodes CDI would inject for names to
// the host nodes they come from.
func (g *gpuDevices) hostPaths(names []string) map[string]string {
	out := map[string]string{}
	add := func(e *cdispecs.ContainerEdits) {
		if e == nil {
			return
		}
		for _, d := range e.DeviceNodes {
			if d.HostPath != "" {
				out[d.Path] = d.HostPath
			} else {
				out[d.Path] = d.Path
			}
		}
	}
	for _, n := range names {
		if d := g.cache.GetDevice(n); d != nil {
			add(&d.ContainerEdits)
			add(&d.GetSpec().ContainerEdits)
		}
	}
	return out
}

// withCDI injects a job's GPUs as their CDI specs describe them (device nodes, driver
// libraries, environment, hooks), then turns the device nodes into bind mounts of the host
// nodes, each allowed by the device cgroup rule CDI added: in a user namespace runc may not
// create device nodes, and it would bind-mount them from the container's path.
func (g *gpuDevices) withCDI(names []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		hosts := g.hostPaths(names)
		if _, err := g.cache.InjectDevices(s, names...); err != nil {
			return fmt.Errorf("inject the GPUs' CDI devices: %w", err)
		}
		for _, d := range s.Linux.Devices {
			src := hosts[d.Path]
			if src == "" {
				src = d.Path
			}
			s.Mounts = append(s.Mounts, specs.Mount{Destination: d.Path, Type: "bind", Source: src, Options: []string{"bind", "rw", "nosuid"}})
		}
		s.Linux.Devices = nil
		return nil
	}
}
