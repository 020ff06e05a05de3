package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestScoreAndThresholds(t *testing.T) {
	h100, _ := FirstModels().Datasheet("H100-80GB")
	full := GPUBenchmark{Model: "H100-80GB", FP32TFLOPS: h100.FP32TFLOPS, FP16TFLOPS: h100.FP16TFLOPS, TensorTFLOPS: h100.TensorTFLOPS, MemBandwidth: h100.MemBandwidth}
	cases := []struct {
		name  string
		g     GPUBenchmark
		score int
		below string
	}{
		{"nominal", full, 100, ""},
		{"above datasheet is capped", GPUBenchmark{Model: "H100-80GB", TensorTFLOPS: 2 * h100.TensorTFLOPS}, 100, ""},
		{"throttled to 60%", GPUBenchmark{Model: "H100-80GB", FP32TFLOPS: 0.6 * h100.FP32TFLOPS, FP16TFLOPS: 0.6 * h100.FP16TFLOPS, TensorTFLOPS: 0.6 * h100.TensorTFLOPS, MemBandwidth: 0.6 * h100.MemBandwidth}, 60, ""},
		{"tensor at 45%", GPUBenchmark{Model: "H100-80GB", TensorTFLOPS: 0.45 * h100.TensorTFLOPS, MemBandwidth: h100.MemBandwidth}, 68, "tensor_tflops 340.4 TFLOPS is under the threshold of 378.2"},
		{"bandwidth at 50%", GPUBenchmark{Model: "H100-80GB", MemBandwidth: 1000}, 50, "mem_bandwidth_gbps 1000.0 GB/s is under the threshold of 1200.0"},
		{"nothing measured", GPUBenchmark{Model: "H100-80GB"}, 0, ""},
		{"unknown model", GPUBenchmark{Model: "X-1GB", TensorTFLOPS: 5}, 0, NotInCatalogue + "model X-1GB has no reference figures in catalogue 0 of the compiled-in table"},
	}
	for _, c := range cases {
		if got := FirstModels().Score(c.g); got != c.score {
			t.Errorf("%s: score %d; want %d", c.name, got, c.score)
		}
		if got := FirstModels().Shortfall(c.g); (c.below == "") != (got == "") || !strings.Contains(got, c.below) {
			t.Errorf("%s: shortfall %q; want %q", c.name, got, c.below)
		}
	}
}

func TestAttestationChecks(t *testing.T) {
	csk, coord := newKey(t)
	psk, prov := newKey(t)
	trust := NewTrust(coord)
	challenge := seal(t, KindChallenge, Challenge{Version: 1, Coordinator: coord.String(), Provider: prov.String(), Nonce: strings.Repeat("ab", 16), IssuedAt: testNow}, csk)
	g := GPUBenchmark{UUID: "GPU-1", Model: "L4-24GB", TensorTFLOPS: 100, MemBandwidth: 280}
	g.PerfScore = FirstModels().Score(g)
	a := Attestation{Version: 1, Provider: prov.String(), Seq: 1, IssuedAt: testNow.Add(time.Minute), Challenge: challenge,
		DriverVersion: "535.129.03", CUDAVersion: "12.2", GPUs: []GPUBenchmark{g}, Storage: StorageBenchmark{SeqWriteMBps: 500},
		NetworkReceipt: seal(t, KindNetworkReceipt, goodReceipt(coord, prov), csk)}
	if _, err := CheckAttestation(seal(t, KindAttestation, a, psk), testNow.Add(time.Hour), trust, FirstModelsOnly); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckAttestation(seal(t, KindAttestation, a, psk), testNow.Add(MaxAttestationAge+time.Hour), trust, FirstModelsOnly); Reason(err) != "expired" {
		t.Fatalf("stale attestation: %v", err)
	}
	late := a
	late.IssuedAt = testNow.Add(ChallengeTTL + time.Minute)
	if _, err := CheckAttestation(seal(t, KindAttestation, late, psk), testNow.Add(2*time.Hour), trust, FirstModelsOnly); Reason(err) != "replay" {
		t.Fatalf("old challenge reused: %v", err)
	}
	if _, err := CheckAttestation(seal(t, KindAttestation, a, psk), testNow.Add(time.Hour), NewTrust(), FirstModelsOnly); Reason(err) != "untrusted" {
		t.Fatalf("untrusted challenge: %v", err)
	}
	inflated := a
	inflated.GPUs = []GPUBenchmark{g}
	inflated.GPUs[0].PerfScore = 99
	if _, err := CheckAttestation(seal(t, KindAttestation, inflated, psk), testNow.Add(time.Hour), trust, FirstModelsOnly); Reason(err) != "invalid" {
		t.Fatalf("inflated score: %v", err)
	}
	// A GPU under its threshold cannot be kept listed by leaving out (or rewording) its
	// delisting reason; a lost GPU says so and has no figures.
	slow := GPUBenchmark{UUID: "GPU-2", Model: "L4-24GB", TensorTFLOPS: 50, MemBandwidth: 280}
	slow.PerfScore = FirstModels().Score(slow)
	for _, below := range []string{"", "all fine"} {
		hidden := a
		hidden.GPUs = []GPUBenchmark{g, slow}
		hidden.GPUs[1].Below = below
		if _, err := CheckAttestation(seal(t, KindAttestation, hidden, psk), testNow.Add(time.Hour), trust, FirstModelsOnly); Reason(err) != "invalid" {
			t.Fatalf("a delisting reason of %q for a GPU under its threshold: %v", below, err)
		}
	}
	honest := a
	slow.Below = FirstModels().Shortfall(slow)
	honest.GPUs = []GPUBenchmark{g, slow, {UUID: "lost-3", Model: "L4-24GB", Below: LostPrefix + "GPU is lost"}}
	if _, err := CheckAttestation(seal(t, KindAttestation, honest, psk), testNow.Add(time.Hour), trust, FirstModelsOnly); err != nil {
		t.Fatalf("delisted and lost GPUs stated honestly: %v", err)
	}
	// The network figures that count are the coordinator's: a receipt the provider signed
	// itself, one of another run, or none, is refused; a slow link cannot be kept listed.
	for name, c := range map[string]struct {
		raw    []byte
		reason string
	}{
		"signed by the provider": {seal(t, KindNetworkReceipt, goodReceipt(coord, prov), psk), "wrong_signer"},
		"of another run":         {seal(t, KindNetworkReceipt, func() NetworkReceipt { r := goodReceipt(coord, prov); r.Nonce = strings.Repeat("cd", 16); return r }(), csk), "replay"},
		"missing":                {nil, "invalid"},
	} {
		forged := a
		forged.NetworkReceipt = c.raw
		if _, err := CheckAttestation(seal(t, KindAttestation, forged, psk), testNow.Add(time.Hour), trust, FirstModelsOnly); Reason(err) != c.reason {
			t.Errorf("network receipt %s: %v (%s), want %s", name, err, Reason(err), c.reason)
		}
	}
	slowLink := goodReceipt(coord, prov)
	slowLink.UpMbps = 5
	slowAtt := a
	slowAtt.NetworkReceipt = seal(t, KindNetworkReceipt, slowLink, csk)
	if _, err := CheckAttestation(seal(t, KindAttestation, slowAtt, psk), testNow.Add(time.Hour), trust, FirstModelsOnly); Reason(err) != "invalid" {
		t.Fatalf("a 5 Mbit/s upload without host_below: %v", err)
	}
	slowAtt.HostBelow = HostShortfall(&slowLink, slowAtt.Storage, ListingMinimum)
	if sa, err := CheckAttestation(seal(t, KindAttestation, slowAtt, psk), testNow.Add(time.Hour), trust, FirstModelsOnly); err != nil || !strings.HasPrefix(sa.HostBelow, "up_mbps 5.0 Mbit/s (measured by the coordinator) is under the minimum of 20 Mbit/s") {
		t.Fatalf("a slow link stated honestly: %v %q", err, slowAtt.HostBelow)
	}
	// The minimum is the coordinator's, from its receipt: one that accepts 1 Mbit/s lists
	// the 5 Mbit/s link, and a provider cannot claim the minimum was lower.
	lenient := slowLink
	lenient.Minimum = HostMinimum{UpMbps: 1, DownMbps: 1, MaxRTTMilli: 1000}
	lenientAtt := a
	lenientAtt.NetworkReceipt = seal(t, KindNetworkReceipt, lenient, csk)
	if sa, err := CheckAttestation(seal(t, KindAttestation, lenientAtt, psk), testNow.Add(time.Hour), trust, FirstModelsOnly); err != nil || sa.HostBelow != "" {
		t.Fatalf("a 5 Mbit/s link under a coordinator's 1 Mbit/s minimum: %v", err)
	}
	_, other := newKey(t)
	stolen := a
	stolen.Provider = other.String()
	osk, _ := newKey(t)
	if _, err := CheckAttestation(seal(t, KindAttestation, stolen, osk), testNow.Add(time.Hour), trust, FirstModelsOnly); err == nil {
		t.Fatal("another provider's challenge accepted")
	}
}

// goodReceipt is a coordinator's receipt of a run on a good link, for the challenge of
// nonce "abab...".
func goodReceipt(coord, prov fmt.Stringer) NetworkReceipt {
	return NetworkReceipt{Version: 1, Coordinator: coord.String(), Provider: prov.String(), Nonce: strings.Repeat("ab", 16),
		MeasuredAt: testNow.Add(30 * time.Second), RTTMilli: 12, RTTSamples: 9, UpMbps: 400, DownMbps: 900, Bytes: 16 << 20, Minimum: ListingMinimum}
}

// TestHostShortfall: each minimum of the listing delists with its metric, value, minimum
// and what to check; a storage figure of 0 (not measured) does not, a network not
// measured by the coordinator does.
func TestHostShortfall(t *testing.T) {
	good := NetworkReceipt{RTTMilli: 12, RTTSamples: 9, UpMbps: 400, DownMbps: 900, Bytes: 16 << 20}
	disk := StorageBenchmark{SeqWriteMBps: 700, SeqReadMBps: 3000, RandReadIOPS: 200000, BytesMeasured: 256 << 20}
	cases := []struct {
		name string
		r    *NetworkReceipt
		s    StorageBenchmark
		want string
	}{
		{"all good", &good, disk, ""},
		{"storage not measured", &good, StorageBenchmark{}, ""},
		{"no receipt", nil, disk, "network not measured by the coordinator"},
		{"a few bytes", &NetworkReceipt{UpMbps: 1e6, DownMbps: 1e6, Bytes: 100, RTTSamples: 9}, disk, "network not measured by the coordinator"},
		{"no ping", &NetworkReceipt{UpMbps: 1e6, DownMbps: 1e6, Bytes: 16 << 20}, disk, "network not measured by the coordinator"},
		{"slow upload", &NetworkReceipt{RTTMilli: 12, UpMbps: 8, DownMbps: 900, Bytes: 16 << 20, RTTSamples: 9}, disk, "up_mbps 8.0 Mbit/s (measured by the coordinator) is under the minimum of 20 Mbit/s for listing: check your internet link's upload"},
		{"slow download", &NetworkReceipt{RTTMilli: 12, UpMbps: 400, DownMbps: 30, Bytes: 16 << 20, RTTSamples: 9}, disk, "down_mbps 30.0 Mbit/s"},
		{"far away", &NetworkReceipt{RTTMilli: 450, UpMbps: 400, DownMbps: 900, Bytes: 16 << 20, RTTSamples: 9}, disk, "rtt_ms 450.0 ms (measured by the coordinator) is over the maximum of 300 ms"},
		{"a small storage run", &good, StorageBenchmark{SeqWriteMBps: 1, SeqReadMBps: 1, RandReadIOPS: 1, BytesMeasured: 1 << 20}, ""},
		{"spinning disk", &good, StorageBenchmark{SeqWriteMBps: 120, SeqReadMBps: 150, RandReadIOPS: 180, BytesMeasured: 256 << 20}, "rand_read_iops 180.0 IOPS is under the minimum of 1000 IOPS for listing: put the jobs folder on an SSD"},
		{"slow writes", &good, StorageBenchmark{SeqWriteMBps: 20, SeqReadMBps: 3000, RandReadIOPS: 200000, BytesMeasured: 256 << 20}, "seq_write_mbps 20.0 MB/s"},
	}
	for _, c := range cases {
		got := HostShortfall(c.r, c.s, ListingMinimum)
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := HostShortfall(&good, disk, EnterpriseMinimum); !strings.HasPrefix(got, "up_mbps 400.0 Mbit/s (measured by the coordinator) is under the minimum of 800 Mbit/s for Enterprise") {
		t.Errorf("a 400 Mbit/s upload for Enterprise: %q", got)
	}
}

// TestWorstCaseOfferFits: the largest offer an honest provider can make fits its caps: an
// attestation of the most GPUs, every one under a threshold (the longest reason), with
// full-length UUIDs; 16 models, 16 addresses, 16 maintenance windows, the longest
// availability text and a full certificate.
func TestWorstCaseOfferFits(t *testing.T) {
	sk, id := newKey(t)
	now := time.Now().UTC()
	ch := seal(t, KindChallenge, Challenge{Version: 1, Coordinator: id.String(), Provider: id.String(), Nonce: strings.Repeat("ab", 16), IssuedAt: now}, sk)
	a := Attestation{Version: 1, Provider: id.String(), Seq: uint64(now.UnixNano()), IssuedAt: now, Challenge: ch,
		DriverVersion: "580.105.08", CUDAVersion: "13.0",
		Storage: StorageBenchmark{SeqWriteMBps: 1234.5, SeqReadMBps: 6543.2, RandReadIOPS: 123456.7, BytesMeasured: 1 << 30},
		Network: NetworkBenchmark{Peer: id.String(), RTTMilli: 12.3, UpMbps: 987.6, DownMbps: 987.6},
		NetworkReceipt: seal(t, KindNetworkReceipt, NetworkReceipt{Version: 1, Coordinator: id.String(), Provider: id.String(), Nonce: strings.Repeat("ab", 16),
			MeasuredAt: now, RTTMilli: 12.3, RTTSamples: 64, UpMbps: 9876.5, DownMbps: 9876.5, Bytes: MaxBenchTransfer, Minimum: ListingMinimum}, sk)}
	a.HostBelow = HostShortfall(nil, a.Storage, ListingMinimum) // the longest reason
	for i := range MaxOfferItems * 8 {
		g := GPUBenchmark{UUID: fmt.Sprintf("GPU-%08x-1163-9228-11b4-922811b48326", i), Model: "RTXA6000-48GB",
			FP32TFLOPS: 12.3, FP16TFLOPS: 12.3, TensorTFLOPS: 45.6, MemBandwidth: 234.5, DurationMilli: 65432}
		g.PerfScore, g.Below = FirstModels().Score(g), FirstModels().Shortfall(g)
		a.GPUs = append(a.GPUs, g)
	}
	att := seal(t, KindAttestation, a, sk)
	if len(att) > MaxAttestationSize {
		t.Fatalf("attestation of %d GPUs is %d bytes, over its cap of %d", len(a.GPUs), len(att), MaxAttestationSize)
	}
	o := validOffer(id)
	o.Attestation = att
	o.Certificate = make([]byte, MaxCertificateSize)
	o.Availability = strings.Repeat("x", maxAvailabilityLen)
	o.GPUs = nil
	for i := range MaxOfferItems {
		o.GPUs = append(o.GPUs, OfferGPUs{Model: fmt.Sprintf("MODEL-%02d-%s", i, strings.Repeat("X", 40)), Count: MaxGPUsPerItem, VRAMGB: 141, PricePerGPUHour: MaxPricePerGPUHour})
	}
	o.Addrs = nil
	for range maxAddrs {
		o.Addrs = append(o.Addrs, "/ip4/1.2.3.4/tcp/4001/p2p/"+id.String()+strings.Repeat("/x", (maxAddrLen-80)/2))
	}
	for i := range MaxMaintenanceWindows {
		o.Maintenance = append(o.Maintenance, MaintenanceWindow{From: now.Add(time.Duration(i) * time.Hour), To: now.Add(time.Duration(i)*time.Hour + time.Minute), Note: strings.Repeat("n", maxTextLen)})
	}
	data, _ := json.Marshal(o)
	t.Logf("attestation %d bytes (cap %d), offer payload %d bytes (cap %d)", len(att), MaxAttestationSize, len(data), MaxOfferSize)
	if len(data)+512 > MaxOfferSize {
		t.Fatalf("the worst-case offer payload is %d bytes, over the cap of %d with the envelope", len(data), MaxOfferSize)
	}
}
