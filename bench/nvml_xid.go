//go:build linux && cgo

package bench

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// xidWaitMillis is how long one wait for an event lasts: how late a cancelled watch ends.
const xidWaitMillis = 500

// WatchXIDs implements XIDWatcher with NVML's critical-error events on every GPU.
func (n *NVML) WatchXIDs(ctx context.Context, found func(XID)) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return fmt.Errorf("NVML is closed")
	}
	set, ret := nvml.EventSetCreate()
	if ret != nvml.SUCCESS {
		n.mu.Unlock()
		return fmt.Errorf("NVML event set: %s", nvmlError(ret))
	}
	defer set.Free()
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		n.mu.Unlock()
		return fmt.Errorf("NVML device count: %s", nvmlError(ret))
	}
	registered := 0
	for i := 0; i < count; i++ {
		dev, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // a GPU already lost: GPUs() reports it
		}
		if dev.RegisterEvents(nvml.EventTypeXidCriticalError, set) == nvml.SUCCESS {
			registered++
		}
	}
	n.mu.Unlock()
	if registered == 0 && count > 0 {
		return fmt.Errorf("NVML: no GPU takes Xid event registrations")
	}
	for ctx.Err() == nil {
		ev, ret := set.Wait(xidWaitMillis)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		default:
			return fmt.Errorf("NVML event wait: %s", nvmlError(ret))
		}
		if ev.EventType != nvml.EventTypeXidCriticalError {
			continue
		}
		uuid, ret := ev.Device.GetUUID()
		if ret != nvml.SUCCESS {
			uuid = ""
		}
		found(XID{UUID: uuid, Code: ev.EventData})
	}
	return nil
}
