// Package bench will hold the GPU probe (NVML and simulated GPUs) and the benchmarks
// (compute, memory, storage, network) of the hardware issue. Nothing here yet; the folder
// is part of the repository layout fixed by the design.
package bench
