//go:build !(linux && cgo)

package bench

import "fmt"

// ClearGPUMemory: this build cannot load the CUDA driver.
func ClearGPUMemory(uuid string) (uint64, error) {
	return 0, fmt.Errorf("%w: this gpunex build cannot clear GPU memory (it needs Linux and cgo)", ErrComputeUnavailable)
}

// ProcessesOn: this build has no NVML.
func (n *NVML) ProcessesOn(uuid string) ([]uint32, error) { return nil, ErrNoDriver }
