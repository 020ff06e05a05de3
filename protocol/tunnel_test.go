package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestProposalWithoutPortsUnchanged: a proposal declaring no port encodes as one made
// before ports existed (no "ports" member), so that providers built before them take it.
func TestProposalWithoutPortsUnchanged(t *testing.T) {
	b, err := json.Marshal(validProposal("r", "p"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "ports") {
		t.Fatalf("a proposal without ports names them: %s", b)
	}
	b, _ = json.Marshal(Lease{})
	if strings.Contains(string(b), "ports") {
		t.Fatalf("a lease without ports names them: %s", b)
	}
}

// TestTunnelFrames: an open naming a job and a declared-looking port is read back; a bad
// job ID or port is malformed; a refusal reads as a TunnelRefusal with its code.
func TestTunnelFrames(t *testing.T) {
	var buf bytes.Buffer
	WriteJSONFrame(&buf, TunnelOpen{Job: "0123456789abcdef", Port: 8000})
	o, err := ReadTunnelOpen(bufio.NewReader(&buf))
	if err != nil || o.Job != "0123456789abcdef" || o.Port != 8000 {
		t.Fatalf("open read back: %+v, %v", o, err)
	}
	for _, bad := range []TunnelOpen{{Job: "x", Port: 80}, {Job: "0123456789abcdef"}, {Job: "0123456789abcdef", Port: 70000}} {
		buf.Reset()
		WriteJSONFrame(&buf, bad)
		if _, err := ReadTunnelOpen(bufio.NewReader(&buf)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%+v: %v, want malformed", bad, err)
		}
	}
	buf.Reset()
	WriteJSONFrame(&buf, TunnelAnswer{OK: true})
	if err := ReadTunnelAnswer(bufio.NewReader(&buf)); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	WriteJSONFrame(&buf, TunnelAnswer{Code: TunnelPort, Error: "port 22 is not one the job declared"})
	var refusal *TunnelRefusal
	if err := ReadTunnelAnswer(bufio.NewReader(&buf)); !errors.As(err, &refusal) || refusal.Code != TunnelPort || !strings.Contains(err.Error(), "port 22") {
		t.Fatalf("refusal: %v", err)
	}
}

// FuzzTunnelFrames feeds arbitrary bytes to both ends' decoders of the tunnel stream:
// every failure is classified, nothing is read past the frame's limit, and an open that
// passes names a valid job and port.
func FuzzTunnelFrames(f *testing.F) {
	f.Add(frames([]byte(`{"job":"0123456789abcdef","port":8000}`)))
	f.Add(frames([]byte(`{"ok":true}`)))
	f.Add(frames([]byte(`{"code":"port","error":"no"}`)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		o, err := ReadTunnelOpen(r)
		if err == nil && (!ValidJobID(o.Job) || !ValidPort(o.Port)) {
			t.Fatalf("an open passed with job %q port %d", o.Job, o.Port)
		}
		if err != nil && Reason(err) == "other" {
			t.Fatalf("unclassified error: %v", err)
		}
		if consumed := len(data) - r.Buffered(); err == nil && consumed > MaxTunnelFrame+10 {
			t.Fatalf("read %d bytes past a limit of %d", consumed, MaxTunnelFrame)
		}
		err = ReadTunnelAnswer(bufio.NewReader(bytes.NewReader(data)))
		var refusal *TunnelRefusal
		if err != nil && !errors.As(err, &refusal) && Reason(err) == "other" {
			t.Fatalf("unclassified answer error: %v", err)
		}
	})
}
