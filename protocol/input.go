package protocol

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// Data in: a renter's files sent to the provider before its job starts and shown read-only
// at /input (docs/protocols/jobs.md, "Data in"). The renter's node describes the files in a
// manifest (paths, modes, sizes, the SHA-256 of each fixed-size chunk); the proposal carries
// the manifest's digest and size and the bytes the files hold, so that the provider agrees to
// them before anything is sent. Once the lease holds, the renter opens the job-input stream
// and names the job; the provider, once it checked that the job is the renter's and waits
// for its input, asks for the manifest; it answers that with the chunks it does not hold yet
// for this renter; the renter sends those, each checked by its digest on arrival.

// JobInputProtocol carries a leased job's input: open, ready, manifest, missing, chunks,
// done.
const JobInputProtocol = "/gpunex/job-input/1.0.0"

const (
	// InputVersion is the manifest's version.
	InputVersion = 1
	// InputChunkSize is the size of every chunk of a file but its last.
	InputChunkSize = 4 << 20
	// MaxInputChunks caps the distinct chunks of one input (1 TiB of full chunks).
	MaxInputChunks = 1 << 18
	// MaxInputBytes caps the bytes of one input's files.
	MaxInputBytes = MaxInputChunks * InputChunkSize
	// MaxInputEntries caps the files, folders and links of one input.
	MaxInputEntries = 100_000
	// MaxInputManifestSize caps a manifest: the longest paths of MaxInputEntries entries or
	// the digests of MaxInputChunks chunks fit.
	MaxInputManifestSize = 32 << 20
	// MaxInputMsgFrame caps a JSON frame of the job-input stream (a missing-chunk bitmap of
	// MaxInputChunks bits, base64-encoded, fits).
	MaxInputMsgFrame = 64 << 10
	// MaxInputChunkFrame caps a chunk frame: its index and a whole chunk.
	MaxInputChunkFrame = InputChunkSize + binary.MaxVarintLen64
	// InputMinRate is the slowest upload a provider waits for, in bytes a second: the input
	// must have arrived by InputDeadline.
	InputMinRate = 1 << 20
	// InputGrace is what InputDeadline allows beyond the minimum rate: the negotiation's
	// steps, the image's import.
	InputGrace        = 2 * time.Minute
	maxInputPath      = 4096
	maxInputComponent = 255
)

// Entry types of a manifest.
const (
	InputFile = "file"
	InputDir  = "dir"
	InputLink = "link"
)

// InputRef is what a proposal says of its input: the manifest's SHA-256 (hex) and size,
// and the bytes its files hold.
type InputRef struct {
	Manifest     string `json:"manifest_sha256"`
	ManifestSize int64  `json:"manifest_size"`
	Bytes        int64  `json:"bytes"`
}

// check applies the proposal's rules to an input reference.
func (in *InputRef) check() error {
	switch {
	case len(in.Manifest) != 64 || strings.Trim(in.Manifest, "0123456789abcdef") != "":
		return fmt.Errorf("input manifest_sha256 is not 64 lower-case hex digits")
	case in.ManifestSize < 1 || in.ManifestSize > MaxInputManifestSize:
		return fmt.Errorf("input manifest_size %d out of range 1-%d", in.ManifestSize, MaxInputManifestSize)
	case in.Bytes < 0 || in.Bytes > MaxInputBytes:
		return fmt.Errorf("input bytes %d out of range 0-%d", in.Bytes, MaxInputBytes)
	}
	return nil
}

// InputManifest describes a job's input: every file, folder and link under /input, parents
// before their contents. The first component of each path is the name of one input given
// to the job (a file or a folder).
type InputManifest struct {
	Version   int          `json:"version"`
	ChunkSize int64        `json:"chunk_size"`
	Entries   []InputEntry `json:"entries"`
}

// InputEntry is one file, folder or link of an input.
type InputEntry struct {
	// Path is relative to /input, with slashes: "data" or "data/train/0001.bin".
	Path string `json:"path"`
	Type string `json:"type"` // file, dir or link
	// Mode is a file's or folder's permission bits (at most 0777); the provider makes the
	// input readable by the job and never writable.
	Mode uint32 `json:"mode,omitempty"`
	// Size and Chunks: a file's bytes and the SHA-256 (hex) of each InputChunkSize piece of
	// them, the last one shorter.
	Size   int64    `json:"size,omitempty"`
	Chunks []string `json:"chunks,omitempty"`
	// Target is a link's target: relative, and inside the input the link belongs to.
	Target string `json:"target,omitempty"`
}

// InputChunk is one distinct chunk of a manifest.
type InputChunk struct {
	SHA256 string
	Size   int64
}

// InputMsg is a JSON frame of the job-input stream.
type InputMsg struct {
	// open (renter: names Job), ready (provider: send the manifest, a frame of the
	// proposal's manifest_size), missing (provider: which chunks to send), done (provider:
	// the input is complete), error (provider: Reason).
	Type string `json:"type"`
	Job  string `json:"job,omitempty"`
	// Missing is a bitmap over the manifest's distinct chunks in the order they first
	// appear (Chunks): bit i (byte i/8, bit i%8 from the lowest) set asks for chunk i.
	// Held is the bytes of the distinct chunks the provider already holds.
	Missing []byte `json:"missing,omitempty"`
	Held    int64  `json:"held_bytes,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Wants says whether a missing-chunk bitmap asks for chunk i.
func Wants(missing []byte, i int) bool {
	return i/8 < len(missing) && missing[i/8]&(1<<(i%8)) != 0
}

// ParseInputManifest reads a manifest received for ref and applies every rule: the digest
// and size ref gives, strict JSON, version and chunk size, and for each entry a clean
// relative path under a folder listed before it, a type among file, dir and link, the chunk
// count its size needs, a link's target inside its input; in all, ref's bytes.
func ParseInputManifest(raw []byte, ref InputRef) (*InputManifest, error) {
	if int64(len(raw)) != ref.ManifestSize {
		return nil, fmt.Errorf("%w: input manifest of %d bytes, the proposal says %d", ErrInvalid, len(raw), ref.ManifestSize)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != ref.Manifest {
		return nil, fmt.Errorf("%w: input manifest does not match the proposal's digest", ErrInvalid)
	}
	var m InputManifest
	if err := decodeStrict(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: input manifest: %v", ErrMalformed, err)
	}
	if err := m.Check(); err != nil {
		return nil, err
	}
	if total := m.Bytes(); total != ref.Bytes {
		return nil, fmt.Errorf("%w: input manifest holds %d bytes, the proposal says %d", ErrInvalid, total, ref.Bytes)
	}
	return &m, nil
}

// Check applies the manifest's own rules (ParseInputManifest's, less the proposal's).
func (m *InputManifest) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: input manifest: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Version != InputVersion:
		return fmt.Errorf("%w: input manifest version %d (this node understands %d)", ErrUnknownVersion, m.Version, InputVersion)
	case m.ChunkSize != InputChunkSize:
		return bad("chunk_size %d, not %d", m.ChunkSize, InputChunkSize)
	case len(m.Entries) == 0 || len(m.Entries) > MaxInputEntries:
		return bad("%d entries, 1 to %d", len(m.Entries), MaxInputEntries)
	}
	kinds := make(map[string]string, len(m.Entries))
	sizes := map[string]int64{}
	var total int64
	for _, e := range m.Entries {
		if err := checkInputPath(e.Path); err != nil {
			return bad("%v", err)
		}
		if _, dup := kinds[e.Path]; dup {
			return bad("%q listed twice", e.Path)
		}
		if dir := path.Dir(e.Path); dir != "." && kinds[dir] != InputDir {
			return bad("%q: its folder %q is not listed before it as a folder", e.Path, dir)
		}
		kinds[e.Path] = e.Type
		switch e.Type {
		case InputFile:
			if e.Mode > 0o777 || e.Size < 0 || e.Size > MaxInputBytes || e.Target != "" {
				return bad("file %q: mode at most 0777, a size from 0 to %d, no target", e.Path, int64(MaxInputBytes))
			}
			if want := (e.Size + InputChunkSize - 1) / InputChunkSize; int64(len(e.Chunks)) != want {
				return bad("file %q of %d bytes has %d chunks, not %d", e.Path, e.Size, len(e.Chunks), want)
			}
			for i, c := range e.Chunks {
				if len(c) != 64 || strings.Trim(c, "0123456789abcdef") != "" {
					return bad("file %q: chunk %d is not 64 lower-case hex digits", e.Path, i)
				}
				size := min(InputChunkSize, e.Size-int64(i)*InputChunkSize)
				if prev, seen := sizes[c]; seen && prev != size {
					return bad("chunk %s appears with two sizes", c)
				}
				sizes[c] = size
			}
			if total += e.Size; total > MaxInputBytes {
				return bad("more than %d bytes", int64(MaxInputBytes))
			}
		case InputDir:
			if e.Mode > 0o777 || e.Size != 0 || len(e.Chunks) != 0 || e.Target != "" {
				return bad("folder %q: mode at most 0777, no size, chunks or target", e.Path)
			}
		case InputLink:
			if e.Mode != 0 || e.Size != 0 || len(e.Chunks) != 0 {
				return bad("link %q: no mode, size or chunks", e.Path)
			}
			if err := CheckInputLink(e.Path, e.Target); err != nil {
				return bad("%v", err)
			}
		default:
			return bad("%q is of type %q: only file, dir and link are sent", e.Path, e.Type)
		}
	}
	if len(sizes) > MaxInputChunks {
		return bad("%d distinct chunks, at most %d", len(sizes), MaxInputChunks)
	}
	return nil
}

// Bytes is what the manifest's files hold.
func (m *InputManifest) Bytes() int64 {
	var n int64
	for _, e := range m.Entries {
		n += e.Size
	}
	return n
}

// Chunks lists the manifest's distinct chunks in the order they first appear, with their
// sizes: the order of the missing-chunk bitmap and of chunk indexes.
func (m *InputManifest) Chunks() []InputChunk {
	seen := map[string]bool{}
	var out []InputChunk
	for _, e := range m.Entries {
		for i, c := range e.Chunks {
			if !seen[c] {
				seen[c] = true
				out = append(out, InputChunk{SHA256: c, Size: min(InputChunkSize, e.Size-int64(i)*InputChunkSize)})
			}
		}
	}
	return out
}

// checkInputPath accepts a clean relative path of slash-separated names: no empty, "." or
// ".." name, no NUL, valid UTF-8, at most 4096 bytes and 255 bytes a name.
func checkInputPath(p string) error {
	switch {
	case p == "" || len(p) > maxInputPath:
		return fmt.Errorf("path of %d bytes: 1 to %d", len(p), maxInputPath)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q is not UTF-8 text without NUL", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute", p)
	}
	for _, name := range strings.Split(p, "/") {
		if name == "" || name == "." || name == ".." || len(name) > maxInputComponent {
			return fmt.Errorf("path %q: a name is empty, \".\", \"..\" or longer than %d bytes", p, maxInputComponent)
		}
	}
	return nil
}

// CheckInputLink accepts a link at p (a manifest path) whose target is relative and, read
// from the link's folder, stays inside the input the link belongs to (the first name of p).
func CheckInputLink(p, target string) error {
	if target == "" || len(target) > maxInputPath || strings.ContainsRune(target, 0) || !utf8.ValidString(target) {
		return fmt.Errorf("link %q: a target of 1 to %d bytes of UTF-8 text without NUL", p, maxInputPath)
	}
	if strings.HasPrefix(target, "/") {
		return fmt.Errorf("link %q points to the absolute path %q", p, target)
	}
	top, _, _ := strings.Cut(p, "/")
	to := path.Join(path.Dir(p), target)
	if to != top && !strings.HasPrefix(to, top+"/") {
		return fmt.Errorf("link %q points to %q, outside its input %q", p, target, top)
	}
	return nil
}

// InputDeadline is when a provider stops waiting for a leased job's input: the lease's
// issue plus InputGrace and the time the image archive and the input take at InputMinRate,
// and never after the lease's end.
func InputDeadline(l *Lease, p *Proposal) time.Time {
	var bytes int64
	if p.Input != nil {
		bytes = p.Input.Bytes
	}
	d := l.IssuedAt.Add(InputGrace + time.Duration((p.Image.ArchiveSize+bytes)/InputMinRate)*time.Second)
	if d.After(l.EndsAt) {
		return l.EndsAt
	}
	return d
}

// WriteInputChunk writes chunk index as one chunk frame: an unsigned varint length, then
// the index as an unsigned varint and the chunk's bytes. A frame of length 0 ends the
// chunks (WriteInputEnd).
func WriteInputChunk(w io.Writer, index int, data []byte) error {
	var hdr [2 * binary.MaxVarintLen64]byte
	var idx [binary.MaxVarintLen64]byte
	ni := binary.PutUvarint(idx[:], uint64(index))
	n := binary.PutUvarint(hdr[:], uint64(ni+len(data)))
	n += copy(hdr[n:], idx[:ni])
	if _, err := w.Write(hdr[:n]); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// WriteInputEnd writes the frame that ends the chunks.
func WriteInputEnd(w io.Writer) error { return WriteFrame(w, nil) }

// ReadInputChunkHeader reads a chunk frame up to its bytes: the chunk's index and how many
// bytes follow (the caller reads them), or end for the frame that ends the chunks. A frame
// over MaxInputChunkFrame is ErrTooLarge before any of it is read.
func ReadInputChunkHeader(r *bufio.Reader) (index int, size int64, end bool, err error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, 0, false, fmt.Errorf("%w: chunk frame length: %v", ErrMalformed, err)
	}
	if n == 0 {
		return 0, 0, true, nil
	}
	if n > MaxInputChunkFrame {
		return 0, 0, false, fmt.Errorf("%w: chunk frame of %d bytes, at most %d", ErrTooLarge, n, MaxInputChunkFrame)
	}
	counted := &countingByteReader{r: r}
	i, err := binary.ReadUvarint(counted)
	if err != nil {
		return 0, 0, false, fmt.Errorf("%w: chunk index: %v", ErrMalformed, err)
	}
	used := counted.n
	if used > n || i >= MaxInputChunks {
		return 0, 0, false, fmt.Errorf("%w: chunk index %d", ErrMalformed, i)
	}
	return int(i), int64(n - used), false, nil
}

// countingByteReader counts the bytes read through it (a varint may be written in more
// bytes than it needs).
type countingByteReader struct {
	r *bufio.Reader
	n uint64
}

func (c *countingByteReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}
