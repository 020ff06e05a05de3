//go:build !(linux && cgo)

package bench

import (
	"context"
	"fmt"
)

// NVML is the NVIDIA probe; this build (not Linux, or without cgo) has none: it serves
// renters, auditors and coordinators, and providers with simulated GPUs.
type NVML struct{}

// OpenNVML says that this build cannot read NVIDIA GPUs.
func OpenNVML() (*NVML, error) {
	return nil, fmt.Errorf("%w: this gpunex build has no NVML (it needs Linux and cgo); declare simulated GPUs ([[provider.gpus]] simulated = true) or use the Linux build", ErrNoDriver)
}

// Kind implements Probe.
func (n *NVML) Kind() string { return "nvml" }

// Close implements Probe.
func (n *NVML) Close() error { return nil }

// GPUs implements Probe.
func (n *NVML) GPUs() ([]GPUInfo, error) { return nil, ErrNoDriver }

// WatchXIDs implements XIDWatcher: this build has no NVML.
func (n *NVML) WatchXIDs(ctx context.Context, found func(XID)) error { return ErrNoDriver }
