package node

import (
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/protocol"
)

// GPUInfo is a GPU as the node detects it (see bench.GPUInfo).
type GPUInfo = bench.GPUInfo

// OpenProbe returns the GPU probe a provider's configuration calls for: simulated GPUs when
// every declared GPU is simulated, NVML otherwise. Without an NVIDIA driver, NVML fails
// with an error that says so (bench.ErrNoDriver).
func OpenProbe(cfg Config, id peer.ID) (bench.Probe, error) {
	var sim []bench.SimulatedGPU
	for _, g := range cfg.Provider.GPUs {
		if !g.Simulated {
			return bench.OpenNVML()
		}
		for i := 0; i < g.Count; i++ {
			sim = append(sim, bench.SimulatedGPU{Model: g.Model, PerfFactor: g.PerfFactor, Lost: i >= g.Count-g.Lost})
		}
	}
	if len(sim) == 0 {
		return bench.OpenNVML()
	}
	return bench.NewSimulated(id.String(), sim), nil
}

// DetectGPUs lists the GPUs of a node's machine as its configuration calls for.
func DetectGPUs(cfg Config, id peer.ID) ([]GPUInfo, error) {
	p, err := OpenProbe(cfg, id)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.GPUs()
}

// detectedByModel counts detected GPUs per model, for an application.
func detectedByModel(gpus []GPUInfo) []protocol.DetectedGPU {
	var out []protocol.DetectedGPU
	for _, g := range gpus {
		if g.Health.Error != "" {
			continue
		}
		found := false
		for i := range out {
			if out[i].Model == g.Model {
				out[i].Count++
				found = true
			}
		}
		if !found {
			out = append(out, protocol.DetectedGPU{Model: g.Model, Count: 1, VRAMGB: g.VRAMGB, Simulated: g.Simulated})
		}
	}
	return out
}
