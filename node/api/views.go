package api

import (
	"time"

	"github.com/gpunex/gpunex/protocol"
)

// The local API as its clients see it: the node and its peers, offers and their search,
// model catalogues. The other routes' types are in onboarding.go, jobs.go, provider.go,
// money.go and dashboard.go.

// Version is the gpunex software version, of the node and of the CLI alike; set at build
// time with -ldflags "-X github.com/gpunex/gpunex/node/api.Version=...".
var Version = "0.1.0-dev"

// Status is the answer of GET /v1/status.
type Status struct {
	PeerID      string    `json:"peer_id"`
	Role        string    `json:"role"`
	Version     string    `json:"version"`
	Addrs       []string  `json:"addrs"`
	Peers       int       `json:"peers"`
	OffersKnown int       `json:"offers_known"`
	StartedAt   time.Time `json:"started_at"`
	// Sandbox is how a provider runs jobs (absent on other roles).
	Sandbox *SandboxStatus `json:"sandbox,omitempty"`
	// Reachability is what AutoNAT says of the node: "public" (peers dial it), "private"
	// (behind NAT: peers reach it through its relays, then hole-punch where they can) or
	// "unknown" (not checked yet); a coordinator is public by its role. Relayed says its
	// addresses include relay addresses (…/p2p-circuit), which its offers carry.
	Reachability string `json:"reachability"`
	Relayed      bool   `json:"relayed"`
}

// SandboxStatus says how a provider's jobs run, and what is off and why
// (docs/sandbox.md).
type SandboxStatus struct {
	// Error says why no job can run (containerd unreachable); empty when jobs run.
	Error string `json:"error,omitempty"`
	// Egress is the policy in force for jobs with egress (deny, public-only, allow), and
	// EgressOff why it is deny when the configuration asked for more.
	Egress     string `json:"egress"`
	EgressMbps int64  `json:"egress_mbps,omitempty"`
	EgressOff  string `json:"egress_off,omitempty"`
	// UserNamespaces says whether jobs run in user namespaces of their own, and
	// UserNamespacesOff why not.
	UserNamespaces    bool   `json:"user_namespaces"`
	UserNamespacesOff string `json:"user_namespaces_off,omitempty"`
}

// GossipView is a peer's gossipsub score as this node keeps it (GET /v1/gossip/{peer}):
// below -1000 everything it sends is ignored (docs/protocols/offers.md, "Peer scoring").
type GossipView struct {
	Peer  string  `json:"peer"`
	Score float64 `json:"score"`
	Known bool    `json:"known"`
}

// PeerView is the answer of GET /v1/peers/{id}: how this node is connected to a peer.
// Path is "direct", "relayed" (only through a relay: a hole punch has not succeeded) or ""
// (not connected); Conns lists the remote address of each connection.
type PeerView struct {
	ID    string   `json:"id"`
	Path  string   `json:"path"`
	Conns []string `json:"conns"`
}

// ClockView is the answer of GET /v1/clock: this node's clock against its coordinator's.
// OffsetMillis is positive when this node's clock is ahead.
type ClockView struct {
	Coordinator     string    `json:"coordinator"`
	OffsetMillis    int64     `json:"offset_ms"`
	RoundTripMillis int64     `json:"round_trip_ms"`
	MeasuredAt      time.Time `json:"measured_at"`
}

// OfferRecordView is the answer of GET /v1/offers/record.
type OfferRecordView struct {
	Provider string          `json:"provider"`
	Offer    *protocol.Offer `json:"offer"`
	Raw      []byte          `json:"raw"` // the signed envelope as received (base64 in JSON)
}

// SetPriceRequest is the body of POST /v1/provider/price.
type SetPriceRequest struct {
	Model string `json:"model"`
	USDC  string `json:"usdc"`
}

// SearchFilter selects offers. Zero fields match everything.
type SearchFilter struct {
	Model    string
	Region   string
	MaxPrice protocol.MicroUSDC // per GPU-hour
	MinGPUs  int
	// Egress keeps only offers whose jobs may reach the network.
	Egress bool
	// Tier keeps only offers certified at this tier (community, enterprise).
	Tier string
	// Coordinator keeps only offers certified by this coordinator (a peer ID).
	Coordinator string
	// Sort orders the rows: "" (merit, see RankTerms), "placement" (price less the tier
	// and commitment bonus), "price", "score" (reliability, highest first) or "perf"
	// (performance score per USDC, highest first). Rows without the figure sort last.
	Sort string
	// Unbenchmarked keeps the offers that no fresh benchmark attestation vouches for (none,
	// one past its validity, or fewer GPUs certified than offered): left out otherwise,
	// they come with the reason in OfferRow.Unbenchmarked.
	Unbenchmarked bool
}

// OfferRow is one GPU model of one provider's live offer, as search shows it.
type OfferRow struct {
	ID             string             `json:"id"`
	Provider       string             `json:"provider"`
	Model          string             `json:"model"`
	GPUs           int                `json:"gpus"`
	VRAMGB         int                `json:"vram_gb"`
	PriceUSDC      string             `json:"price_usdc_per_gpu_hour"`
	PriceMicroUSDC protocol.MicroUSDC `json:"price_micro_usdc_per_gpu_hour"`
	Region         string             `json:"region"`
	Availability   string             `json:"availability"`
	Simulated      bool               `json:"simulated"`
	// Egress is what the provider's jobs with egress reach ("public-only", "allow"; ""
	// for none), EgressMbps its per-job cap (0: none).
	Egress     string    `json:"egress"`
	EgressMbps int64     `json:"egress_mbps,omitempty"`
	Seq        uint64    `json:"seq"`
	IssuedAt   time.Time `json:"issued_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Tier and CommitmentEnd come from the provider's certificate, Coordinator is its
	// signer: the coordinator that holds a renter's money for a job on this offer and
	// scores the provider.
	Coordinator   string    `json:"coordinator"`
	Tier          string    `json:"tier"`
	CommitmentEnd time.Time `json:"commitment_end"`
	// PlacementMicroUSDC is the price search ranks by: the price less the placement
	// bonus of the tier and the commitment (see PlacementBonusBP).
	PlacementMicroUSDC protocol.MicroUSDC `json:"placement_micro_usdc"`
	// Measured figures of the model's GPUs (mean over them) from the offer's benchmark
	// attestation; absent when the provider has none.
	Bench *RowBench `json:"bench,omitempty"`
	// Unbenchmarked says why no fresh benchmark attestation vouches for this row (shown
	// only to a search that asks for such rows, SearchFilter.Unbenchmarked); empty when one
	// does.
	Unbenchmarked string `json:"unbenchmarked,omitempty"`
	// Score is the provider's reliability score (0-100) from a trusted coordinator's
	// latest score record; absent when none is held.
	Score *int `json:"score,omitempty"`
	// Rank holds the terms of the default order (see Rank).
	Rank RankTerms `json:"rank"`
}

// RankTerms are the terms of a row's merit, the default search order (highest first):
//
//	merit = (score/100)^2 x perf x (1 + bonus) / price_vs_market
//
// score is the reliability score (90, a new provider's, when none is held); perf is the
// measured performance score over 100 (0.8 when unmeasured); bonus is the tier and
// commitment placement bonus (PlacementBonusBP / 10000); price_vs_market is the row's price
// over the median price of the same model in the same region among the rows found (1 when
// it is the only one).
type RankTerms struct {
	Score         int     `json:"score"`
	Perf          float64 `json:"perf"`
	Bonus         float64 `json:"bonus"`
	PriceVsMarket float64 `json:"price_vs_market"`
	Merit         float64 `json:"merit"`
}

// RowBench is the measured performance of one model's GPUs in an offer.
type RowBench struct {
	FP32TFLOPS   float64   `json:"fp32_tflops"`
	FP16TFLOPS   float64   `json:"fp16_tflops"`
	TensorTFLOPS float64   `json:"tensor_tflops"`
	MemBandwidth float64   `json:"mem_bandwidth_gbps"`
	PerfScore    int       `json:"perf_score"`
	MeasuredAt   time.Time `json:"measured_at"`
	// GPUs are the per-GPU figures.
	GPUs []protocol.GPUBenchmark `json:"gpus"`
}

// ModelsView is a model catalogue as a node uses it (GET /v1/models): the catalogue of
// the coordinator a provider benchmarks against (a coordinator's own), seq 0 being the
// compiled-in first one.
type ModelsView struct {
	Coordinator string                `json:"coordinator,omitempty"`
	Seq         uint64                `json:"seq"`
	IssuedAt    time.Time             `json:"issued_at,omitzero"`
	Models      []protocol.ModelEntry `json:"models"`
}

// ModelEdit is a coordinator's change to its catalogue (POST /v1/coordinator/models): op
// "add" a model not in it, "set" (replace) the entry of one in it, or "remove" one.
type ModelEdit struct {
	Op    string              `json:"op"`
	Entry protocol.ModelEntry `json:"entry"`
}
