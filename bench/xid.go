package bench

import (
	"context"
	"sync"
)

// XID is one Xid error the NVIDIA driver reported for a GPU: the driver's own code for a
// fault, from an application's bad memory access (13, 31, 43) to a GPU that must be reset
// (48, 79, 119...).
type XID struct {
	UUID string
	Code uint64
}

// XIDWatcher is a probe that can report Xid errors as they happen (NVML's critical-error
// events, or injected ones for simulated GPUs).
type XIDWatcher interface {
	// WatchXIDs calls found for each Xid error until ctx ends, then returns nil; it returns
	// an error at once when the events cannot be watched.
	WatchXIDs(ctx context.Context, found func(XID)) error
}

// fatalXIDs are the Xid errors after which a GPU cannot be trusted with another job until
// it is reset or repaired, from NVIDIA's Xid catalogue: memory (ECC) faults, a halted
// on-board controller, the NVLink or the chip-to-chip link down, the GPU gone from the bus,
// its system processor (GSP) failing, a reset the driver asks for. Errors an application
// causes itself (13, 31, 43, 45, 68, 69...) are not among them: they end that job only.
var fatalXIDs = map[uint64]string{
	48:  "double-bit ECC error",
	62:  "internal micro-controller halt",
	63:  "ECC page retirement or row remapping recorded",
	64:  "ECC page retirement or row remapping failed",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
	121: "C2C link error",
	140: "unrecovered ECC error",
	154: "GPU recovery action changed: the driver asks for a reset",
}

// FatalXID says whether an Xid error means the GPU must be reset or repaired before it
// runs another job, and what the error is.
func FatalXID(code uint64) (fatal bool, meaning string) {
	meaning, fatal = fatalXIDs[code]
	return fatal, meaning
}

// simulatedXIDs carries Xid errors injected into simulated GPUs (InjectXID) to the probes
// watching them.
var simulatedXIDs = struct {
	sync.Mutex
	watchers map[*func(XID)]bool
}{watchers: map[*func(XID)]bool{}}

// InjectXID reports an Xid error on a simulated GPU, as the driver would on a real one:
// every simulated probe watching a GPU of that UUID sees it. Tests and devnets use it.
func InjectXID(uuid string, code uint64) {
	simulatedXIDs.Lock()
	fs := make([]func(XID), 0, len(simulatedXIDs.watchers))
	for f := range simulatedXIDs.watchers {
		fs = append(fs, *f)
	}
	simulatedXIDs.Unlock()
	for _, f := range fs {
		f(XID{UUID: uuid, Code: code})
	}
}

// WatchXIDs implements XIDWatcher: it reports the Xid errors injected into this probe's
// GPUs until ctx ends.
func (s *Simulated) WatchXIDs(ctx context.Context, found func(XID)) error {
	gpus, err := s.GPUs()
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, g := range gpus {
		if g.UUID != "" {
			mine[g.UUID] = true
		}
	}
	f := func(x XID) {
		if mine[x.UUID] {
			found(x)
		}
	}
	simulatedXIDs.Lock()
	simulatedXIDs.watchers[&f] = true
	simulatedXIDs.Unlock()
	<-ctx.Done()
	simulatedXIDs.Lock()
	delete(simulatedXIDs.watchers, &f)
	simulatedXIDs.Unlock()
	return nil
}
