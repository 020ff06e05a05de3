// Package metrics holds one node's Prometheus metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are one node's Prometheus metrics, on their own registry so that several nodes
// can live in one process (tests, benchmarks).
type Metrics struct {
	Registry        *prometheus.Registry
	RecordsAccepted *prometheus.CounterVec
	RecordsRejected *prometheus.CounterVec
	OffersKnown     prometheus.Gauge
	OfferPublishes  prometheus.Counter
	// OfferSyncRecords counts valid offers received in catalogue syncs, whether or not the
	// node already held them.
	OfferSyncRecords prometheus.Counter
	// OffersCaughtUp counts, on a coordinator, providers' offers fetched after an uptime
	// probe because gossip had not brought them, and new to it (offers.Catalogue.CatchUp).
	OffersCaughtUp prometheus.Counter
	// SyncsServed counts the syncs peers asked of this node, by kind (offers, revocations,
	// scores) and outcome: served, busy (no slot within the wait), rate_limited.
	SyncsServed *prometheus.CounterVec
	// SyncSeconds times a served sync's answer, by kind and phase: wait (for a slot),
	// write (the records, until the asker took the last).
	SyncSeconds *prometheus.HistogramVec
	Searches    prometheus.Histogram
	APIRequests *prometheus.CounterVec
	// Jobs (provider side).
	JobProposals *prometheus.CounterVec
	// JobSessions counts a renter's sessions with its running jobs (port tunnels, shells,
	// inputs) by kind and outcome: opened, or the refusal's reason.
	JobSessions *prometheus.CounterVec
	JobsStarted prometheus.Counter
	JobsEnded   *prometheus.CounterVec
	// JobInputBytes counts the bytes of renters' input chunks by outcome: received (arrived
	// and checked), held (already in the renter's cache: not sent), refused (a digest or
	// frame that did not hold).
	JobInputBytes *prometheus.CounterVec
	// UptimeProbes counts a coordinator's probes by outcome (answered, missed).
	UptimeProbes *prometheus.CounterVec
	// DHTAnnouncements counts a provider's DHT writes that succeeded: its offer record
	// stored ("offer"), or itself announced under a region's or model's key ("provider").
	DHTAnnouncements *prometheus.CounterVec
}

func New(peers, penalised func() float64) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		RecordsAccepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_records_accepted_total",
			Help: "Signed records newly accepted into the node's book, by kind and by where they came from (gossip, dht, stream, sync, self).",
		}, []string{"kind", "source"}),
		RecordsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_records_rejected_total",
			Help: "Signed records rejected, by kind, source (gossip, dht, dht_validator, stream, sync, self) and reason (bad_signature, replay, superseded, expired, too_large, malformed, ...).",
		}, []string{"kind", "source", "reason"}),
		OffersKnown: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpunex_offers_known",
			Help: "Providers whose live, unwithdrawn offer this node holds.",
		}),
		OfferPublishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpunex_offer_publishes_total",
			Help: "Offer records this provider signed and announced.",
		}),
		OfferSyncRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpunex_offer_sync_records_total",
			Help: "Valid offer records received in catalogue syncs, new or already held.",
		}),
		OffersCaughtUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpunex_offers_caught_up_total",
			Help: "On a coordinator: providers' offers fetched after an uptime probe, new to it (gossip had not brought them in 1.5 republish intervals), and gossiped on.",
		}),
		SyncsServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_syncs_served_total",
			Help: "Catalogue syncs peers asked of this node, by kind (offers, revocations, scores) and outcome: served, busy (no slot free within the wait: the asker relies on its other peers), rate_limited.",
		}, []string{"kind", "outcome"}),
		SyncSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpunex_sync_answer_seconds",
			Help:    "Time a served sync took, by kind (offers, revocations, scores) and phase: wait (for a slot), write (the records, until the asker took the last).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 3, 5, 10},
		}, []string{"kind", "phase"}),
		Searches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpunex_search_duration_seconds",
			Help:    "Time to answer an offer search.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		APIRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_api_requests_total",
			Help: "Local API requests by route and status code.",
		}, []string{"route", "code"}),
		JobProposals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_job_proposals_total",
			Help: "Job proposals by outcome: accepted, countered, policy, rate_limited, image_digest, countersign_failed, or the rejection reason of the record (invalid, expired, wrong_signer, ...).",
		}, []string{"outcome"}),
		JobSessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_job_sessions_total",
			Help: "A renter's sessions with its running jobs by kind (tunnel, exec, input) and outcome: opened, not_renter, not_running, limit, rate_limited, other; tunnels also port (not declared) and closed (nothing listens).",
		}, []string{"kind", "outcome"}),
		JobsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpunex_jobs_started_total",
			Help: "Jobs whose container this provider started.",
		}),
		JobsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_jobs_ended_total",
			Help: "Jobs ended, by reason (exited, oom, timeout, cancelled by the renter, ...).",
		}, []string{"reason"}),
		JobInputBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_job_input_bytes_total",
			Help: "Bytes of renters' job inputs by outcome: received (chunks arrived and checked), held (in the renter's cache already: not sent), refused.",
		}, []string{"outcome"}),
		UptimeProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_uptime_probes_total",
			Help: "Uptime probes this coordinator sent to providers owing uptime, by outcome (answered, missed).",
		}, []string{"outcome"}),
		DHTAnnouncements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpunex_dht_announcements_total",
			Help: "A provider's DHT writes that succeeded, by what: offer (its offer record, at each publication), provider (itself under a region's or model's key, at start, when its routing table grew, and every 6 hours).",
		}, []string{"what"}),
	}
	// The common reasons are exported at 0 from the start, so that rates and alerts on them
	// work before the first such end.
	for _, r := range []string{"exited", "oom", "lease_expired", "cancelled by the renter", "provider shutting down", "lost"} {
		m.JobsEnded.WithLabelValues(r)
	}
	m.Registry.MustRegister(m.JobProposals, m.JobSessions, m.JobInputBytes, m.UptimeProbes, m.DHTAnnouncements, m.JobsStarted, m.JobsEnded,
		m.RecordsAccepted, m.RecordsRejected, m.OffersKnown, m.OfferPublishes, m.OfferSyncRecords, m.OffersCaughtUp, m.SyncsServed, m.SyncSeconds, m.Searches, m.APIRequests,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpunex_peers_connected", Help: "libp2p peers connected."}, peers),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpunex_gossip_peers_penalised", Help: "Peers whose gossipsub score is negative (they sent records the validators rejected)."}, penalised),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// CountFrom registers a counter read from f at each scrape (a count another part of the
// node keeps, such as the AutoNAT requests its peer refused).
func (m *Metrics) CountFrom(name, help string, f func() float64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}
