package protocol

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Benchmark attestations: a provider's signed benchmark results, bound to its GPUs' UUIDs
// and driver, and to a coordinator's challenge so that an old result cannot be passed off
// as new. See docs/protocols/benchmarks.md.

const (
	// AttestationVersion is the payload version of attestations and challenges.
	AttestationVersion = 1
	// MaxAttestationSize caps an attestation envelope (it travels inside offers).
	MaxAttestationSize = 64 << 10
	// MaxChallengeSize caps a challenge envelope.
	MaxChallengeSize = 1 << 10
	// MaxAttestationAge is how old an attestation's challenge may be: a provider re-runs
	// its benchmarks at least this often to stay listed with figures.
	MaxAttestationAge = 8 * 24 * time.Hour
	// ChallengeTTL is how long after its challenge the benchmarks must be signed.
	ChallengeTTL = time.Hour
)

// Challenge is a coordinator's signed nonce for one provider's benchmark run.
type Challenge struct {
	Version     int       `json:"version"`
	Coordinator string    `json:"coordinator"`
	Provider    string    `json:"provider"`
	Nonce       string    `json:"nonce"` // 32 hex digits
	IssuedAt    time.Time `json:"issued_at"`
	// ModelsSeq is the sequence of the coordinator's model catalogue that scores the run
	// (0: the compiled-in first catalogue).
	ModelsSeq uint64 `json:"models_seq,omitempty"`
}

// LostPrefix starts the delisting reason of a GPU that fell off the bus: it has no figures.
const LostPrefix = "GPU lost: "

// GPUBenchmark is one GPU's measured figures. A figure of 0 was not measured.
type GPUBenchmark struct {
	UUID          string  `json:"uuid"`
	Model         string  `json:"model"`
	Simulated     bool    `json:"simulated,omitempty"`
	FP32TFLOPS    float64 `json:"fp32_tflops"`
	FP16TFLOPS    float64 `json:"fp16_tflops"`
	TensorTFLOPS  float64 `json:"tensor_tflops"` // FP16 inputs, FP32 accumulation, dense
	MemBandwidth  float64 `json:"mem_bandwidth_gbps"`
	PerfScore     int     `json:"perf_score"` // 0-100, ModelCatalogue.Score
	Below         string  `json:"below,omitempty"`
	DurationMilli int64   `json:"duration_ms"`
}

// StorageBenchmark is the data directory's measured figures.
type StorageBenchmark struct {
	SeqWriteMBps  float64 `json:"seq_write_mbps"` // with fsync
	SeqReadMBps   float64 `json:"seq_read_mbps"`
	RandReadIOPS  float64 `json:"rand_read_iops"` // 4 KiB
	BytesMeasured int64   `json:"bytes_measured"`
}

// NetworkBenchmark is the link between the provider and the coordinator.
type NetworkBenchmark struct {
	Peer     string  `json:"peer"`
	RTTMilli float64 `json:"rtt_ms"`
	UpMbps   float64 `json:"up_mbps"`
	DownMbps float64 `json:"down_mbps"`
}

// Attestation is the payload of a benchmark attestation.
type Attestation struct {
	Version       int              `json:"version"`
	Provider      string           `json:"provider"`
	Seq           uint64           `json:"seq"`
	IssuedAt      time.Time        `json:"issued_at"`
	Challenge     []byte           `json:"challenge"` // the coordinator's signed Challenge
	DriverVersion string           `json:"driver_version"`
	CUDAVersion   string           `json:"cuda_version"`
	GPUs          []GPUBenchmark   `json:"gpus"`
	Storage       StorageBenchmark `json:"storage"`
	Network       NetworkBenchmark `json:"network"` // as the provider measured it
	// NetworkReceipt is the coordinator's signed measurement of the same run (hostmin.go):
	// the network figures that count.
	NetworkReceipt []byte `json:"network_receipt"`
	// HostBelow is HostShortfall of the receipt and storage under the receipt's listing
	// minimum: when set, every GPU is delisted.
	HostBelow string `json:"host_below,omitempty"`
}

// SignedAttestation is an attestation that passed the checks.
type SignedAttestation struct {
	Attestation
	Signer    peer.ID
	Challenge *Challenge
	Receipt   *NetworkReceipt
	Raw       []byte
}

// CheckChallenge opens a coordinator's challenge: signed by a trusted coordinator, for the
// provider named, with a nonce.
func CheckChallenge(raw []byte, trust Trust, provider peer.ID) (*Challenge, peer.ID, error) {
	env, err := openKind(raw, KindChallenge)
	if err != nil {
		return nil, "", err
	}
	var c Challenge
	if err := decodePayload(env, AttestationVersion, &c, func() int { return c.Version }); err != nil {
		return nil, "", err
	}
	if c.Coordinator != env.signerText {
		return nil, "", fmt.Errorf("%w: challenge names coordinator %s but is signed by %s", ErrWrongSigner, c.Coordinator, env.Signer)
	}
	if c.Provider != provider.String() {
		return nil, "", fmt.Errorf("%w: challenge for %s, not %s", ErrInvalid, c.Provider, provider)
	}
	if len(c.Nonce) != 32 || c.IssuedAt.IsZero() {
		return nil, "", invalid(KindChallenge, "nonce of 32 hex digits and issued_at are required")
	}
	if err := trust.check(KindChallenge, env.Signer); err != nil {
		return nil, "", err
	}
	return &c, env.Signer, nil
}

// CheckAttestation opens an attestation and applies every rule at time now: signed by the
// provider it names, carrying a trusted coordinator's challenge for that provider, signed
// within ChallengeTTL of the challenge, no older than MaxAttestationAge, and with sane
// figures, and scores and delisting reasons that follow from them under the model
// catalogue the challenge names, which models must hold (else ErrUnknownModels).
func CheckAttestation(raw []byte, now time.Time, trust Trust, models ModelsLookup) (*SignedAttestation, error) {
	if models == nil {
		models = FirstModelsOnly
	}
	return checkAttestation(raw, now, trust, models)
}

// checkAttestation is CheckAttestation; a nil models skips the scores and delisting reasons
// (Verify, without the catalogue).
func checkAttestation(raw []byte, now time.Time, trust Trust, models ModelsLookup) (*SignedAttestation, error) {
	env, err := openKind(raw, KindAttestation)
	if err != nil {
		return nil, err
	}
	var a Attestation
	if err := decodePayload(env, AttestationVersion, &a, func() int { return a.Version }); err != nil {
		return nil, err
	}
	if a.Provider != env.signerText {
		return nil, fmt.Errorf("%w: attestation names provider %s but is signed by %s", ErrWrongSigner, a.Provider, env.Signer)
	}
	c, coord, err := CheckChallenge(a.Challenge, trust, env.Signer)
	if err != nil {
		return nil, fmt.Errorf("attestation's challenge: %w", err)
	}
	var cat *ModelCatalogue
	if models != nil {
		if cat = models(coord, c.ModelsSeq); cat == nil {
			return nil, fmt.Errorf("%w: attestation scored with model catalogue %d of %s", ErrUnknownModels, c.ModelsSeq, coord)
		}
	}
	receipt, err := CheckNetworkReceipt(a.NetworkReceipt, c, env.signerText)
	if err != nil {
		return nil, fmt.Errorf("attestation's network receipt: %w", err)
	}
	bad := func(format string, args ...any) error { return invalid(KindAttestation, format, args...) }
	switch {
	case a.Seq == 0 || a.IssuedAt.IsZero():
		return nil, bad("seq and issued_at are required")
	case a.IssuedAt.Before(c.IssuedAt) || a.IssuedAt.Sub(c.IssuedAt) > ChallengeTTL:
		return nil, fmt.Errorf("%w: attestation signed %s after its challenge (at most %s)", ErrReplay, a.IssuedAt.Sub(c.IssuedAt), ChallengeTTL)
	case len(a.GPUs) > MaxOfferItems*8:
		return nil, bad("%d GPUs", len(a.GPUs))
	}
	for _, f := range []float64{a.Storage.SeqWriteMBps, a.Storage.SeqReadMBps, a.Storage.RandReadIOPS, a.Network.RTTMilli, a.Network.UpMbps, a.Network.DownMbps} {
		if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, bad("negative or non-finite figure")
		}
	}
	for _, g := range a.GPUs {
		if err := checkText("model", g.Model, true); err != nil || g.UUID == "" || len(g.UUID) > 64 {
			return nil, bad("GPU %q %q", g.UUID, g.Model)
		}
		for _, f := range []float64{g.FP32TFLOPS, g.FP16TFLOPS, g.TensorTFLOPS, g.MemBandwidth} {
			if f < 0 || f > 1e5 || math.IsNaN(f) {
				return nil, bad("GPU %s: figure out of range", g.UUID)
			}
		}
		if cat == nil {
			continue
		}
		if want := cat.Score(g); g.PerfScore != want {
			return nil, bad("GPU %s: perf_score %d does not follow from its figures (%d)", g.UUID, g.PerfScore, want)
		}
		// The delisting reason follows from the figures, so that a provider cannot keep a
		// GPU under its threshold listed; a lost GPU (no figures) says it is lost.
		lost := strings.HasPrefix(g.Below, LostPrefix) && g.FP32TFLOPS == 0 && g.FP16TFLOPS == 0 && g.TensorTFLOPS == 0 && g.MemBandwidth == 0
		if want := cat.Shortfall(g); !lost && g.Below != want {
			return nil, bad("GPU %s: below %q does not follow from its figures (%q)", g.UUID, g.Below, want)
		}
	}
	// As for a GPU's, the host's delisting reason follows from the figures.
	if want := HostShortfall(receipt, a.Storage, receipt.Minimum); a.HostBelow != want {
		return nil, bad("host_below %q does not follow from the figures (%q)", a.HostBelow, want)
	}
	if err := checkIssued(KindAttestation, a.IssuedAt, c.IssuedAt.Add(MaxAttestationAge), now); err != nil {
		return nil, err
	}
	return &SignedAttestation{Attestation: a, Signer: env.Signer, Challenge: c, Receipt: receipt, Raw: raw}, nil
}

// Datasheet holds a model's reference figures (../shared/GPU_DATASHEETS.md; sources in
// docs/benchmarks.md).
type Datasheet struct {
	Model        string
	FP32TFLOPS   float64
	FP16TFLOPS   float64 // non-tensor
	TensorTFLOPS float64 // FP16 tensor, dense
	MemBandwidth float64 // GB/s
}

// Thresholds below which a GPU is delisted, as fractions of its datasheet: tensor FLOPS
// 50%, memory bandwidth 60%, FP32 50% (a well-tuned run reaches 70-90%; the margin keeps a
// healthy GPU listed through run-to-run noise and hand-written kernels).
const (
	ThresholdTensor    = 0.50
	ThresholdBandwidth = 0.60
	ThresholdFP32      = 0.50
)

// BenchNetProtocol is served by coordinators: it hands out benchmark challenges and
// measures the network between a provider and the coordinator. Version 2: requests are in
// lock step with the answers (each ping and transfer echoes the token of the answer before
// it), and a transfer that takes the coordinator's turn moves at least MinBenchTransfer.
const BenchNetProtocol = "/gpunex/bench-net/2.0.0"

// BenchNetProtocolV1 is the first bench-net protocol, whose pings could be pipelined and
// whose upload could start before the download ended: a coordinator answers it only to
// tell an old provider to upgrade (docs/protocols/benchmarks.md, section 4).
const BenchNetProtocolV1 = "/gpunex/bench-net/1.0.0"

// MaxBenchTransfer caps one network benchmark transfer.
const MaxBenchTransfer = 64 << 20

// MinBenchTransfer is the least a transfer that takes the coordinator's turn moves: a
// smaller one measures TCP's slow start and the buffers on the way more than the link.
// (Validators still count receipts from MinReceiptBytes: receipts signed before version 2
// stay valid.)
const MinBenchTransfer = 4 << 20

// BenchNetMsg is one JSON frame of the bench-net stream (and the answer on the
// bench-challenge stream): op is challenge, ping, down, up or receipt (attestation in an
// answer).
type BenchNetMsg struct {
	Op     string `json:"op"`
	Size   int64  `json:"size,omitempty"`
	Record []byte `json:"record,omitempty"`
	// Models is, in the answer to a challenge, the coordinator's model catalogue the
	// challenge names (absent for the first, compiled-in catalogue).
	Models []byte `json:"models,omitempty"`
	// Token is, in an answer, a fresh random text; the next ping, down or up echoes it, so
	// that no request is sent before the answer it follows has arrived.
	Token string `json:"token,omitempty"`
	// Certificate and Application are, in a challenge request, the provider's standing
	// with the coordinator: its certificate, and the ID of its application. Only a run that
	// shows a valid certificate or an open application gets the transfer turn.
	Certificate []byte `json:"certificate,omitempty"`
	Application string `json:"application,omitempty"`
	Error       string `json:"error,omitempty"`
	// Reason names a refusal for programs: not_provider (no standing shown), busy (the turn
	// did not come in time).
	Reason string `json:"reason,omitempty"`
}

// Size limits of the bench-net frames: a request, and an answer carrying a challenge.
const (
	MaxBenchNetRequest = 4096
	MaxBenchNetAnswer  = MaxChallengeSize*2 + MaxModelCatalogueSize*2
	// MaxBenchChallengeAnswer bounds the answer on the bench-challenge stream.
	MaxBenchChallengeAnswer = MaxAttestationSize * 2
)

// BenchChallengeProtocol carries a coordinator's request that a provider run its
// benchmarks now.
const BenchChallengeProtocol = "/gpunex/bench-challenge/1.0.0"
