package protocol

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// manifestRef marshals a manifest and returns it with the reference a proposal would carry.
func manifestRef(t testing.TB, m InputManifest) ([]byte, InputRef) {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return raw, InputRef{Manifest: hex.EncodeToString(sum[:]), ManifestSize: int64(len(raw)), Bytes: m.Bytes()}
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sampleManifest is a folder "data" with a two-chunk file, an empty file, a sub-folder and a
// link inside it, and a single file "notes.txt" whose chunk repeats one of data's.
func sampleManifest() InputManifest {
	a, b := digest("a"), digest("b")
	return InputManifest{Version: InputVersion, ChunkSize: InputChunkSize, Entries: []InputEntry{
		{Path: "data", Type: InputDir, Mode: 0o755},
		{Path: "data/big.bin", Type: InputFile, Mode: 0o644, Size: InputChunkSize + 10, Chunks: []string{a, b}},
		{Path: "data/empty", Type: InputFile, Mode: 0o600},
		{Path: "data/sub", Type: InputDir, Mode: 0o700},
		{Path: "data/sub/latest", Type: InputLink, Target: "../big.bin"},
		{Path: "notes.txt", Type: InputFile, Mode: 0o644, Size: InputChunkSize, Chunks: []string{a}},
	}}
}

func TestInputManifestAccepted(t *testing.T) {
	raw, ref := manifestRef(t, sampleManifest())
	m, err := ParseInputManifest(raw, ref)
	if err != nil {
		t.Fatal(err)
	}
	chunks := m.Chunks()
	if len(chunks) != 2 || chunks[0] != (InputChunk{digest("a"), InputChunkSize}) || chunks[1] != (InputChunk{digest("b"), 10}) {
		t.Fatalf("distinct chunks: %+v", chunks)
	}
	if ref.Bytes != 2*InputChunkSize+10 {
		t.Fatalf("bytes %d", ref.Bytes)
	}
}

// TestInputManifestRefused: what a provider refuses before storing a byte: absolute paths,
// "..", types other than file, folder and in-folder link, and a manifest that is not the one
// the proposal named.
func TestInputManifestRefused(t *testing.T) {
	cases := map[string]func(m *InputManifest){
		"absolute path":       func(m *InputManifest) { m.Entries[5].Path = "/etc/passwd" },
		"dot-dot":             func(m *InputManifest) { m.Entries[2].Path = "data/../../x" },
		"dot":                 func(m *InputManifest) { m.Entries[2].Path = "data/./x" },
		"empty name":          func(m *InputManifest) { m.Entries[2].Path = "data//x" },
		"device":              func(m *InputManifest) { m.Entries[2].Type = "chardev" },
		"fifo":                func(m *InputManifest) { m.Entries[2].Type = "fifo" },
		"link leaving":        func(m *InputManifest) { m.Entries[4].Target = "../../../etc/passwd" },
		"link to other input": func(m *InputManifest) { m.Entries[4].Target = "../../notes.txt" },
		"absolute link":       func(m *InputManifest) { m.Entries[4].Target = "/etc/passwd" },
		"parent not listed":   func(m *InputManifest) { m.Entries[2].Path = "other/empty" },
		"parent is a link":    func(m *InputManifest) { m.Entries[3].Type, m.Entries[3].Mode, m.Entries[3].Target = InputLink, 0, "." },
		"parent is a file":    func(m *InputManifest) { m.Entries[4].Path = "data/empty/latest" },
		"twice":               func(m *InputManifest) { m.Entries[2].Path = "data/big.bin" },
		"chunk count":         func(m *InputManifest) { m.Entries[1].Chunks = m.Entries[1].Chunks[:1] },
		"chunk digest":        func(m *InputManifest) { m.Entries[1].Chunks[1] = "XYZ" },
		"chunk sizes":         func(m *InputManifest) { m.Entries[5].Chunks = []string{digest("b")} },
		"setuid":              func(m *InputManifest) { m.Entries[1].Mode = 0o4755 },
		"chunk size":          func(m *InputManifest) { m.ChunkSize = 1 << 20 },
		"version":             func(m *InputManifest) { m.Version = 2 },
		"no entries":          func(m *InputManifest) { m.Entries = nil },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			m := sampleManifest()
			edit(&m)
			raw, ref := manifestRef(t, m)
			if _, err := ParseInputManifest(raw, ref); err == nil || Reason(err) == "other" {
				t.Fatalf("accepted or unclassified: %v", err)
			}
		})
	}
	raw, ref := manifestRef(t, sampleManifest())
	other := ref
	other.Manifest = digest("another manifest")
	if _, err := ParseInputManifest(raw, other); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a manifest the proposal did not name: %v", err)
	}
	more := ref
	more.Bytes++
	if _, err := ParseInputManifest(raw, more); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a manifest holding other bytes than the proposal says: %v", err)
	}
	if _, err := ParseInputManifest(append(raw, ' '), ref); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a manifest of another size: %v", err)
	}
	unknown := bytes.Replace(raw, []byte(`"version"`), []byte(`"extra":1,"version"`), 1)
	sum := sha256.Sum256(unknown)
	if _, err := ParseInputManifest(unknown, InputRef{Manifest: hex.EncodeToString(sum[:]), ManifestSize: int64(len(unknown)), Bytes: ref.Bytes}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unknown member: %v", err)
	}
}

// TestProposalInput: a proposal's input reference is checked with the proposal.
func TestProposalInput(t *testing.T) {
	_, ref := manifestRef(t, sampleManifest())
	for name, in := range map[string]InputRef{
		"digest": {Manifest: "abc", ManifestSize: 10, Bytes: 1},
		"size":   {Manifest: ref.Manifest, ManifestSize: MaxInputManifestSize + 1, Bytes: 1},
		"bytes":  {Manifest: ref.Manifest, ManifestSize: 10, Bytes: MaxInputBytes + 1},
	} {
		if err := in.check(); err == nil {
			t.Errorf("%s: accepted %+v", name, in)
		}
	}
	if err := ref.check(); err != nil {
		t.Fatal(err)
	}
}

// TestInputDeadline: the provider waits for an input at the minimum rate beyond the grace,
// never past the lease.
func TestInputDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := &Lease{IssuedAt: t0, EndsAt: t0.Add(time.Hour)}
	p := &Proposal{Image: Image{ArchiveSize: 60 << 20}, Input: &InputRef{Bytes: 600 << 20}}
	if got, want := InputDeadline(l, p), t0.Add(InputGrace+660*time.Second); !got.Equal(want) {
		t.Fatalf("deadline %s, want %s", got, want)
	}
	p.Input.Bytes = 100 << 30
	if got := InputDeadline(l, p); !got.Equal(l.EndsAt) {
		t.Fatalf("deadline %s past the lease's end %s", got, l.EndsAt)
	}
}

func TestInputChunkFrames(t *testing.T) {
	var buf bytes.Buffer
	data := bytes.Repeat([]byte("x"), 1000)
	if err := WriteInputChunk(&buf, 300, data); err != nil {
		t.Fatal(err)
	}
	WriteInputEnd(&buf)
	r := bufio.NewReader(&buf)
	i, n, end, err := ReadInputChunkHeader(r)
	if err != nil || end || i != 300 || n != 1000 {
		t.Fatalf("header: %d %d %v %v", i, n, end, err)
	}
	got := make([]byte, n)
	io.ReadFull(r, got)
	if !bytes.Equal(got, data) {
		t.Fatal("chunk bytes differ")
	}
	if _, _, end, err := ReadInputChunkHeader(r); !end || err != nil {
		t.Fatalf("end frame: %v %v", end, err)
	}
	// A frame announcing more than a chunk is refused before it is read.
	var big bytes.Buffer
	big.Write([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	if _, _, _, err := ReadInputChunkHeader(bufio.NewReader(&big)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
}

// FuzzInputManifest: whatever bytes arrive as a manifest, the parser classifies its
// refusal, and what it accepts keeps every rule a provider relies on when it writes the
// files: relative clean paths under listed folders, links inside their input.
func FuzzInputManifest(f *testing.F) {
	raw, _ := json.Marshal(sampleManifest())
	f.Add(raw)
	f.Add([]byte(`{"version":1,"chunk_size":4194304,"entries":[{"path":"a","type":"link","target":"../x"}]}`))
	f.Add([]byte(`{"version":1,"chunk_size":4194304,"entries":[{"path":"a","type":"dir"},{"path":"a/b","type":"file","size":1,"chunks":["00"]}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var probe InputManifest
		bytes := int64(0)
		if json.Unmarshal(raw, &probe) == nil {
			bytes = probe.Bytes()
		}
		sum := sha256.Sum256(raw)
		m, err := ParseInputManifest(raw, InputRef{Manifest: hex.EncodeToString(sum[:]), ManifestSize: int64(len(raw)), Bytes: bytes})
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("unclassified refusal: %v", err)
			}
			return
		}
		for _, e := range m.Entries {
			if strings.HasPrefix(e.Path, "/") || strings.Contains("/"+e.Path+"/", "/../") {
				t.Fatalf("accepted path %q", e.Path)
			}
			if e.Type == InputLink && (strings.HasPrefix(e.Target, "/") || CheckInputLink(e.Path, e.Target) != nil) {
				t.Fatalf("accepted link %q -> %q", e.Path, e.Target)
			}
		}
		var total int64
		for _, c := range m.Chunks() {
			total += c.Size
			if c.Size <= 0 || c.Size > InputChunkSize {
				t.Fatalf("chunk of %d bytes", c.Size)
			}
		}
		if total > m.Bytes() {
			t.Fatalf("distinct chunks hold %d bytes, the files %d", total, m.Bytes())
		}
	})
}

// FuzzInputFrames feeds arbitrary bytes to the job-input stream's decoders: the JSON frames
// and the chunk frames' headers. Every failure is classified, and no header announces more
// than a chunk.
func FuzzInputFrames(f *testing.F) {
	var chunk bytes.Buffer
	WriteInputChunk(&chunk, 3, []byte("abc"))
	f.Add(chunk.Bytes())
	f.Add(frames([]byte(`{"type":"missing","missing":"AQ==","held_bytes":4}`)))
	f.Add([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m InputMsg
		if err := ReadJSONFrame(bufio.NewReader(bytes.NewReader(data)), MaxInputMsgFrame, &m); err != nil && Reason(err) == "other" {
			t.Fatalf("unclassified JSON frame error: %v", err)
		}
		_, n, _, err := ReadInputChunkHeader(bufio.NewReader(bytes.NewReader(data)))
		if err != nil && Reason(err) == "other" {
			t.Fatalf("unclassified chunk frame error: %v", err)
		}
		if err == nil && (n < 0 || n > MaxInputChunkFrame) {
			t.Fatalf("a header announcing %d bytes", n)
		}
	})
}
