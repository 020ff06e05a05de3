package benchmarks

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/protocol"
)

// When a provider's runs happen: after joining, then whenever one is due (the interval, a
// driver change, a GPU lost or back, a model catalogue that changes this machine's GPUs),
// or on request.

// Loop runs the benchmarks once the node has peers, then whenever the interval has passed
// or the driver changed (checked hourly), or on request.
func (b *Runner) Loop(ctx context.Context) {
	for b.peer.Connected() == 0 {
		select {
		case <-ctx.Done():
			return
		case <-b.clock.After(500 * time.Millisecond):
		}
	}
	retry := standingRetry
	for {
		wait := min(time.Hour, b.cfg.Interval.Duration)
		if b.Due() {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			_, err := b.Run(rctx, nil)
			cancel()
			switch {
			case err == nil || ctx.Err() != nil:
				retry = standingRetry
			case errors.Is(err, ErrNotProvider):
				// Not applied yet, or the application or certificate on its way: again
				// soon, then less and less often (StandingChanged wakes the loop at once).
				b.log.Info("the coordinator measures its providers and applicants only: benchmarking again once this node has applied", "in", retry)
				wait, retry = min(wait, retry), min(2*retry, time.Hour)
			default:
				b.log.Warn("benchmark run failed; retrying later", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-b.clock.After(wait):
		}
	}
}

// standingRetry is the first wait before a run that the coordinator refused for want of a
// certificate or an application is tried again; each refusal doubles it, up to an hour.
const standingRetry = 10 * time.Second

// StandingChanged tells the runner that this node's application or certificate changed
// (the applicant's notifications): a run the coordinator refused for want of them is tried
// again at once.
func (b *Runner) StandingChanged() {
	b.mu.Lock()
	refused := b.refused
	b.mu.Unlock()
	if refused {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// Due says whether a run is needed: none yet, older than the interval, or the driver
// changed since.
func (b *Runner) Due() bool {
	gpus, err := b.detect()
	if err == nil && b.jobs != nil {
		b.jobs.Probed(gpus)
	}
	b.mu.Lock()
	forced := b.forced // cleared by a run that succeeds
	b.mu.Unlock()
	last := b.Latest()
	if forced || last == nil || b.clock.Now().Sub(last.IssuedAt) >= b.cfg.Interval.Duration {
		return true
	}
	if err != nil || len(gpus) == 0 {
		return false
	}
	// A driver change, or a GPU that fell off the bus or came back since the last run.
	lostNow, lostThen := 0, 0
	for _, g := range gpus {
		if g.Health.Error != "" {
			lostNow++
		}
	}
	for _, g := range last.GPUs {
		if strings.HasPrefix(g.Below, protocol.LostPrefix) {
			lostThen++
		}
	}
	return gpus[0].DriverVersion != last.DriverVersion || lostNow != lostThen
}

// CatalogueChanged runs the benchmarks again when the coordinator they run against
// publishes a model catalogue that changes this machine's GPUs: their model's entry, or
// the model a real GPU's name maps to (a GPU delisted for want of an entry is listed once
// a run scores it). A change that concerns other models costs nothing.
//
// It looks in the background, once any run in progress has ended: a catalogue that came
// with a run's own challenge is the one that run scores with.
func (b *Runner) CatalogueChanged(coordinator peer.ID, _, cur *protocol.ModelCatalogue) {
	if len(b.trusted) == 0 || coordinator != b.trusted[0] {
		return
	}
	go func() {
		b.run.Lock()
		b.run.Unlock()
		b.catalogueChanged(coordinator, cur)
	}()
}

func (b *Runner) catalogueChanged(coordinator peer.ID, cur *protocol.ModelCatalogue) {
	last := b.Latest()
	if last == nil {
		return // the first run is due anyway
	}
	used := b.models.Lookup(coordinator, last.Challenge.ModelsSeq)
	if last.Challenge.Coordinator != coordinator.String() || used == nil {
		used = protocol.FirstModels()
	}
	gpus, err := b.detect()
	if err != nil || !bench.CatalogueAffects(used, cur, gpus) {
		return
	}
	// Every provider the change concerns benchmarks again: spread them over CatalogueJitter.
	wait := time.Duration(mrand.Int64N(int64(CatalogueJitter) + 1))
	b.log.Info("the coordinator's model catalogue changed this machine's models: benchmarking again", "seq", cur.Seq, "in", wait)
	b.mu.Lock()
	b.forced = true // until a run succeeds
	b.mu.Unlock()
	time.AfterFunc(wait, b.Wake)
}

// CatalogueJitter spreads over this long the runs that a new model catalogue starts on the
// providers it concerns, all against one coordinator. (Tests shorten it.)
var CatalogueJitter = 2 * time.Minute

// Wake asks the loop for a run now.
func (b *Runner) Wake() {
	b.mu.Lock()
	b.forced = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// CheckGPUs probes the GPUs now and hands the result to the job runner (which stops jobs
// on a GPU that was lost): what the hourly check does, for a job that failed.
func (b *Runner) CheckGPUs() {
	if gpus, err := b.detect(); err == nil && b.jobs != nil {
		b.jobs.Probed(gpus)
	}
}

// detect lists the machine's GPUs.
func (b *Runner) detect() ([]bench.GPUInfo, error) {
	p, err := b.probe()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.GPUs()
}
