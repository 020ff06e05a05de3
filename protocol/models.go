package protocol

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The model catalogue: a coordinator's signed list of the GPU models it knows, with the
// names NVML gives them, their memory, their datasheet figures and whether they are on the
// supported list. Providers name their GPUs with it, benchmarks are scored and held to
// thresholds by it, and validators recompute both with the catalogue the attestation's
// challenge names. The compiled-in table (FirstModels) is only the first catalogue, seq 0.
// See docs/protocols/models.md.

const (
	// KindModelCatalogue is the record kind of a model catalogue.
	KindModelCatalogue Kind = "model-catalogue"
	// ModelsVersion is the payload version of model catalogues.
	ModelsVersion = 1
	// ModelsTopic is the gossipsub topic of model catalogues.
	ModelsTopic = "/gpunex/models/1"
	// MaxModelCatalogueSize caps a model catalogue envelope.
	MaxModelCatalogueSize = 64 << 10
	// MaxCatalogueModels caps the entries of one catalogue.
	MaxCatalogueModels = 256
	// MaxModelAliases caps the NVML names of one entry.
	MaxModelAliases = 8
	// MaxModelVRAMGB bounds an entry's memory.
	MaxModelVRAMGB = 4096
)

// ModelEntry is one GPU model of a catalogue.
type ModelEntry struct {
	// Model is the marketplace's name: upper case, ending in the memory size
	// ("H100-NVL-94GB").
	Model string `json:"model"`
	// Aliases are names as NVML reports them ("NVIDIA H100 NVL"). A GPU is this model when
	// every word of an alias is in its name (dashes and underscores count as spaces, case
	// is ignored); among the entries that match, the alias with the most words wins, then
	// the VRAM closest to the GPU's memory.
	Aliases []string `json:"aliases,omitempty"`
	VRAMGB  int      `json:"vram_gb"`
	// The datasheet's figures (see Datasheet). TensorTFLOPS, MemBandwidth and FP32TFLOPS
	// are required; FP16TFLOPS may be 0 where the datasheet does not give it.
	FP32TFLOPS   float64 `json:"fp32_tflops"`
	FP16TFLOPS   float64 `json:"fp16_tflops"`
	TensorTFLOPS float64 `json:"tensor_tflops"`
	MemBandwidth float64 `json:"mem_bandwidth_gbps"`
	// Supported models are certified without a case-by-case review.
	Supported bool   `json:"supported"`
	Note      string `json:"note,omitempty"`
}

// ModelCatalogue is the payload of a model catalogue record.
type ModelCatalogue struct {
	Version     int          `json:"version"`
	Coordinator string       `json:"coordinator"`
	Seq         uint64       `json:"seq"` // strictly increasing per coordinator; 0 is FirstModels
	IssuedAt    time.Time    `json:"issued_at"`
	Models      []ModelEntry `json:"models"`
}

// SignedModelCatalogue is a model catalogue that passed the checks.
type SignedModelCatalogue struct {
	ModelCatalogue
	Signer peer.ID
	Raw    []byte
}

// firstModels is the compiled-in catalogue. Datasheet figures from
// ../shared/GPU_DATASHEETS.md (sources in docs/benchmarks.md): where variants differ and
// share a name (H100 SXM/PCIe, A100 SXM/PCIe) the lower, PCIe figures, so that thresholds
// never delist the slower variant for being what it is.
var firstModels = ModelCatalogue{Version: ModelsVersion, Models: []ModelEntry{
	{Model: "H100-80GB", Aliases: []string{"H100"}, VRAMGB: 80, FP32TFLOPS: 51.2, FP16TFLOPS: 102.4, TensorTFLOPS: 756.5, MemBandwidth: 2000, Supported: true, Note: "H100 PCIe figures: the lower variant"},
	// The NVL's FP32 and FP16 follow from its 132 SMs at 1785 MHz; its bandwidth is a
	// third-party figure.
	{Model: "H100-NVL-94GB", Aliases: []string{"H100 NVL"}, VRAMGB: 94, FP32TFLOPS: 60.3, FP16TFLOPS: 120.6, TensorTFLOPS: 835.5, MemBandwidth: 3900},
	{Model: "H200-141GB", Aliases: []string{"H200"}, VRAMGB: 141, FP32TFLOPS: 66.9, FP16TFLOPS: 133.8, TensorTFLOPS: 989.5, MemBandwidth: 4800},
	{Model: "A100-80GB", Aliases: []string{"A100"}, VRAMGB: 80, FP32TFLOPS: 19.5, FP16TFLOPS: 78, TensorTFLOPS: 312, MemBandwidth: 1935, Supported: true, Note: "A100 PCIe 80GB figures"},
	{Model: "A100-40GB", Aliases: []string{"A100"}, VRAMGB: 40, FP32TFLOPS: 19.5, FP16TFLOPS: 78, TensorTFLOPS: 312, MemBandwidth: 1555, Supported: true},
	{Model: "L40S-48GB", Aliases: []string{"L40S"}, VRAMGB: 48, FP32TFLOPS: 91.6, FP16TFLOPS: 91.6, TensorTFLOPS: 362, MemBandwidth: 864, Supported: true},
	{Model: "L4-24GB", Aliases: []string{"L4"}, VRAMGB: 24, FP32TFLOPS: 30.3, FP16TFLOPS: 30.3, TensorTFLOPS: 121, MemBandwidth: 300, Supported: true, Note: "FP16 non-tensor unconfirmed: taken as FP32"},
	{Model: "RTX4090-24GB", Aliases: []string{"RTX 4090"}, VRAMGB: 24, FP32TFLOPS: 82.6, FP16TFLOPS: 82.6, TensorTFLOPS: 165.2, MemBandwidth: 1008, Supported: true, Note: "tensor: FP16 with FP32 accumulation"},
	{Model: "RTXA6000-48GB", Aliases: []string{"RTX A6000"}, VRAMGB: 48, FP32TFLOPS: 38.7, FP16TFLOPS: 38.7, TensorTFLOPS: 154.8, MemBandwidth: 768, Supported: true},
}}

// FirstModels returns the compiled-in catalogue (seq 0), which every node has before any
// coordinator's catalogue reaches it. The caller must not change it.
func FirstModels() *ModelCatalogue { return &firstModels }

// Entry returns a model's entry.
func (c *ModelCatalogue) Entry(model string) (ModelEntry, bool) {
	m := NormalizeModel(model)
	for _, e := range c.Models {
		if e.Model == m {
			return e, true
		}
	}
	return ModelEntry{}, false
}

// Datasheet returns a model's reference figures.
func (c *ModelCatalogue) Datasheet(model string) (Datasheet, bool) {
	e, ok := c.Entry(model)
	if !ok {
		return Datasheet{}, false
	}
	return Datasheet{Model: e.Model, FP32TFLOPS: e.FP32TFLOPS, FP16TFLOPS: e.FP16TFLOPS, TensorTFLOPS: e.TensorTFLOPS, MemBandwidth: e.MemBandwidth}, true
}

// Supported reports whether a model is on the supported list (others are reviewed case by
// case).
func (c *ModelCatalogue) Supported(model string) bool {
	e, ok := c.Entry(model)
	return ok && e.Supported
}

// SupportedNames lists the supported models.
func (c *ModelCatalogue) SupportedNames() []string {
	var out []string
	for _, e := range c.Models {
		if e.Supported {
			out = append(out, e.Model)
		}
	}
	return out
}

// VRAMGB is a model's memory: its entry's, else the size its name ends with ("-24GB"),
// else 0.
func (c *ModelCatalogue) VRAMGB(model string) int {
	if e, ok := c.Entry(model); ok {
		return e.VRAMGB
	}
	return modelVRAMGB(model)
}

// nameWords splits a GPU name into upper-case words; dashes and underscores separate.
func nameWords(name string) []string {
	return strings.Fields(strings.ToUpper(strings.NewReplacer("-", " ", "_", " ").Replace(name)))
}

// ModelFor names the marketplace model of a GPU from the name NVML reports and its memory
// (see ModelEntry.Aliases). A GPU no entry matches gets its name, cleaned, with its memory
// size ("NVIDIA GeForce RTX 3090" with 24 GiB: "RTX3090-24GB").
func (c *ModelCatalogue) ModelFor(name string, memoryBytes uint64) string {
	gb := int(math.Round(float64(memoryBytes) / (1 << 30)))
	words := nameWords(name)
	has := map[string]bool{}
	for _, w := range words {
		has[w] = true
	}
	best, bestWords, bestGap := "", 0, 0
	for _, e := range c.Models {
		for _, alias := range e.Aliases {
			aw := nameWords(alias)
			all := len(aw) > 0
			for _, w := range aw {
				all = all && has[w]
			}
			if !all {
				continue
			}
			gap := e.VRAMGB - gb
			if gap < 0 {
				gap = -gap
			}
			if len(aw) > bestWords || len(aw) == bestWords && gap < bestGap {
				best, bestWords, bestGap = e.Model, len(aw), gap
			}
		}
	}
	if best != "" {
		return best
	}
	var b strings.Builder
	for _, w := range words {
		if w == "NVIDIA" || w == "GEFORCE" {
			continue
		}
		b.WriteString(w)
	}
	return NormalizeModel(fmt.Sprintf("%s-%dGB", b.String(), NominalGB(gb)))
}

// NominalGB rounds a measured memory size to the size a GPU is sold with (an "80 GB" GPU
// reports 79.6 GiB).
func NominalGB(gb int) int {
	for _, n := range []int{8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 141, 192} {
		if gb <= n && n-gb <= n/10+1 {
			return n
		}
	}
	return gb
}

// Score is a GPU's performance score, 0-100: the mean of its measured figures as fractions
// of the datasheet (each capped at 1), weighted tensor 0.4, memory bandwidth 0.3, FP32
// 0.15, FP16 0.15, over the figures measured, x 100, rounded down. 0 for a model the
// catalogue does not hold or with no figure measured.
func (c *ModelCatalogue) Score(g GPUBenchmark) int {
	d, ok := c.Datasheet(g.Model)
	if !ok {
		return 0
	}
	parts := []struct{ got, ref, w float64 }{
		{g.TensorTFLOPS, d.TensorTFLOPS, 0.4}, {g.MemBandwidth, d.MemBandwidth, 0.3},
		{g.FP32TFLOPS, d.FP32TFLOPS, 0.15}, {g.FP16TFLOPS, d.FP16TFLOPS, 0.15},
	}
	var sum, weight float64
	for _, p := range parts {
		if p.got <= 0 || p.ref <= 0 {
			continue
		}
		sum += p.w * math.Min(p.got/p.ref, 1)
		weight += p.w
	}
	if weight == 0 {
		return 0
	}
	return int(math.Floor(sum/weight*100 + 1e-9)) // the epsilon keeps 0.6 x 100 at 60
}

// NotInCatalogue starts the delisting reason of a GPU whose model the catalogue does not
// hold: there are no reference figures to hold it to.
const NotInCatalogue = "not in the model catalogue: "

// Shortfall says why a GPU's figures keep it out of offers, or "" when nothing does: the
// threshold it falls under (metric, measured value, threshold, and what to check), or that
// its model is not in the catalogue.
func (c *ModelCatalogue) Shortfall(g GPUBenchmark) string {
	d, ok := c.Datasheet(g.Model)
	if !ok {
		return fmt.Sprintf("%smodel %s has no reference figures in catalogue %d of %s; the coordinator adds it with `gpunex coordinator models add`",
			NotInCatalogue, NormalizeModel(g.Model), c.Seq, c.coordinatorName())
	}
	checks := []struct {
		name       string
		got, ref   float64
		frac       float64
		unit, hint string
	}{
		{"tensor_tflops", g.TensorTFLOPS, d.TensorTFLOPS, ThresholdTensor, "TFLOPS", "check cooling and thermal throttling (gpunex gpus), power limits, and the driver"},
		{"mem_bandwidth_gbps", g.MemBandwidth, d.MemBandwidth, ThresholdBandwidth, "GB/s", "check memory clocks, ECC errors and throttling (gpunex gpus)"},
		{"fp32_tflops", g.FP32TFLOPS, d.FP32TFLOPS, ThresholdFP32, "TFLOPS", "check clocks, cooling, power limits and PCIe link width"},
	}
	for _, ch := range checks {
		if ch.got > 0 && ch.got < ch.frac*ch.ref {
			return fmt.Sprintf("%s %.1f %s is under the threshold of %.1f %s (%.0f%% of the %s datasheet's %.1f): %s",
				ch.name, ch.got, ch.unit, ch.frac*ch.ref, ch.unit, ch.frac*100, d.Model, ch.ref, ch.hint)
		}
	}
	return ""
}

func (c *ModelCatalogue) coordinatorName() string {
	if c.Coordinator == "" {
		return "the compiled-in table"
	}
	return "coordinator " + c.Coordinator
}

// CheckModelEntries checks a catalogue's entries: at most MaxCatalogueModels, each model
// named once, with its memory, sane figures and at most MaxModelAliases aliases of at most
// 64 characters.
func CheckModelEntries(models []ModelEntry) error {
	if len(models) == 0 || len(models) > MaxCatalogueModels {
		return fmt.Errorf("a catalogue holds 1-%d models, not %d", MaxCatalogueModels, len(models))
	}
	seen := map[string]bool{}
	for _, e := range models {
		if err := checkText("model", e.Model, false); err != nil {
			return err
		}
		if e.Model != NormalizeModel(e.Model) {
			return fmt.Errorf("model %q must be upper case", e.Model)
		}
		if seen[e.Model] {
			return fmt.Errorf("model %s appears twice", e.Model)
		}
		seen[e.Model] = true
		if e.VRAMGB <= 0 || e.VRAMGB > MaxModelVRAMGB {
			return fmt.Errorf("model %s: vram_gb %d out of 1-%d", e.Model, e.VRAMGB, MaxModelVRAMGB)
		}
		for _, f := range []float64{e.FP32TFLOPS, e.FP16TFLOPS, e.TensorTFLOPS, e.MemBandwidth} {
			if f < 0 || f > 1e5 || math.IsNaN(f) {
				return fmt.Errorf("model %s: a datasheet figure is out of 0-100000", e.Model)
			}
		}
		if e.FP32TFLOPS == 0 || e.TensorTFLOPS == 0 || e.MemBandwidth == 0 {
			return fmt.Errorf("model %s: fp32_tflops, tensor_tflops and mem_bandwidth_gbps are required", e.Model)
		}
		if len(e.Aliases) > MaxModelAliases {
			return fmt.Errorf("model %s: %d aliases, at most %d", e.Model, len(e.Aliases), MaxModelAliases)
		}
		for _, a := range e.Aliases {
			if err := checkText("alias", a, true); err != nil {
				return fmt.Errorf("model %s: %w", e.Model, err)
			}
		}
		if len(e.Note) > 200 {
			return fmt.Errorf("model %s: note over 200 characters", e.Model)
		}
	}
	return nil
}

// SortModels orders entries by model name, as a coordinator signs them.
func SortModels(models []ModelEntry) {
	sort.Slice(models, func(i, k int) bool { return models[i].Model < models[k].Model })
}

// CheckModelCatalogue opens a model catalogue: signed by a trusted coordinator that it
// names, with a sequence, issued no later than now allows, and entries that pass
// CheckModelEntries. Whether it is newer than one already held is the holder's check.
func CheckModelCatalogue(raw []byte, now time.Time, trust Trust) (*SignedModelCatalogue, error) {
	env, err := openKind(raw, KindModelCatalogue)
	if err != nil {
		return nil, err
	}
	var c ModelCatalogue
	if err := decodePayload(env, ModelsVersion, &c, func() int { return c.Version }); err != nil {
		return nil, err
	}
	if c.Coordinator != env.signerText {
		return nil, fmt.Errorf("%w: catalogue names coordinator %s but is signed by %s", ErrWrongSigner, c.Coordinator, env.Signer)
	}
	if err := trust.check(KindModelCatalogue, env.Signer); err != nil {
		return nil, err
	}
	if c.Seq == 0 || c.IssuedAt.IsZero() {
		return nil, invalid(KindModelCatalogue, "seq and issued_at are required")
	}
	if err := CheckModelEntries(c.Models); err != nil {
		return nil, invalid(KindModelCatalogue, "%v", err)
	}
	if err := checkIssued(KindModelCatalogue, c.IssuedAt, time.Time{}, now); err != nil {
		return nil, err
	}
	return &SignedModelCatalogue{ModelCatalogue: c, Signer: env.Signer, Raw: raw}, nil
}

// ModelsSyncProtocol is served by every node: the model catalogues it holds of one
// coordinator. A node asks the coordinator itself when it joins the network and when a
// record names a catalogue it does not hold.
const ModelsSyncProtocol = "/gpunex/models-sync/1.0.0"

// ModelsSyncRequest asks for the catalogues held of a coordinator.
type ModelsSyncRequest struct {
	Coordinator string `json:"coordinator"`
}

// ModelsSyncAnswer carries them, oldest first.
type ModelsSyncAnswer struct {
	Catalogues [][]byte `json:"catalogues"`
}

// Size limits of the models sync frames: a request, and an answer of at most 24
// catalogues (base64 in JSON).
const (
	MaxModelsSyncRequest = 1024
	MaxModelsSyncAnswer  = 24 * MaxModelCatalogueSize * 3 / 2
)

// ModelsLookup returns the catalogue of a coordinator with a sequence, nil when the node
// does not hold it. Seq 0 is FirstModels.
type ModelsLookup func(coordinator peer.ID, seq uint64) *ModelCatalogue

// FirstModelsOnly is the lookup of a node that holds no coordinator's catalogue.
func FirstModelsOnly(_ peer.ID, seq uint64) *ModelCatalogue {
	if seq == 0 {
		return FirstModels()
	}
	return nil
}
