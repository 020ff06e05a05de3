// Package bench finds a node's GPUs (NVML, or simulated GPUs where there is no NVIDIA
// hardware) and, in later work, measures them. Both probe implementations pass one test
// suite (probe_test.go).
package bench

import (
	"errors"
	"fmt"

	"github.com/gpunex/gpunex/protocol"
)

// GPUInfo is one GPU as a probe reports it.
type GPUInfo struct {
	Index         int    `json:"index"`
	UUID          string `json:"uuid"`
	Name          string `json:"name"`  // as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"
	Model         string `json:"model"` // canonical marketplace model, e.g. "H100-80GB"
	VRAMGB        int    `json:"vram_gb"`
	MemoryBytes   uint64 `json:"memory_bytes"`
	DriverVersion string `json:"driver_version"`
	CUDAVersion   string `json:"cuda_version"` // highest CUDA version the driver supports, e.g. "12.2"
	PCIBusID      string `json:"pci_bus_id"`
	// DeviceMinor is N of the GPU's device node /dev/nvidiaN, which need not equal Index
	// (NVML orders GPUs by PCI bus, the driver numbers its nodes as it finds them); -1
	// where there is none (simulated GPUs) or it could not be read.
	DeviceMinor int  `json:"device_minor"`
	Simulated   bool `json:"simulated,omitempty"`
	// PerfFactor is a simulated GPU's performance relative to its datasheet (1 = nominal);
	// 0 for real GPUs, whose performance is measured.
	PerfFactor float64 `json:"perf_factor,omitempty"`
	Health     Health  `json:"health"`
}

// Health is a GPU's state at the time of the probe.
type Health struct {
	TemperatureC int `json:"temperature_c"`
	// Throttle lists why the clocks are held down right now (thermal, power, ...).
	Throttle []string `json:"throttle,omitempty"`
	// ECCUncorrected counts volatile uncorrected ECC errors; -1 where ECC is not available.
	ECCUncorrected int64 `json:"ecc_uncorrected"`
	// Power draw, GPU utilisation, memory used and clocks now; 0 where not read.
	PowerWatts      float64 `json:"power_watts,omitempty"`
	UtilizationPct  int     `json:"utilization_pct,omitempty"`
	MemoryUsedBytes uint64  `json:"memory_used_bytes,omitempty"`
	SMClockMHz      int     `json:"sm_clock_mhz,omitempty"`
	MemClockMHz     int     `json:"mem_clock_mhz,omitempty"`
	// Error is set when part of the state could not be read.
	Error string `json:"error,omitempty"`
}

// Probe finds GPUs.
type Probe interface {
	// GPUs lists the GPUs now. A GPU that fell off the bus is reported with its error in
	// Health.Error rather than failing the whole list.
	GPUs() ([]GPUInfo, error)
	// Kind says "nvml" or "simulated".
	Kind() string
	Close() error
}

// ErrNoDriver is returned by OpenNVML where the NVIDIA driver or its NVML library is
// missing.
var ErrNoDriver = errors.New("no NVIDIA driver: NVML (libnvidia-ml.so.1) is not available")

// CanonicalModel names the marketplace model of a GPU from the name NVML reports and its
// memory, by the compiled-in model catalogue (protocol.ModelCatalogue.ModelFor); a node
// names its GPUs again with the catalogue of its coordinator.
func CanonicalModel(name string, memoryBytes uint64) string {
	return protocol.FirstModels().ModelFor(name, memoryBytes)
}

// cudaVersion writes NVML's CUDA driver version (12020) as "12.2".
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

// throttleReasons names the bits of NVML's clocks-event (throttle) reasons mask, leaving
// out the idle and application-setting bits that are not a problem.
func throttleReasons(mask uint64) []string {
	names := []struct {
		bit  uint64
		name string
	}{
		{0x4, "sw_power_cap"},
		{0x8, "hw_slowdown"},
		{0x10, "sync_boost"},
		{0x20, "sw_thermal_slowdown"},
		{0x40, "hw_thermal_slowdown"},
		{0x80, "hw_power_brake_slowdown"},
		{0x100, "display_clock_setting"},
	}
	var out []string
	for _, n := range names {
		if mask&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	return out
}
