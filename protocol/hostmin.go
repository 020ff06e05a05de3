package protocol

import (
	"fmt"
	"math"
	"time"
)

// The host's link and disk: a coordinator measures the network of a benchmark run from its
// own end and signs what it measured (a network receipt, bound to the run's challenge), so
// that a provider cannot invent its network figures; a provider whose link or jobs folder
// falls under the listing minimum is delisted, all its GPUs, until a run passes. See
// docs/benchmarks.md, "Host minimums".

const (
	// MaxNetworkReceiptSize caps a network receipt envelope (it travels in attestations).
	MaxNetworkReceiptSize = 1 << 10
	// MinReceiptBytes is the least a run must move each way for its network figures to
	// count: a provider asking for a few bytes gets no figure, and no listing.
	MinReceiptBytes = 1 << 20
	// MinRTTSamples is the least number of round trips a run must have timed for its
	// figures to count: a provider sending no ping gets no round-trip time of 0.
	MinRTTSamples = 8
	// MinStorageBytes is the least a storage run must write for the storage minimums to
	// apply: a smaller file measures the page cache and one fsync, not the disk (tests and
	// the devnet write 1-16 MiB; the default is 256).
	MinStorageBytes = 64 << 20
)

// NetworkReceipt is a coordinator's own measurement of the link of one benchmark run:
// round trips timed between its answer to a ping and the next ping, the upload timed as it
// received it, the download from its first byte sent to the provider's next request.
type NetworkReceipt struct {
	Version     int       `json:"version"`
	Coordinator string    `json:"coordinator"`
	Provider    string    `json:"provider"`
	Nonce       string    `json:"nonce"` // the run's challenge
	MeasuredAt  time.Time `json:"measured_at"`
	RTTMilli    float64   `json:"rtt_ms"`
	RTTSamples  int       `json:"rtt_samples"` // round trips timed
	UpMbps      float64   `json:"up_mbps"`     // provider to coordinator, megabits (10^6) per second
	DownMbps    float64   `json:"down_mbps"`   // coordinator to provider
	Bytes       int64     `json:"bytes"`       // moved each way (the smaller)
	// Minimum is the listing minimum the coordinator holds its providers to (its policy;
	// ListingMinimum unless it sets its own): validators apply it.
	Minimum HostMinimum `json:"minimum"`
}

// CheckNetworkReceipt opens an attestation's network receipt: signed by the coordinator of its
// challenge, for the same provider and nonce, within the challenge's time to live.
func CheckNetworkReceipt(raw []byte, c *Challenge, provider string) (*NetworkReceipt, error) {
	if len(raw) == 0 {
		return nil, invalid(KindNetworkReceipt, "missing: an attestation carries its coordinator's receipt of the run")
	}
	env, err := openKind(raw, KindNetworkReceipt)
	if err != nil {
		return nil, err
	}
	var r NetworkReceipt
	if err := decodePayload(env, AttestationVersion, &r, func() int { return r.Version }); err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error { return invalid(KindNetworkReceipt, format, args...) }
	switch {
	case env.signerText != c.Coordinator || r.Coordinator != c.Coordinator:
		return nil, fmt.Errorf("%w: network receipt signed by %s, the challenge by %s", ErrWrongSigner, env.Signer, c.Coordinator)
	case r.Provider != provider || r.Nonce != c.Nonce:
		return nil, fmt.Errorf("%w: network receipt of another run (provider %s, nonce %s)", ErrReplay, r.Provider, r.Nonce)
	case r.MeasuredAt.Before(c.IssuedAt) || r.MeasuredAt.Sub(c.IssuedAt) > ChallengeTTL:
		return nil, bad("measured %s after its challenge (at most %s)", r.MeasuredAt.Sub(c.IssuedAt), ChallengeTTL)
	case r.Bytes < 0 || r.Bytes > MaxBenchTransfer || r.RTTSamples < 0 || r.RTTSamples > 64:
		return nil, bad("bytes %d, rtt_samples %d", r.Bytes, r.RTTSamples)
	}
	m := r.Minimum
	for _, f := range []float64{r.RTTMilli, r.UpMbps, r.DownMbps, m.UpMbps, m.DownMbps, m.MaxRTTMilli, m.SeqWriteMBps, m.SeqReadMBps, m.RandReadIOPS} {
		if f < 0 || f > 1e7 || math.IsNaN(f) {
			return nil, bad("figure out of range")
		}
	}
	r.Minimum.Name = ListingMinimum.Name
	return &r, nil
}

// HostMinimum is what a provider's link to its coordinator (as the coordinator measured it)
// and its jobs folder must reach. Storage figures of a run under MinStorageBytes, or of 0,
// are not held against the provider (they are its own word in any case: nobody else can
// time its disk); the network always is.
type HostMinimum struct {
	Name         string  `json:"-"` // in the reasons: "listing", "Enterprise"
	UpMbps       float64 `json:"up_mbps"`
	DownMbps     float64 `json:"down_mbps"`
	MaxRTTMilli  float64 `json:"max_rtt_ms"`
	SeqWriteMBps float64 `json:"seq_write_mbps"` // with fsync
	SeqReadMBps  float64 `json:"seq_read_mbps"`
	RandReadIOPS float64 `json:"rand_read_iops"` // 4 KiB
}

// ListingMinimum is the default listing minimum: under it a provider is delisted, every
// GPU, whatever its tier. It is set for GPUs at home on a good residential link: a job's
// image and data must come in, and its output go out, in minutes, not hours, from an SSD.
// A coordinator may hold its providers to another (coordinator.host_minimum), which it
// signs into each network receipt.
var ListingMinimum = HostMinimum{Name: "listing", UpMbps: 20, DownMbps: 50, MaxRTTMilli: 300,
	SeqWriteMBps: 50, SeqReadMBps: 100, RandReadIOPS: 1000}

// EnterpriseMinimum is what the Enterprise tier needs measured: the 1 Gbit/s symmetric
// link its applications declare (EnterpriseMinGbps, with a margin for the measurement) and
// data-centre storage. A provider under it is told (gpunex bench show); the tier rule is in
// docs/onboarding.md.
var EnterpriseMinimum = HostMinimum{Name: "Enterprise", UpMbps: 800, DownMbps: 800, MaxRTTMilli: 100,
	SeqWriteMBps: 500, SeqReadMBps: 1000, RandReadIOPS: 20000}

// HostShortfall says which minimum of m the coordinator's receipt or the storage figures
// fall under, or "" when none: metric, value, minimum, and what to check. The listing
// minimum of a receipt is its own (r.Minimum).
func HostShortfall(r *NetworkReceipt, s StorageBenchmark, m HostMinimum) string {
	if r == nil || r.Bytes < MinReceiptBytes || r.RTTSamples < MinRTTSamples {
		return fmt.Sprintf("network not measured by the coordinator (a run must time %d round trips and move at least %d MiB each way): run the benchmarks again (gpunex bench run)", MinRTTSamples, MinReceiptBytes>>20)
	}
	type check struct {
		name, unit string
		got, limit float64
		over       bool // the figure must stay under the limit
		hint       string
	}
	checks := []check{
		{"up_mbps", "Mbit/s", r.UpMbps, m.UpMbps, false, "check your internet link's upload, other traffic on it, and the router's QoS"},
		{"down_mbps", "Mbit/s", r.DownMbps, m.DownMbps, false, "check your internet link's download and other traffic on it"},
		{"rtt_ms", "ms", r.RTTMilli, m.MaxRTTMilli, true, "check for a congested link or Wi-Fi, and the route to the coordinator"},
		{"seq_write_mbps", "MB/s", s.SeqWriteMBps, m.SeqWriteMBps, false, "put the jobs folder (<home>/jobs) on an SSD, and check the disk's health and other writes"},
		{"seq_read_mbps", "MB/s", s.SeqReadMBps, m.SeqReadMBps, false, "put the jobs folder on an SSD, and check the disk's health"},
		{"rand_read_iops", "IOPS", s.RandReadIOPS, m.RandReadIOPS, false, "put the jobs folder on an SSD: 4 KiB random reads are what a spinning disk cannot do"},
	}
	for i, c := range checks {
		network := i < 3
		if !network && (c.got == 0 || s.BytesMeasured < MinStorageBytes) {
			continue
		}
		if (c.over && c.got > c.limit) || (!c.over && c.got < c.limit) {
			word := "under the minimum"
			if c.over {
				word = "over the maximum"
			}
			by := ""
			if network {
				by = " (measured by the coordinator)"
			}
			return fmt.Sprintf("%s %.1f %s%s is %s of %.0f %s for %s: %s", c.name, c.got, c.unit, by, word, c.limit, c.unit, m.Name, c.hint)
		}
	}
	return ""
}
