package node

import (
	"cmp"
	"strconv"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// A provider's telemetry (docs/operations.md, "Metrics"): each GPU's state as NVML (or the
// simulated probe) reports it at scrape time, whether it is leased or delisted, the jobs
// running, the provider's score and the age of the offer it announces.

// gpuCacheFor is how long one probe serves scrapes: several scrapers at once probe once.
const gpuCacheFor = 5 * time.Second

var (
	gpuLabels = []string{"uuid", "model", "index"}
	gpuDescs  = struct {
		temp, power, util, memUsed, memTotal, smClock, memClock, ecc, throttle, leased, delisted, lost *prometheus.Desc
	}{
		temp:     prometheus.NewDesc("gpunex_gpu_temperature_celsius", "GPU core temperature.", gpuLabels, nil),
		power:    prometheus.NewDesc("gpunex_gpu_power_watts", "GPU power draw (0 where not reported).", gpuLabels, nil),
		util:     prometheus.NewDesc("gpunex_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran on the GPU.", gpuLabels, nil),
		memUsed:  prometheus.NewDesc("gpunex_gpu_memory_used_bytes", "GPU memory in use.", gpuLabels, nil),
		memTotal: prometheus.NewDesc("gpunex_gpu_memory_total_bytes", "GPU memory in all.", gpuLabels, nil),
		smClock:  prometheus.NewDesc("gpunex_gpu_sm_clock_hertz", "GPU SM clock.", gpuLabels, nil),
		memClock: prometheus.NewDesc("gpunex_gpu_memory_clock_hertz", "GPU memory clock.", gpuLabels, nil),
		ecc:      prometheus.NewDesc("gpunex_gpu_ecc_uncorrected_errors", "Volatile uncorrected ECC errors since the driver loaded (absent where ECC is off).", gpuLabels, nil),
		throttle: prometheus.NewDesc("gpunex_gpu_throttled", "1 for each reason the GPU's clocks are held down now (thermal, power, ...).", append(gpuLabels[:3:3], "reason"), nil),
		leased:   prometheus.NewDesc("gpunex_gpu_leased", "1 while the GPU is leased to a job.", gpuLabels, nil),
		delisted: prometheus.NewDesc("gpunex_gpu_delisted", "1 while the GPU is out of offers for its benchmarks (under a threshold, not in the model catalogue, lost).", gpuLabels, nil),
		lost:     prometheus.NewDesc("gpunex_gpu_lost", "1 when the driver no longer reaches the GPU (fallen off the bus).", []string{"index"}, nil),
	}
)

// gpuCollector reports a provider's GPUs at scrape time.
type gpuCollector struct {
	n *Node

	mu      sync.Mutex
	at      time.Time // when gpus were read
	gpus    []bench.GPUInfo
	reading chan struct{} // closed when the probe in flight ends; nil when none is
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gpuDescs.temp, gpuDescs.power, gpuDescs.util, gpuDescs.memUsed, gpuDescs.memTotal,
		gpuDescs.smClock, gpuDescs.memClock, gpuDescs.ecc, gpuDescs.throttle, gpuDescs.leased, gpuDescs.delisted, gpuDescs.lost} {
		ch <- d
	}
}

// probeWait is how long a scrape waits for a probe in flight before it answers with the
// GPUs read before (a driver call can hang on a GPU that is falling off the bus).
const probeWait = 2 * time.Second

// probe lists the GPUs, reading them at most once per gpuCacheFor, in the background: a
// scrape waits at most probeWait for the reading, and scrapes never queue behind a hung one.
func (c *gpuCollector) probe() []bench.GPUInfo {
	c.mu.Lock()
	if time.Since(c.at) >= gpuCacheFor && c.reading == nil {
		done := make(chan struct{})
		c.reading = done
		go func() {
			var gpus []bench.GPUInfo
			if p, err := OpenProbe(c.n.cfg, c.n.peer.ID); err == nil {
				gpus, _ = p.GPUs()
				p.Close()
			}
			c.mu.Lock()
			c.gpus, c.at, c.reading = gpus, time.Now(), nil
			c.mu.Unlock()
			close(done)
		}()
	}
	reading := c.reading
	c.mu.Unlock()
	if reading != nil {
		select {
		case <-reading:
		case <-time.After(probeWait):
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gpus
}

// delisted returns why each GPU's latest benchmarks delisted it, by UUID ("" when they
// did not).
func (c *gpuCollector) delisted() map[string]string {
	below := map[string]string{}
	if c.n.bench != nil {
		if a := c.n.bench.Latest(); a != nil {
			for _, g := range a.GPUs {
				below[g.UUID] = cmp.Or(g.Below, a.HostBelow)
			}
		}
	}
	return below
}

// views describes each GPU as the dashboard shows it (GET /v1/provider/gpus).
func (c *gpuCollector) views() []api.GPUView {
	below := c.delisted()
	out := []api.GPUView{}
	for _, g := range c.probe() {
		v := api.GPUView{Index: g.Index, UUID: g.UUID, Model: g.Model, Simulated: g.Simulated, TemperatureC: g.Health.TemperatureC,
			PowerWatts: g.Health.PowerWatts, Utilization: g.Health.UtilizationPct, Throttle: g.Health.Throttle, State: "free"}
		switch {
		case g.Health.Error != "":
			v.State, v.Error = "lost", g.Health.Error
		case c.n.jobs != nil && c.n.jobs.Busy(g.UUID):
			v.State = "leased"
		case below[g.UUID] != "":
			v.State, v.DelistedWhy = "delisted", below[g.UUID]
		}
		out = append(out, v)
	}
	return out
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	below := c.delisted()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	bool01 := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, g := range c.probe() {
		index := strconv.Itoa(g.Index)
		if g.Health.Error != "" {
			gauge(gpuDescs.lost, 1, index)
			continue
		}
		l := []string{g.UUID, g.Model, index}
		h := g.Health
		gauge(gpuDescs.lost, 0, index)
		gauge(gpuDescs.temp, float64(h.TemperatureC), l...)
		gauge(gpuDescs.power, h.PowerWatts, l...)
		gauge(gpuDescs.util, float64(h.UtilizationPct)/100, l...)
		gauge(gpuDescs.memUsed, float64(h.MemoryUsedBytes), l...)
		gauge(gpuDescs.memTotal, float64(g.MemoryBytes), l...)
		gauge(gpuDescs.smClock, float64(h.SMClockMHz)*1e6, l...)
		gauge(gpuDescs.memClock, float64(h.MemClockMHz)*1e6, l...)
		if h.ECCUncorrected >= 0 {
			gauge(gpuDescs.ecc, float64(h.ECCUncorrected), l...)
		}
		for _, r := range h.Throttle {
			gauge(gpuDescs.throttle, 1, g.UUID, g.Model, index, r)
		}
		gauge(gpuDescs.leased, bool01(c.n.jobs != nil && c.n.jobs.Busy(g.UUID)), l...)
		gauge(gpuDescs.delisted, bool01(below[g.UUID] != ""), l...)
	}
}

// ownScore is this provider's latest score record by the coordinator that certified its
// current offer (any trusted coordinator's newest before it has one).
func (n *Node) ownScore() *protocol.SignedScore {
	var by peer.ID
	if n.publisher != nil {
		if so := n.publisher.Current(); so != nil && so.Cert != nil {
			by = so.Cert.Signer
		}
	}
	return n.scores.Score(n.peer.ID, by)
}

// registerProviderTelemetry adds a provider's GPU, job, score and offer gauges to its
// registry.
func (n *Node) registerProviderTelemetry() {
	n.gpus = &gpuCollector{n: n}
	n.metrics.Registry.MustRegister(n.gpus,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpunex_jobs_running", Help: "Jobs holding GPUs on this provider now."},
			func() float64 { return float64(n.jobs.RunningJobs()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpunex_score", Help: "This provider's reliability score (0-100) in the coordinator's latest score record; -1 before the first."},
			func() float64 {
				if s := n.ownScore(); s != nil {
					return float64(s.Score)
				}
				return -1
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpunex_offer_age_seconds", Help: "Age of the offer this provider announces now; -1 when it announces none (uncertified, withdrawn)."},
			func() float64 {
				if so := n.publisher.Current(); so != nil && so.Offer.Withdrawn == "" {
					return time.Since(so.Offer.IssuedAt).Seconds()
				}
				return -1
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpunex_earnings_pending_micro_usdc", Help: "Earned and not paid out yet, in micro-USDC, as the coordinators last said (asked hourly)."},
			func() float64 { return float64(n.earningsPending.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpunex_earnings_checked_timestamp_seconds", Help: "When the coordinators last told this provider its earnings (Unix time); 0 before."},
			func() float64 { return float64(n.earningsChecked.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpunex_certificate_expiry_timestamp_seconds", Help: "When this provider's certificate expires (Unix time); 0 without one."},
			func() float64 {
				if c := n.applicant.HeldCertificate(); c != nil {
					return float64(c.ExpiresAt.Unix())
				}
				return 0
			}),
	)
}
