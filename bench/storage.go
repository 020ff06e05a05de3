package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// Storage measures the folder jobs write to: sequential write of size bytes in 1 MiB blocks
// ending with fsync, sequential read of the same file, and 4 KiB reads at random offsets
// for up to two seconds. The file is removed afterwards. Reads may be served from the page
// cache; the write figure includes the fsync.
func Storage(ctx context.Context, dir string, size int64) (protocol.StorageBenchmark, error) {
	var out protocol.StorageBenchmark
	if size < 1<<20 {
		size = 1 << 20
	}
	f, err := os.CreateTemp(dir, ".gpunex-bench-*")
	if err != nil {
		return out, fmt.Errorf("storage benchmark in %s: %w", dir, err)
	}
	path := f.Name()
	defer os.Remove(path)
	defer f.Close()
	block := make([]byte, 1<<20)
	rand.Read(block)
	t0 := time.Now()
	for written := int64(0); written < size; written += int64(len(block)) {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if _, err := f.Write(block); err != nil {
			return out, fmt.Errorf("storage benchmark write: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return out, fmt.Errorf("storage benchmark fsync: %w", err)
	}
	out.SeqWriteMBps = mbps(size, time.Since(t0))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return out, err
	}
	t0 = time.Now()
	n, err := io.CopyBuffer(io.Discard, f, block)
	if err != nil {
		return out, fmt.Errorf("storage benchmark read: %w", err)
	}
	out.SeqReadMBps = mbps(n, time.Since(t0))
	buf := make([]byte, 4096)
	blocks := size / 4096
	ops := 0
	t0 = time.Now()
	for time.Since(t0) < 2*time.Second && ops < 200_000 {
		if _, err := f.ReadAt(buf, mrand.Int64N(blocks)*4096); err != nil {
			return out, fmt.Errorf("storage benchmark random read: %w", err)
		}
		ops++
	}
	out.RandReadIOPS = round1(float64(ops) / time.Since(t0).Seconds())
	out.BytesMeasured = size
	return out, nil
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		d = time.Microsecond
	}
	return round1(float64(bytes) / (1 << 20) / d.Seconds())
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
