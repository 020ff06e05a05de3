package jobs

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/sandbox"
)

// GPU slots: which job holds each of the provider's GPUs. A GPU is leased to one job at a
// time, by model; a GPU the probe lost or the latest attestation delists is leased to no
// new job; a job running on a GPU that fails is stopped with a "lost" reason; a real GPU
// is cleaned before the next renter gets it.

// gpuSlot is one GPU of the provider and the job holding it ("" when free).
type gpuSlot struct {
	model string
	gpu   sandbox.GPU
	job   string
	// ecc is the GPU's count of volatile uncorrected ECC errors at the latest probe (-1:
	// not available), eccAtLease that count when its job took it.
	ecc, eccAtLease int64
}

// gpuSlots are the provider's GPUs and the jobs holding them.
type gpuSlots struct {
	log   *slog.Logger
	clock clock.Clock
	// cleanGPU makes a real GPU fit for the next renter (Deps.CleanGPU).
	cleanGPU func(uuid string) error
	// wg counts the cleanings under way: the runner's, so that StopAll waits for them.
	wg *sync.WaitGroup

	mu   sync.Mutex
	list []gpuSlot
	lost map[string]bool // UUIDs of slots the latest probe did not find healthy, and the faulted
	// faulted are the UUIDs of slots a fatal Xid error took out until the runner restarts
	// (xid.go): whatever a later probe finds, they stay lost.
	faulted map[string]bool
	attest  Attestations // nil until UseAttestations
	// healthCheck probes the GPUs (UseHealthCheck); nil until the node sets it.
	healthCheck func()
	closed      bool // the runner stopped: a GPU that failed to clean is not tried again
}

// newGPUSlots returns a slot for each usable GPU the probe found (with its real UUID and
// index, or a simulated one where the configuration declares it).
func newGPUSlots(gpus []bench.GPUInfo, log *slog.Logger, clk clock.Clock, clean func(uuid string) error, wg *sync.WaitGroup) *gpuSlots {
	g := &gpuSlots{log: log, clock: clk, cleanGPU: clean, wg: wg}
	for _, info := range gpus {
		if !usable(info) {
			if info.Health.Error == "" && info.UUID != "" {
				log.Warn("GPU left out of jobs: its device node is unknown (NVML gave no minor number)", "uuid", info.UUID)
			}
			continue
		}
		g.list = append(g.list, newSlot(info))
	}
	return g
}

func newSlot(info bench.GPUInfo) gpuSlot {
	return gpuSlot{model: info.Model, gpu: sandbox.GPU{Index: info.Index, UUID: info.UUID, Minor: info.DeviceMinor, Simulated: info.Simulated},
		ecc: info.Health.ECCUncorrected, eccAtLease: -1}
}

// detectGPUs lists the machine's GPUs through a probe.
func detectGPUs(open func() (bench.Probe, error)) ([]bench.GPUInfo, error) {
	p, err := open()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.GPUs()
}

// usable says whether a probed GPU can run jobs: healthy, and for a real GPU with a known
// device node.
func usable(g bench.GPUInfo) bool {
	return g.Health.Error == "" && g.UUID != "" && (g.Simulated || g.DeviceMinor >= 0)
}

// reserve takes n free GPUs of a model for a job, or says how many are free.
func (g *gpuSlots) reserve(job, model string, n int) ([]sandbox.GPU, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delisted := map[string]bool{}
	if g.attest != nil {
		if a := g.attest.Latest(); a != nil {
			if a.HostBelow != "" {
				return nil, jobErr("this provider is delisted: %s", a.HostBelow)
			}
			for _, b := range a.GPUs {
				if b.Below != "" {
					delisted[b.UUID] = true
				}
			}
		}
	}
	var free, total []int
	for i, s := range g.list {
		if s.model == model && !delisted[s.gpu.UUID] && !g.lost[s.gpu.UUID] {
			total = append(total, i)
			if s.job == "" {
				free = append(free, i)
			}
		}
	}
	switch {
	case len(total) == 0:
		return nil, jobErr("this provider offers no %s", model)
	case n > len(total):
		return nil, jobErr("%d x %s asked, this provider has %d", n, model, len(total))
	case n > len(free):
		return nil, jobErr("capacity: %d of %d %s free right now", len(free), len(total), model)
	}
	var out []sandbox.GPU
	for _, i := range free[:n] {
		g.list[i].job, g.list[i].eccAtLease = job, g.list[i].ecc
		out = append(out, g.list[i].gpu)
	}
	return out, nil
}

// release frees a job's GPUs.
func (g *gpuSlots) release(job string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.list {
		if g.list[i].job == job {
			g.list[i].job = ""
		}
	}
}

// hold marks GPUs (by UUID) as a job's, after a restart.
func (g *gpuSlots) hold(job string, uuids []string) []sandbox.GPU {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []sandbox.GPU
	for _, u := range uuids {
		i := slices.IndexFunc(g.list, func(s gpuSlot) bool { return s.gpu.UUID == u })
		if i < 0 {
			// The probe did not find this GPU healthy at start, but the job still runs on
			// it: a slot that stays the job's, so that it is never leased twice (probed
			// fills in its details when the GPU answers).
			g.list = append(g.list, gpuSlot{gpu: sandbox.GPU{UUID: u, Index: -1, Minor: -1}, ecc: -1, eccAtLease: -1})
			i = len(g.list) - 1
		}
		g.list[i].job, g.list[i].eccAtLease = job, -1 // the count at its start is not known
		out = append(out, g.list[i].gpu)
	}
	return out
}

// busy reports whether a GPU is leased (or being cleaned).
func (g *gpuSlots) busy(uuid string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.list {
		if s.gpu.UUID == uuid {
			return s.job != ""
		}
	}
	return false
}

// runningJobs counts the jobs holding GPUs now (not those whose GPUs are being cleaned).
func (g *gpuSlots) runningJobs() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	jobs := map[string]bool{}
	for _, s := range g.list {
		if s.job != "" && !strings.HasPrefix(s.job, cleaningPrefix) {
			jobs[s.job] = true
		}
	}
	return len(jobs)
}

// ReasonGPULost starts the end reason of a job whose GPU failed under it: a "lost" reason,
// the provider's fault (protocol.ProviderFault).
const ReasonGPULost = "lost: "

// probed takes the latest list of the machine's GPUs (Runner.Probed) and returns the
// running jobs to stop, each with its "lost" reason: those on a GPU the probe no longer
// finds healthy, which is leased to no new job until a probe finds it again. A healthy GPU
// the slots did not have (lost when the runner started) gets a slot. found says whether
// the probe found any healthy GPU.
func (g *gpuSlots) probed(gpus []bench.GPUInfo) (stop map[string]string, found bool) {
	healthy := map[string]bench.GPUInfo{}
	why := map[int]string{} // by index: the probe's error for a GPU it cannot use
	for _, info := range gpus {
		if usable(info) {
			healthy[info.UUID] = info
		} else if info.Health.Error != "" {
			why[info.Index] = info.Health.Error
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	have := map[string]bool{}
	g.lost = map[string]bool{}
	stop = map[string]string{}
	for i, s := range g.list {
		have[s.gpu.UUID] = true
		if info, ok := healthy[s.gpu.UUID]; ok { // as it is now (after a driver reload, say)
			g.list[i].model, g.list[i].ecc = info.Model, info.Health.ECCUncorrected
			g.list[i].gpu.Index, g.list[i].gpu.Minor, g.list[i].gpu.Simulated = info.Index, info.DeviceMinor, info.Simulated
		} else {
			g.lost[s.gpu.UUID] = true
			if s.job != "" && stop[s.job] == "" {
				detail := why[s.gpu.Index]
				if detail == "" {
					detail = "gone from the driver's list"
				}
				stop[s.job] = fmt.Sprintf("%sGPU %s (%s) fell off the bus during the job: %s", ReasonGPULost, s.gpu.UUID, s.model, detail)
			}
		}
	}
	for uuid := range g.faulted {
		g.lost[uuid] = true
	}
	for _, info := range gpus {
		if _, ok := healthy[info.UUID]; ok && !have[info.UUID] {
			have[info.UUID] = true
			g.list = append(g.list, newSlot(info))
			g.log.Info("GPU available for jobs", "uuid", info.UUID, "model", info.Model)
		}
	}
	return stop, len(healthy) > 0
}

// lostUnder checks the GPUs now and says which of the job's GPUs failed, "" when none: one
// lost (fallen off the bus, gone from the list), or one whose count of uncorrected ECC
// errors rose since the job took it (its memory failed: the errors NVML reports as XID
// 48, 63, 64, 94 or 95, which end the CUDA contexts on the GPU).
func (g *gpuSlots) lostUnder(job string) string {
	g.mu.Lock()
	check := g.healthCheck
	g.mu.Unlock()
	if check == nil {
		return ""
	}
	check()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.list {
		if s.job == job && g.lost[s.gpu.UUID] {
			return fmt.Sprintf("%sGPU %s (%s) failed during the job", ReasonGPULost, s.gpu.UUID, s.model)
		}
		if s.job == job && s.eccAtLease >= 0 && s.ecc > s.eccAtLease {
			return fmt.Sprintf("%sGPU %s (%s) had %d uncorrected ECC errors during the job", ReasonGPULost, s.gpu.UUID, s.model, s.ecc-s.eccAtLease)
		}
	}
	return ""
}

// cleaningPrefix marks a GPU slot held while it is cleaned after the job it names.
const cleaningPrefix = "cleaning after "

// releaseAfterCleaning frees a job's GPUs: simulated ones at once, real ones once the job
// is removed (removed is closed) and cleanGPU has found no process on them and cleared
// their memory. A GPU that cannot be cleaned stays held and is tried again every minute:
// the next renter never gets what the last one left.
func (g *gpuSlots) releaseAfterCleaning(job string, removed <-chan struct{}) {
	g.mu.Lock()
	var dirty []string
	for i := range g.list {
		if g.list[i].job != job {
			continue
		}
		if g.list[i].gpu.Simulated {
			g.list[i].job = ""
			continue
		}
		g.list[i].job = cleaningPrefix + job
		dirty = append(dirty, g.list[i].gpu.UUID)
	}
	g.mu.Unlock()
	for _, uuid := range dirty {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			<-removed
			g.clean(uuid, cleaningPrefix+job)
		}()
	}
}

// cleanAfterRestart cleans every free real GPU before it is leased: a job may have ended
// while the node was down, or before its GPUs were cleaned.
func (g *gpuSlots) cleanAfterRestart() {
	g.mu.Lock()
	for i := range g.list {
		if g.list[i].job == "" && !g.list[i].gpu.Simulated {
			g.list[i].job = "restart"
		}
	}
	g.mu.Unlock()
	nothingRuns := make(chan struct{})
	close(nothingRuns)
	g.releaseAfterCleaning("restart", nothingRuns)
}

// clean runs cleanGPU on a GPU until it succeeds (or the runner stops), then frees it.
func (g *gpuSlots) clean(uuid, holder string) {
	for {
		err := g.cleanGPU(uuid)
		if err == nil {
			g.release(holder)
			return
		}
		g.log.Warn("GPU not leased again until it is clean: trying again in a minute", "gpu", uuid, "after", strings.TrimPrefix(holder, cleaningPrefix), "err", err)
		g.mu.Lock()
		closed := g.closed
		g.mu.Unlock()
		if closed {
			return
		}
		<-g.clock.After(time.Minute)
	}
}

// stop ends the retries of GPUs that failed to clean (the runner is stopping).
func (g *gpuSlots) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
}

// cleanGPU checks through NVML that no process holds a real GPU any more (a job's
// processes all end with its container; one still there is outside any job) and clears
// the memory the last job could have left (bench.ClearGPUMemory). A simulated GPU has
// nothing to clean.
func cleanGPU(open func() (bench.Probe, error), log *slog.Logger, uuid string) error {
	p, err := open()
	if err != nil {
		return err
	}
	defer p.Close()
	n, ok := p.(*bench.NVML)
	if !ok {
		return nil
	}
	pids, err := n.ProcessesOn(uuid)
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		return fmt.Errorf("processes %v still use the GPU", pids)
	}
	cleared, err := bench.ClearGPUMemory(uuid)
	if err != nil {
		return fmt.Errorf("clear its memory: %w", err)
	}
	log.Info("GPU memory cleared for the next renter", "gpu", uuid, "bytes", cleared)
	return nil
}

// The runner's GPUs, as the node and the benchmark runner see them.

// UseHealthCheck gives the runner the probe that checks the GPUs (and calls Probed), run
// when a job fails.
func (r *Runner) UseHealthCheck(check func()) {
	r.gpus.mu.Lock()
	defer r.gpus.mu.Unlock()
	r.gpus.healthCheck = check
}

// UseAttestations hands the runner the provider's benchmark runner, built after the job
// runner because it asks which GPUs are leased. Until then no GPU is delisted for jobs.
func (r *Runner) UseAttestations(a Attestations) {
	r.gpus.mu.Lock()
	defer r.gpus.mu.Unlock()
	r.gpus.attest = a
}

// Reserve takes n free GPUs of a model for a job, or says how many are free.
func (r *Runner) Reserve(job, model string, n int) ([]sandbox.GPU, error) {
	return r.gpus.reserve(job, model, n)
}

// Release frees a job's GPUs.
func (r *Runner) Release(job string) { r.gpus.release(job) }

// Hold marks GPUs (by UUID) as a job's, after a restart.
func (r *Runner) Hold(job string, uuids []string) []sandbox.GPU { return r.gpus.hold(job, uuids) }

// Busy reports whether a GPU is leased (benchmarks leave leased GPUs alone).
func (r *Runner) Busy(uuid string) bool { return r.gpus.busy(uuid) }

// RunningJobs counts the jobs holding GPUs now (not those whose GPUs are being cleaned).
func (r *Runner) RunningJobs() int { return r.gpus.runningJobs() }

// Probed takes the latest list of the machine's GPUs: a GPU the probe no longer finds
// healthy (fallen off the bus, or gone from the list) is leased to no new job until a probe
// finds it again, a job running on it is stopped with a "lost" reason naming it, and a
// healthy GPU the runner did not have (lost when it started) gets a slot.
func (r *Runner) Probed(gpus []bench.GPUInfo) {
	stop, found := r.gpus.probed(gpus)
	if found {
		r.mu.Lock()
		r.detectErr = nil
		r.mu.Unlock()
	}
	for job, reason := range stop {
		r.stopOnLostGPU(job, reason)
	}
}
