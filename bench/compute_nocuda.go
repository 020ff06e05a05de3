//go:build !(linux && cgo)

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// computeReal: this build (not Linux, or without cgo) cannot load the CUDA driver.
func computeReal(ctx context.Context, g GPUInfo, out protocol.GPUBenchmark, t0 time.Time, _ *protocol.ModelCatalogue) (protocol.GPUBenchmark, error) {
	return out, fmt.Errorf("%w: this gpunex build cannot run GPU kernels (it needs Linux and cgo)", ErrComputeUnavailable)
}
