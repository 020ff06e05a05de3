package bench

import "github.com/gpunex/gpunex/protocol"

// The mapping of NVML's values, shared by the NVML probe and the tests that replay recorded
// values on machines without a driver.

// rawGPU is what NVML says about one device, before mapping: the tests replay a fixture of
// such values (testdata/) through fromRaw.
type rawGPU struct {
	Index        int    `json:"index"`
	Name         string `json:"name"`
	UUID         string `json:"uuid"`
	MemoryTotal  uint64 `json:"memory_total"`
	Driver       string `json:"driver"`
	CUDA         int    `json:"cuda"`
	PCIBusID     string `json:"pci_bus_id"`
	Minor        int    `json:"minor"` // -1: not read
	Temperature  int    `json:"temperature"`
	ThrottleMask uint64 `json:"throttle_mask"`
	ECC          int64  `json:"ecc"`
	// Power in milliwatts, utilisation in percent, memory used in bytes, clocks in MHz: 0
	// where not read (older fixtures).
	PowerMilliW uint32 `json:"power_mw,omitempty"`
	UtilGPU     uint32 `json:"util_gpu,omitempty"`
	MemoryUsed  uint64 `json:"memory_used,omitempty"`
	SMClock     uint32 `json:"sm_clock,omitempty"`
	MemClock    uint32 `json:"mem_clock,omitempty"`
	Error       string `json:"error,omitempty"`
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// fromRaw maps NVML's values to a GPUInfo.
func fromRaw(r rawGPU) GPUInfo {
	g := GPUInfo{
		Index: r.Index, UUID: r.UUID, Name: r.Name, MemoryBytes: r.MemoryTotal,
		VRAMGB: protocol.NominalGB(int((r.MemoryTotal + (1<<30)/2) >> 30)), DriverVersion: r.Driver, CUDAVersion: cudaVersion(r.CUDA),
		PCIBusID: r.PCIBusID, DeviceMinor: r.Minor,
		Health: Health{TemperatureC: r.Temperature, Throttle: throttleReasons(r.ThrottleMask), ECCUncorrected: r.ECC, Error: r.Error,
			PowerWatts: float64(r.PowerMilliW) / 1000, UtilizationPct: int(r.UtilGPU), MemoryUsedBytes: r.MemoryUsed,
			SMClockMHz: int(r.SMClock), MemClockMHz: int(r.MemClock)},
	}
	if r.Name != "" {
		g.Model = CanonicalModel(r.Name, r.MemoryTotal)
	}
	return g
}
