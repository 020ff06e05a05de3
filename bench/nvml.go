//go:build linux && cgo

package bench

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML probes real GPUs through the NVIDIA driver's NVML library, loaded at run time.
//
// go-nvml ends the process if a device function is called after a failed Init
// (DEPENDENCIES.md): OpenNVML returns an error instead of an NVML, so no device function
// is ever reached without a successful Init.
type NVML struct {
	mu     sync.Mutex
	closed bool
}

// OpenNVML initialises NVML. Where the library or the driver is missing it returns an error
// wrapping ErrNoDriver that says so.
func OpenNVML() (*NVML, error) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w (NVML init: %s); install the NVIDIA driver, or declare simulated GPUs ([[provider.gpus]] simulated = true)", ErrNoDriver, nvmlError(ret))
	}
	return &NVML{}, nil
}

// nvmlError describes a return code. ErrorString itself needs the library: where it is
// missing, the code's number is all there is.
func nvmlError(ret nvml.Return) (s string) {
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "library not found (ERROR_LIBRARY_NOT_FOUND)"
	}
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("error %d", int(ret))
		}
	}()
	return nvml.ErrorString(ret)
}

// Kind implements Probe.
func (n *NVML) Kind() string { return "nvml" }

// Close shuts NVML down.
func (n *NVML) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if ret := nvml.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %s", nvmlError(ret))
	}
	return nil
}

// GPUs implements Probe.
func (n *NVML) GPUs() ([]GPUInfo, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("NVML is closed")
	}
	driver, ret := nvml.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML driver version: %s", nvmlError(ret))
	}
	cuda, ret := nvml.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML CUDA driver version: %s", nvmlError(ret))
	}
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %s", nvmlError(ret))
	}
	out := make([]GPUInfo, 0, count)
	for i := 0; i < count; i++ {
		out = append(out, readDevice(i, driver, cuda))
	}
	return out, nil
}

func readDevice(i int, driver string, cuda int) GPUInfo {
	raw := rawGPU{Index: i, Driver: driver, CUDA: cuda, ECC: -1, Minor: -1}
	fail := func(what string, ret nvml.Return) GPUInfo {
		raw.Error = fmt.Sprintf("%s: %s", what, nvmlError(ret))
		return fromRaw(raw)
	}
	dev, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return fail("device handle", ret) // fell off the bus, or lost
	}
	if raw.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return fail("name", ret)
	}
	if raw.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return fail("UUID", ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fail("memory", ret)
	}
	raw.MemoryTotal, raw.MemoryUsed = mem.Total, mem.Used
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		raw.PCIBusID = cString(pci.BusId[:])
	}
	if m, ret := dev.GetMinorNumber(); ret == nvml.SUCCESS {
		raw.Minor = m
	}
	if t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		raw.Temperature = int(t)
	}
	if m, ret := dev.GetCurrentClocksThrottleReasons(); ret == nvml.SUCCESS {
		raw.ThrottleMask = m
	}
	if e, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		raw.ECC = int64(e)
	}
	// Telemetry (docs/operations.md, "Metrics"): each is left at 0 where NVML does not
	// give it.
	if p, ret := dev.GetPowerUsage(); ret == nvml.SUCCESS {
		raw.PowerMilliW = p
	}
	if u, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		raw.UtilGPU = u.Gpu
	}
	if c, ret := dev.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		raw.SMClock = c
	}
	if c, ret := dev.GetClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		raw.MemClock = c
	}
	return fromRaw(raw)
}
