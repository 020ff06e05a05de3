//go:build linux && cgo

package bench

import (
	"fmt"
	"runtime"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ClearGPUMemory zeroes the memory one renter's job may have left on a GPU before the
// next renter gets it: every byte the driver reports free is allocated (1 GiB at a time,
// halving when an allocation fails, down to 64 MiB), filled with zeros with cuMemsetD32,
// the last word of each allocation read back as a check, and freed. Memory another process
// still holds is not touched: call it once ProcessesOn finds none. It returns the bytes
// cleared.
func ClearGPUMemory(uuid string) (uint64, error) {
	if err := loadCUDA(); err != nil {
		return 0, err
	}
	cudaMu.Lock()
	defer cudaMu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	devs, err := cudaDevices()
	if err != nil {
		return 0, err
	}
	dev, err := matchCUDADevice(devs, uuid, "")
	if err != nil {
		return 0, err
	}
	ctx, err := newCUDAContext(dev)
	if err != nil {
		return 0, err
	}
	defer ctx.Close()
	free, _, err := ctx.MemInfo()
	if err != nil {
		return 0, err
	}
	var bufs []*cudaBuffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	var cleared uint64
	chunk := uint64(1 << 30)
	for cleared < free && chunk >= 64<<20 {
		size := min(chunk, free-cleared) &^ 3
		if size < 4 {
			break
		}
		b, err := cudaAlloc(size)
		if err != nil {
			chunk /= 2
			continue
		}
		bufs = append(bufs, b)
		if err := b.Fill(0); err != nil {
			return cleared, err
		}
		cleared += size
	}
	if err := ctx.Synchronize(); err != nil {
		return cleared, err
	}
	for _, b := range bufs {
		w, err := b.Read(b.Size-4, 1)
		if err != nil {
			return cleared, err
		}
		if w[0] != 0 {
			return cleared, fmt.Errorf("GPU %s: memory read back %#x after it was zeroed", uuid, w[0])
		}
	}
	return cleared, nil
}

// ProcessesOn lists the processes using a GPU (compute and graphics), by host PID.
func (n *NVML) ProcessesOn(uuid string) ([]uint32, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("NVML is closed")
	}
	dev, ret := nvml.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: %s", uuid, nvmlError(ret))
	}
	var pids []uint32
	for _, list := range []func() ([]nvml.ProcessInfo, nvml.Return){dev.GetComputeRunningProcesses, dev.GetGraphicsRunningProcesses} {
		ps, ret := list()
		if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
			return nil, fmt.Errorf("GPU %s processes: %s", uuid, nvmlError(ret))
		}
		for _, p := range ps {
			pids = append(pids, p.Pid)
		}
	}
	return pids, nil
}
