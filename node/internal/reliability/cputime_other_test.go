//go:build !unix

package reliability

import "time"

// cpuTime is not measured here (BenchmarkScorer10k then reports 0 cores).
func cpuTime() time.Duration { return 0 }
