package node

import (
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/node/config"
)

// OpenProbe returns the GPU probe a provider's configuration calls for: simulated GPUs when
// every declared GPU is simulated, NVML otherwise. Without an NVIDIA driver, NVML fails
// with an error that says so (bench.ErrNoDriver).
func OpenProbe(cfg config.Config, id peer.ID) (bench.Probe, error) {
	var sim []bench.SimulatedGPU
	for _, g := range cfg.Provider.GPUs {
		if !g.Simulated {
			return bench.OpenNVML()
		}
		for i := 0; i < g.Count; i++ {
			sim = append(sim, bench.SimulatedGPU{Model: g.Model, PerfFactor: g.PerfFactor, Lost: i >= g.Count-g.Lost, ECCErrors: g.ECCErrors})
		}
	}
	if len(sim) == 0 {
		return bench.OpenNVML()
	}
	return bench.NewSimulated(id.String(), sim), nil
}

// DetectGPUs lists the GPUs of a node's machine as its configuration calls for.
func DetectGPUs(cfg config.Config, id peer.ID) ([]bench.GPUInfo, error) {
	p, err := OpenProbe(cfg, id)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.GPUs()
}
