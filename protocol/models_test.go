package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
)

func b200Entry() ModelEntry {
	return ModelEntry{Model: "B200-192GB", Aliases: []string{"B200"}, VRAMGB: 192, FP32TFLOPS: 80, FP16TFLOPS: 160, TensorTFLOPS: 1125, MemBandwidth: 8000, Supported: true}
}

func TestModelCatalogueChecks(t *testing.T) {
	csk, coord := newKey(t)
	osk, other := newKey(t)
	trust := NewTrust(coord)
	cat := ModelCatalogue{Version: 1, Coordinator: coord.String(), Seq: 2, IssuedAt: testNow,
		Models: append([]ModelEntry{b200Entry()}, FirstModels().Models...)}
	sc, err := CheckModelCatalogue(seal(t, KindModelCatalogue, cat, csk), testNow, trust)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := sc.Datasheet("b200-192gb"); !ok || d.TensorTFLOPS != 1125 || !sc.Supported("B200-192GB") {
		t.Fatalf("B200 in the catalogue: %+v %v", d, ok)
	}
	if m := sc.ModelFor("NVIDIA B200", 192<<30); m != "B200-192GB" {
		t.Fatalf("NVML name of the new model: %s", m)
	}

	// Rejected, each with the reason a node counts.
	cases := []struct {
		name   string
		raw    func() []byte
		reason string
	}{
		{"untrusted signer", func() []byte {
			c := cat
			c.Coordinator = other.String()
			return seal(t, KindModelCatalogue, c, osk)
		}, "untrusted"},
		{"names another coordinator", func() []byte { return seal(t, KindModelCatalogue, cat, osk) }, "wrong_signer"},
		{"no sequence", func() []byte {
			c := cat
			c.Seq = 0
			return seal(t, KindModelCatalogue, c, csk)
		}, "invalid"},
		{"issued far ahead", func() []byte {
			c := cat
			c.IssuedAt = testNow.Add(48 * time.Hour)
			return seal(t, KindModelCatalogue, c, csk)
		}, "far_future"},
		{"model twice", func() []byte {
			c := cat
			c.Models = append([]ModelEntry{b200Entry()}, c.Models...)
			return seal(t, KindModelCatalogue, c, csk)
		}, "invalid"},
		{"no figures", func() []byte {
			c := cat
			e := b200Entry()
			e.TensorTFLOPS = 0
			c.Models = []ModelEntry{e}
			return seal(t, KindModelCatalogue, c, csk)
		}, "invalid"},
		{"oversized", func() []byte {
			c := cat
			for i := 0; len(c.Models) < MaxCatalogueModels; i++ {
				e := b200Entry()
				e.Model = strings.Repeat("X", 50) + "-" + string(rune('A'+i%26)) + string(rune('A'+i/26)) + "-1GB"
				e.Note = strings.Repeat("n", 200)
				c.Models = append(c.Models, e)
			}
			// Seal refuses it: build the envelope as a forger would.
			data, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			spec, _ := specFor(KindModelCatalogue)
			env, err := record.Seal(&payloadRecord{spec: spec, data: data}, csk)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := env.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			return raw
		}, "too_large"},
	}
	for _, c := range cases {
		if _, err := CheckModelCatalogue(c.raw(), testNow, trust); Reason(err) != c.reason {
			t.Errorf("%s: %v (%s); want %s", c.name, err, Reason(err), c.reason)
		}
	}
}

// TestAttestationNamesItsCatalogue: an attestation is scored with the catalogue its
// challenge names; a validator without that catalogue refuses it, and one that has it
// recomputes scores and delisting reasons with it.
func TestAttestationNamesItsCatalogue(t *testing.T) {
	csk, coord := newKey(t)
	psk, prov := newKey(t)
	trust := NewTrust(coord)
	newer := &ModelCatalogue{Version: 1, Coordinator: coord.String(), Seq: 3, IssuedAt: testNow,
		Models: append([]ModelEntry{b200Entry()}, FirstModels().Models...)}
	challenge := seal(t, KindChallenge, Challenge{Version: 1, Coordinator: coord.String(), Provider: prov.String(), Nonce: strings.Repeat("ab", 16), IssuedAt: testNow, ModelsSeq: 3}, csk)
	receipt := seal(t, KindNetworkReceipt, goodReceipt(coord, prov), csk)
	g := GPUBenchmark{UUID: "GPU-1", Model: "B200-192GB", FP32TFLOPS: 79, FP16TFLOPS: 158, TensorTFLOPS: 1100, MemBandwidth: 7900}
	g.PerfScore = newer.Score(g)
	a := Attestation{Version: 1, Provider: prov.String(), Seq: 1, IssuedAt: testNow.Add(time.Minute), Challenge: challenge, NetworkReceipt: receipt,
		GPUs: []GPUBenchmark{g}, Storage: StorageBenchmark{SeqWriteMBps: 500, SeqReadMBps: 900, RandReadIOPS: 20000, BytesMeasured: 256 << 20}}
	raw := seal(t, KindAttestation, a, psk)
	if g.PerfScore < 98 {
		t.Fatalf("score under the newer catalogue: %d", g.PerfScore)
	}
	if _, err := CheckAttestation(raw, testNow.Add(time.Hour), trust, FirstModelsOnly); Reason(err) != "unknown_models" {
		t.Fatalf("validator without catalogue 3: %v", err)
	}
	holds := func(c peer.ID, seq uint64) *ModelCatalogue {
		if seq == 3 {
			return newer
		}
		return FirstModelsOnly(c, seq)
	}
	if sa, err := CheckAttestation(raw, testNow.Add(time.Hour), trust, holds); err != nil || sa.GPUs[0].PerfScore != g.PerfScore {
		t.Fatalf("validator with catalogue 3: %v", err)
	}
	// Under the first catalogue the B200 would be delisted; a provider cannot claim the
	// newer catalogue's score while naming the first one.
	old := seal(t, KindChallenge, Challenge{Version: 1, Coordinator: coord.String(), Provider: prov.String(), Nonce: strings.Repeat("ab", 16), IssuedAt: testNow}, csk)
	a.Challenge = old
	if _, err := CheckAttestation(seal(t, KindAttestation, a, psk), testNow.Add(time.Hour), trust, holds); Reason(err) != "invalid" {
		t.Fatalf("newer score under the first catalogue: %v", err)
	}
}

// TestVerifyAttestationWithCatalogue: `gpunex verify` of an attestation scored with a
// coordinator's catalogue checks every other rule and says the scores were not checked;
// one that breaks another rule is still refused.
func TestVerifyAttestationWithCatalogue(t *testing.T) {
	csk, coord := newKey(t)
	psk, prov := newKey(t)
	challenge := seal(t, KindChallenge, Challenge{Version: 1, Coordinator: coord.String(), Provider: prov.String(), Nonce: strings.Repeat("ab", 16), IssuedAt: testNow, ModelsSeq: 7}, csk)
	receipt := seal(t, KindNetworkReceipt, goodReceipt(coord, prov), csk)
	a := Attestation{Version: 1, Provider: prov.String(), Seq: 1, IssuedAt: testNow.Add(time.Minute), Challenge: challenge, NetworkReceipt: receipt,
		GPUs:    []GPUBenchmark{{UUID: "GPU-1", Model: "B200-192GB", TensorTFLOPS: 1100, PerfScore: 98}},
		Storage: StorageBenchmark{SeqWriteMBps: 500, SeqReadMBps: 900, RandReadIOPS: 20000, BytesMeasured: 256 << 20}}
	v, err := Verify(seal(t, KindAttestation, a, psk), testNow.Add(time.Hour))
	if err != nil || !strings.Contains(v.Note, "scores and delisting reasons not checked") || !strings.Contains(v.Note, "model catalogue 7") {
		t.Fatalf("verify: %+v %v", v, err)
	}
	a.IssuedAt = testNow.Add(2 * time.Hour) // past the challenge's hour
	if _, err := Verify(seal(t, KindAttestation, a, psk), testNow.Add(3*time.Hour)); Reason(err) != "replay" {
		t.Fatalf("verify of a late attestation: %v", err)
	}
}

// TestSpokenCoversEveryKind: `gpunex version` names the payload version of every record
// kind the envelope layer knows.
func TestSpokenCoversEveryKind(t *testing.T) {
	v := Spoken()
	for _, s := range kindSpecs {
		if v.Records[s.kind] == 0 {
			t.Errorf("record kind %s has no version in Spoken", s.kind)
		}
	}
	if len(v.Streams) < 14 || len(v.Topics) != 6 {
		t.Errorf("streams %v, topics %v", v.Streams, v.Topics)
	}
}
