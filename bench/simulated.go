package bench

import (
	"fmt"
	"hash/fnv"

	"github.com/gpunex/gpunex/protocol"
)

// SimulatedGPU declares one simulated GPU.
type SimulatedGPU struct {
	Model string
	// PerfFactor is its performance against the datasheet: 1 is nominal, 0.6 a throttled
	// GPU at 60%. 0 means 1.
	PerfFactor float64
	// Lost makes it report itself fallen off the bus, as NVML reports a lost GPU: index,
	// driver and the error, nothing else.
	Lost bool
	// ECCErrors is the count of volatile uncorrected ECC errors it reports.
	ECCErrors int64
}

// Simulated is a probe of GPUs that do not exist: devnets and tests use it where there is
// no NVIDIA hardware. It reports them like NVML reports real ones, flagged Simulated.
type Simulated struct {
	seed string
	gpus []SimulatedGPU
}

// NewSimulated returns a probe of the given GPUs; seed (the node's peer ID) makes their
// UUIDs stable and distinct between nodes.
func NewSimulated(seed string, gpus []SimulatedGPU) *Simulated {
	return &Simulated{seed: seed, gpus: gpus}
}

// Kind implements Probe.
func (s *Simulated) Kind() string { return "simulated" }

// Close implements Probe.
func (s *Simulated) Close() error { return nil }

// simulatedVRAM is the memory of a model: from the compiled-in catalogue, or the "-NNGB"
// suffix, else 16.
func simulatedVRAM(model string) int {
	if gb := protocol.FirstModels().VRAMGB(model); gb > 0 {
		return gb
	}
	return 16
}

// GPUs implements Probe.
func (s *Simulated) GPUs() ([]GPUInfo, error) {
	out := make([]GPUInfo, 0, len(s.gpus))
	for i, g := range s.gpus {
		if g.Lost {
			out = append(out, GPUInfo{Index: i, DriverVersion: "simulated", CUDAVersion: "12.2", DeviceMinor: -1, Simulated: true,
				Health: Health{ECCUncorrected: -1, Error: "device handle: GPU is lost (simulated)"}})
			continue
		}
		model := protocol.NormalizeModel(g.Model)
		vram := simulatedVRAM(model)
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d/%s", s.seed, i, model)
		sum := h.Sum64()
		factor := g.PerfFactor
		if factor <= 0 {
			factor = 1
		}
		info := GPUInfo{
			Index: i, UUID: fmt.Sprintf("GPU-5e000000-%04x-%04x-%04x-%012x", sum>>48, (sum>>32)&0xffff, (sum>>16)&0xffff, sum&0xffffffffffff),
			Name: "Simulated " + model, Model: model, VRAMGB: vram, MemoryBytes: uint64(vram) << 30,
			DriverVersion: "simulated", CUDAVersion: "12.2", PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x10+i),
			DeviceMinor: -1, Simulated: true, PerfFactor: factor,
			Health: Health{TemperatureC: 40, ECCUncorrected: g.ECCErrors, PowerWatts: 60, SMClockMHz: 1410, MemClockMHz: 1593},
		}
		if factor < 0.9 { // a degraded GPU looks like a throttled one
			info.Health.Throttle = []string{"sw_thermal_slowdown"}
			info.Health.TemperatureC = 87
		}
		out = append(out, info)
	}
	return out, nil
}
