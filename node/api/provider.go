package api

import (
	"encoding/json"
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// Types of a provider's routes: benchmarks, its history, maintenance, availability and
// payout settings.

// Progress reports a run's steps.
type Progress func(step, steps int, what string)

// BenchView is the answer of GET /v1/bench.
type BenchView struct {
	Attestation *protocol.Attestation `json:"attestation"`
	// Receipt is the coordinator's measurement of the run's network: the figures that count.
	Receipt *protocol.NetworkReceipt `json:"network_receipt,omitempty"`
	// EnterpriseBelow says which Enterprise minimum the host falls under ("" when none).
	EnterpriseBelow string `json:"enterprise_below,omitempty"`
	Raw             []byte `json:"raw"`
}

// BenchPoint is one benchmark run as the provider's history keeps it (GET
// /v1/provider/history): each GPU's figures and verdict, and the host's.
type BenchPoint struct {
	GPUs         []protocol.GPUBenchmark `json:"gpus"`
	StorageWrite float64                 `json:"storage_write_mbps"`
	StorageRead  float64                 `json:"storage_read_mbps"`
	UpMbps       float64                 `json:"up_mbps"`   // as the coordinator measured it
	DownMbps     float64                 `json:"down_mbps"` // as the coordinator measured it
	HostBelow    string                  `json:"host_below,omitempty"`
}

// ScorePoint is one score record the provider was given, as its history keeps it.
type ScorePoint struct {
	Coordinator string   `json:"coordinator"`
	Seq         uint64   `json:"seq"`
	Score       int      `json:"score"`
	Uptime      float64  `json:"uptime"`
	Completion  float64  `json:"completion"`
	Consistency float64  `json:"benchmark_consistency"`
	Why         []string `json:"why,omitempty"`
}

// HistoryView is the answer of GET /v1/provider/history: what the provider's charts draw.
type HistoryView struct {
	From   time.Time     `json:"from"`
	Scores []HistoryItem `json:"scores"` // ScorePoint values
	Bench  []HistoryItem `json:"bench"`  // BenchPoint values
	// Week is the last 7 days hour by hour, in the provider's time zone: the hours its
	// availability declared (less its maintenance) against the uptime probes it answered.
	Week UptimeWeek `json:"week"`
}

// HistoryItem is one point of a history series.
type HistoryItem struct {
	At    time.Time       `json:"at"`
	Value json.RawMessage `json:"value"`
}

// UptimeWeek compares the declared schedule with the probes answered over 7 days.
type UptimeWeek struct {
	Timezone string       `json:"timezone"`
	Hours    []UptimeHour `json:"hours"` // oldest first, the current hour last
	// Since is when the provider answered its first probe on record (nil: none yet): the
	// hours before it are not counted.
	Since *time.Time `json:"since,omitempty"`
	// Declared is the number of past hours since then that the schedule declared; Answered
	// those of them in which the provider answered at least one of its coordinators' probes.
	Declared int `json:"declared_hours"`
	Answered int `json:"answered_hours"`
}

// UptimeHour is one hour of the week.
type UptimeHour struct {
	Start    time.Time `json:"start"`
	Declared bool      `json:"declared"` // inside the declared availability, outside maintenance
	Probes   int       `json:"probes"`   // probes answered
}

// Maintenance is a planned maintenance window (From, To) or recurring rule.
type Maintenance struct {
	ID   string    `json:"id"`
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	Rule string    `json:"rule,omitempty"` // e.g. "first sunday 02:00 2h Europe/Paris"
	Note string    `json:"note,omitempty"`
}

// MaintenanceView is the answer of GET /v1/provider/maintenance.
type MaintenanceView struct {
	Planned   []Maintenance                `json:"planned"`
	Announced []protocol.MaintenanceWindow `json:"announced"`
}

// Availability is the weekly schedule in which a provider offers its GPUs, as set by PUT
// /v1/provider/availability. Windows are "DAYS HH:MM-HH:MM" in Timezone; none means 24/7.
// Source names the calendar it was imported from; Follow (a duration such as "6h") has the
// node read a calendar URL again that often.
type Availability struct {
	Timezone string   `json:"timezone"`
	Windows  []string `json:"windows"`
	Source   string   `json:"source,omitempty"`
	Follow   string   `json:"follow,omitempty"`
}

// AvailabilityView is the answer of GET, PUT and DELETE /v1/provider/availability.
type AvailabilityView struct {
	Availability
	Text       string     `json:"text"`        // e.g. "mon-fri 08:00-20:00 (Europe/Paris)", or "24/7"
	FromConfig bool       `json:"from_config"` // [provider.availability] of the config is in force
	OpenNow    bool       `json:"open_now"`
	NextChange *time.Time `json:"next_change,omitempty"`
	SetAt      time.Time  `json:"set_at,omitzero"`
	Checked    time.Time  `json:"checked,omitzero"` // when a followed calendar was last read
	Error      string     `json:"error,omitempty"`  // why that read was not applied
}

// PayoutSettingsView is the answer of GET and PUT /v1/provider/payout: how the provider
// is paid and whether its coordinators have the settings.
type PayoutSettingsView struct {
	// Settings are nil when none are set: earnings then wait at the coordinator.
	Settings *protocol.PayoutSettings `json:"settings"`
	// FromConfig is true when they are [payout] of config.toml, false when they were chosen
	// from the dashboard (DELETE /v1/provider/payout goes back to config.toml).
	FromConfig bool             `json:"from_config"`
	Deliveries []PayoutDelivery `json:"deliveries"`
	// Pending is a change asked for from a dashboard session, waiting for [payout]
	// change_delay (cancel: DELETE /v1/provider/payout/pending; apply at once: gpunex
	// payout confirm on the node's terminal); nil when none waits.
	Pending *PendingPayoutView `json:"pending,omitempty"`
}

// PendingPayoutView is a payout settings change waiting to apply: new settings, or remove
// (back to config.toml's [payout]).
type PendingPayoutView struct {
	Settings    *protocol.PayoutSettings `json:"settings,omitempty"`
	Remove      bool                     `json:"remove,omitempty"`
	RequestedAt time.Time                `json:"requested_at"`
	ApplyAt     time.Time                `json:"apply_at"`
}

// PayoutRequest is the body of PUT /v1/provider/payout. Spaces in the IBAN and BIC are
// dropped and letters made capitals.
type PayoutRequest struct {
	Method        string `json:"method"`   // usdc or bank
	Schedule      string `json:"schedule"` // weekly or monthly
	SolanaAddress string `json:"solana_address,omitempty"`
	AccountName   string `json:"account_name,omitempty"`
	IBAN          string `json:"iban,omitempty"`
	BIC           string `json:"bic,omitempty"`
}

// PayoutDelivery is where the latest signed settings stand with one trusted coordinator.
type PayoutDelivery struct {
	Coordinator string     `json:"coordinator"`
	Seq         uint64     `json:"seq,omitempty"` // of the settings being delivered
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	Error       string     `json:"error,omitempty"` // why the last try failed
}
