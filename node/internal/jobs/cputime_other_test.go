//go:build !unix

package jobs

import "time"

// processCPU is not measured here (BenchmarkTunnel then reports 0 CPU seconds).
func processCPU() time.Duration { return 0 }
