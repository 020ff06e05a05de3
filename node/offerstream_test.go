package node

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gpunex/gpunex/protocol"
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
	err := readSyncFrames(bufio.NewReader(bytes.NewReader(frames([]byte("a"), []byte("bc"), nil))), func(r []byte) { got = append(got, r) })
	if err != nil || len(got) != 3 || string(got[1]) != "bc" {
		t.Fatalf("got %q, %v", got, err)
	}
	huge := binary.AppendUvarint(nil, protocol.MaxOfferSize+1)
	if err := readSyncFrames(bufio.NewReader(bytes.NewReader(huge)), func([]byte) {}); !errors.Is(err, protocol.ErrTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	truncated := frames([]byte("hello"))[:3]
	if err := readSyncFrames(bufio.NewReader(bytes.NewReader(truncated)), func([]byte) {}); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("truncated frame: %v", err)
	}
}

func FuzzReadSyncFrames(f *testing.F) {
	f.Add(frames([]byte("a"), []byte("bc")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		total := 0
		err := readSyncFrames(bufio.NewReader(bytes.NewReader(data)), func(r []byte) {
			if len(r) > protocol.MaxOfferSize {
				t.Fatalf("frame of %d bytes passed the limit", len(r))
			}
			total += len(r)
		})
		if err == nil && total > len(data) {
			t.Fatal("read more than the input")
		}
		if err != nil && protocol.Reason(err) == "other" {
			t.Fatalf("unclassified error: %v", err)
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
		var req applyRequest
		err := readJSONFrame(bufio.NewReader(bytes.NewReader(data)), maxApplyFrame, &req)
		if err != nil && protocol.Reason(err) == "other" {
			t.Fatalf("unclassified error: %v", err)
		}
		if err == nil && len(req.Record) > maxApplyFrame {
			t.Fatal("record larger than its frame")
		}
		if err == nil && len(req.Record) > 0 {
			if _, err := protocol.CheckApplication(req.Record, time.Now()); err != nil && protocol.Reason(err) == "other" {
				t.Fatalf("unclassified application rejection: %v", err)
			}
		}
	})
}
