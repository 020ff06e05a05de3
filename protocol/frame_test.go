package protocol

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func frames(records ...[]byte) []byte {
	var b []byte
	for _, r := range records {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

func TestReadSyncFrames(t *testing.T) {
	var got [][]byte
	err := ReadSyncFrames(bufio.NewReader(bytes.NewReader(frames([]byte("a"), []byte("bc"), nil))), func(r []byte) { got = append(got, r) })
	if err != nil || len(got) != 3 || string(got[1]) != "bc" {
		t.Fatalf("got %q, %v", got, err)
	}
	huge := binary.AppendUvarint(nil, MaxOfferSize+1)
	if err := ReadSyncFrames(bufio.NewReader(bytes.NewReader(huge)), func([]byte) {}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	truncated := frames([]byte("hello"))[:3]
	if err := ReadSyncFrames(bufio.NewReader(bytes.NewReader(truncated)), func([]byte) {}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated frame: %v", err)
	}
}

func FuzzReadSyncFrames(f *testing.F) {
	f.Add(frames([]byte("a"), []byte("bc")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		total := 0
		err := ReadSyncFrames(bufio.NewReader(bytes.NewReader(data)), func(r []byte) {
			if len(r) > MaxOfferSize {
				t.Fatalf("frame of %d bytes passed the limit", len(r))
			}
			total += len(r)
		})
		if err == nil && total > len(data) {
			t.Fatal("read more than the input")
		}
		if err != nil && Reason(err) == "other" {
			t.Fatalf("unclassified error: %v", err)
		}
	})
}

// frameDecoders are the JSON frames of every stream protocol, with the limit their readers
// apply: FuzzJSONFrames feeds each of them arbitrary bytes.
var frameDecoders = []struct {
	name string
	max  int
	new  func() any
}{
	{"job", MaxJobFrame, func() any { return new(JobMsg) }},
	{"hold-release", MaxHoldReleaseFrame, func() any { return new(HoldRelease) }},
	{"bench-net request", MaxBenchNetRequest, func() any { return new(BenchNetMsg) }},
	{"bench-net answer", MaxBenchNetAnswer, func() any { return new(BenchNetMsg) }},
	{"bench-challenge answer", MaxBenchChallengeAnswer, func() any { return new(BenchNetMsg) }},
	{"uptime probe", MaxUptimeProbeSize, func() any { return new(UptimeProbe) }},
	{"apply request", MaxApplyFrame, func() any { return new(ApplyRequest) }},
	{"apply response", MaxApplyFrame, func() any { return new(ApplyResponse) }},
	{"notify answer", MaxNotifyAnswer, func() any { return new(ApplyResponse) }},
	{"job report", MaxJobReportFrame, func() any { return new(JobReport) }},
	{"job report answer", MaxJobReportAnswer, func() any { return new(map[string]string) }},
	{"wallet request", MaxWalletRequest, func() any { return new(WalletRequest) }},
	{"wallet response", MaxWalletResponse, func() any { return new(WalletResponse) }},
}

// FuzzJSONFrames feeds arbitrary bytes to every frame decoder: each failure is classified
// (malformed or too large), nothing larger than the limit is read, and a decoded frame
// encodes again.
func FuzzJSONFrames(f *testing.F) {
	for i := range frameDecoders {
		f.Add(uint8(i), frames([]byte(`{"type":"propose","op":"status","job":"0123456789abcdef"}`)))
		f.Add(uint8(i), frames([]byte(`{"status":{"id":"x","gpus":2}}`)))
	}
	f.Add(uint8(0), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add(uint8(2), frames([]byte(`{"op":"down","size":4194304,"token":"0123456789abcdef"}`))) // bench-net 2.0.0
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		d := frameDecoders[int(which)%len(frameDecoders)]
		v := d.new()
		r := bufio.NewReader(bytes.NewReader(data))
		err := ReadJSONFrame(r, d.max, v)
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("%s: unclassified error: %v", d.name, err)
			}
			return
		}
		if consumed := len(data) - r.Buffered(); consumed > d.max+binary.MaxVarintLen64 {
			t.Fatalf("%s: read %d bytes past a limit of %d", d.name, consumed, d.max)
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("%s: a decoded frame does not encode: %v", d.name, err)
		}
	})
}

// FuzzApplyStream feeds arbitrary bytes to the coordinator's apply stream decoding: every
// failure is classified and a frame never exceeds its limit.
func FuzzApplyStream(f *testing.F) {
	f.Add(frames([]byte(`{"op":"status"}`)))
	f.Add(frames([]byte(`{"op":"submit","record":"AAAA"}`)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req ApplyRequest
		err := ReadJSONFrame(bufio.NewReader(bytes.NewReader(data)), MaxApplyFrame, &req)
		if err != nil && Reason(err) == "other" {
			t.Fatalf("unclassified error: %v", err)
		}
		if err == nil && len(req.Record) > MaxApplyFrame {
			t.Fatal("record larger than its frame")
		}
		if err == nil && len(req.Record) > 0 {
			if _, err := CheckApplication(req.Record, time.Now()); err != nil && Reason(err) == "other" {
				t.Fatalf("unclassified application rejection: %v", err)
			}
		}
	})
}
