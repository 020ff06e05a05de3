package bench

import "github.com/gpunex/gpunex/protocol"

// Named wraps a probe so that the GPUs it finds are named by a catalogue (current, read at
// each listing): real GPUs by the name NVML reports and their memory; simulated GPUs keep
// the model their configuration gives.
func Named(p Probe, current func() *protocol.ModelCatalogue) Probe {
	return namedProbe{Probe: p, current: current}
}

type namedProbe struct {
	Probe
	current func() *protocol.ModelCatalogue
}

func (p namedProbe) GPUs() ([]GPUInfo, error) {
	gpus, err := p.Probe.GPUs()
	NameGPUs(gpus, p.current())
	return gpus, err
}

// NameGPUs names real GPUs by a catalogue (see Named).
func NameGPUs(gpus []GPUInfo, c *protocol.ModelCatalogue) {
	for i, g := range gpus {
		if !g.Simulated && g.Name != "" {
			gpus[i].Model = c.ModelFor(g.Name, g.MemoryBytes)
		}
	}
}

// CatalogueAffects says whether a change of catalogue from old to cur changes anything for
// GPUs an attestation measured: whether their model is in it, its datasheet figures (what
// scores and thresholds follow from), or, for a real GPU, the model its name maps to. A
// note, memory size, alias or support change that moves no GPU's model costs no run.
func CatalogueAffects(old, cur *protocol.ModelCatalogue, gpus []GPUInfo) bool {
	for _, g := range gpus {
		m := g.Model
		if !g.Simulated && g.Name != "" {
			if old.ModelFor(g.Name, g.MemoryBytes) != cur.ModelFor(g.Name, g.MemoryBytes) {
				return true
			}
			m = cur.ModelFor(g.Name, g.MemoryBytes)
		}
		a, okA := old.Datasheet(m)
		c, okC := cur.Datasheet(m)
		if okA != okC || a != c {
			return true
		}
	}
	return false
}
