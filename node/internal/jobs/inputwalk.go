package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// A job's input as the renter's node reads it (docs/protocols/jobs.md, "Data in"): the
// files and folders given (--input), walked without following links, each file cut in
// protocol.InputChunkSize pieces and hashed, into the manifest whose digest the proposal
// carries. Only files, folders and links that stay inside their folder are sent: a link
// leaving it, a device, a named pipe or a socket refuses the input before anything is sent.
// Memory stays one chunk however large the input: chunks are read again from the files
// when they are sent.

// inputSet is a job's input, hashed: its manifest and where each distinct chunk is read.
type inputSet struct {
	ref      protocol.InputRef
	manifest []byte
	chunks   []chunkSource // the manifest's distinct chunks, in its Chunks order
	stamps   []fileStamp   // each file's size and time when it was hashed
}

// chunkSource is where a chunk's bytes are: size bytes of path from off.
type chunkSource struct {
	path      string
	off, size int64
}

// fileStamp is a file as it was hashed: sent later, it must be the same.
type fileStamp struct {
	path string
	size int64
	mod  time.Time
}

// inputFile is a file of the manifest with the path it is read from.
type inputFile struct {
	entry int // index in the manifest's entries
	path  string
}

// buildInput hashes the inputs at paths (absolute) into an inputSet; progress, when not
// nil, learns the bytes the files hold and then each piece hashed.
func buildInput(paths []string, progress *inputProgress) (*inputSet, error) {
	m := protocol.InputManifest{Version: protocol.InputVersion, ChunkSize: protocol.InputChunkSize}
	var files []inputFile
	names := map[string]string{}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, api.Invalid(fmt.Errorf("input %q: give an absolute path (the node reads it on its own machine)", p))
		}
		name := filepath.Base(p)
		if other, dup := names[name]; dup {
			return nil, api.Invalid(fmt.Errorf("inputs %s and %s would both be /input/%s: rename one", other, p, name))
		}
		names[name] = p
		var err error
		if files, err = walkInput(&m, files, p, name); err != nil {
			return nil, err
		}
	}
	total := int64(0)
	for _, f := range files {
		total += m.Entries[f.entry].Size
	}
	progress.hashing(total)
	set := &inputSet{}
	sources := map[string]chunkSource{}
	buf := make([]byte, protocol.InputChunkSize)
	for _, f := range files {
		st, err := hashFile(&m.Entries[f.entry], f.path, buf, sources, progress)
		if err != nil {
			return nil, err
		}
		set.stamps = append(set.stamps, st)
	}
	if err := m.Check(); err != nil {
		return nil, api.Invalid(fmt.Errorf("input: %w", err))
	}
	for _, c := range m.Chunks() {
		set.chunks = append(set.chunks, sources[c.SHA256])
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(raw) > protocol.MaxInputManifestSize {
		return nil, api.Invalid(fmt.Errorf("input: a manifest of %d bytes, at most %d: pack many small files into an archive", len(raw), protocol.MaxInputManifestSize))
	}
	sum := sha256.Sum256(raw)
	set.manifest = raw
	set.ref = protocol.InputRef{Manifest: hex.EncodeToString(sum[:]), ManifestSize: int64(len(raw)), Bytes: m.Bytes()}
	return set, nil
}

// walkInput adds the input at path, named name under /input, to the manifest: a file, or a
// folder with everything in it. The path itself may be a link (it is followed); links
// inside a folder are sent as links, and only when they stay inside it.
func walkInput(m *protocol.InputManifest, files []inputFile, path, name string) ([]inputFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("input: %w", err))
	}
	if fi.Mode().IsRegular() {
		m.Entries = append(m.Entries, protocol.InputEntry{Path: name, Type: protocol.InputFile, Mode: uint32(fi.Mode().Perm()), Size: fi.Size()})
		return append(files, inputFile{entry: len(m.Entries) - 1, path: path}), nil
	}
	if !fi.IsDir() {
		return nil, api.Invalid(fmt.Errorf("input %s is %s: only files and folders are sent", path, typeText(fi.Mode())))
	}
	root, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("input: %w", err))
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if len(m.Entries) >= protocol.MaxInputEntries {
			return fmt.Errorf("more than %d files, folders and links: pack them into an archive", protocol.MaxInputEntries)
		}
		rel, _ := filepath.Rel(root, p)
		mpath := name
		if rel != "." {
			mpath = name + "/" + filepath.ToSlash(rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			m.Entries = append(m.Entries, protocol.InputEntry{Path: mpath, Type: protocol.InputDir, Mode: uint32(mode.Perm())})
		case mode.IsRegular():
			m.Entries = append(m.Entries, protocol.InputEntry{Path: mpath, Type: protocol.InputFile, Mode: uint32(mode.Perm()), Size: info.Size()})
			files = append(files, inputFile{entry: len(m.Entries) - 1, path: p})
		case mode&fs.ModeSymlink != 0:
			target, err := linkInside(root, p, mpath)
			if err != nil {
				return err
			}
			m.Entries = append(m.Entries, protocol.InputEntry{Path: mpath, Type: protocol.InputLink, Target: target})
		default:
			return fmt.Errorf("%s is %s: only files, folders and links inside the folder are sent", p, typeText(mode))
		}
		return nil
	})
	if err != nil {
		return nil, api.Invalid(fmt.Errorf("input %s: %w", path, err))
	}
	return files, nil
}

// linkInside returns the target to send for the link at p (mpath in the manifest) inside
// the folder root: its target, made relative when absolute, when the link leads to
// something inside root, read both as the file system resolves it and as written.
func linkInside(root, p, mpath string) (string, error) {
	target, err := os.Readlink(p)
	if err != nil {
		return "", err
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("link %s points to nothing (%s): only links inside the folder are sent", p, target)
	}
	if resolved != root && !strings.HasPrefix(resolved, root+string(filepath.Separator)) {
		return "", fmt.Errorf("link %s leaves the folder (it points to %s): only links inside the folder are sent", p, target)
	}
	if filepath.IsAbs(target) {
		if target, err = filepath.Rel(filepath.Dir(p), target); err != nil {
			return "", err
		}
	}
	target = filepath.ToSlash(target)
	if protocol.CheckInputLink(mpath, target) != nil {
		return "", fmt.Errorf("link %s: its target %s leaves the folder as written: make it a plain relative path", p, target)
	}
	return target, nil
}

// hashFile reads a file of the input in chunks, fills its entry's digests, records where
// each chunk not seen before is read (sources), and returns the file's stamp.
func hashFile(e *protocol.InputEntry, path string, buf []byte, sources map[string]chunkSource, progress *inputProgress) (fileStamp, error) {
	f, err := os.Open(path)
	if err != nil {
		return fileStamp{}, api.Invalid(fmt.Errorf("input: %w", err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != e.Size {
		return fileStamp{}, api.Invalid(fmt.Errorf("input %s changed while it was read", path))
	}
	var off int64
	for off < e.Size {
		n, err := io.ReadFull(f, buf[:min(int64(len(buf)), e.Size-off)])
		if err != nil {
			return fileStamp{}, api.Invalid(fmt.Errorf("input %s changed while it was read: %w", path, err))
		}
		sum := sha256.Sum256(buf[:n])
		d := hex.EncodeToString(sum[:])
		e.Chunks = append(e.Chunks, d)
		if _, seen := sources[d]; !seen {
			sources[d] = chunkSource{path: path, off: off, size: int64(n)}
		}
		off += int64(n)
		progress.hashed(int64(n))
	}
	return fileStamp{path: path, size: st.Size(), mod: st.ModTime()}, nil
}

// unchanged says whether the input's files are as they were hashed.
func (s *inputSet) unchanged() error {
	for _, st := range s.stamps {
		fi, err := os.Stat(st.path)
		if err != nil || fi.Size() != st.size || !fi.ModTime().Equal(st.mod) {
			return api.Invalid(fmt.Errorf("input %s changed since it was hashed: run the job again", st.path))
		}
	}
	return nil
}

// typeText names a file type for an error.
func typeText(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a link"
	}
	return "neither a file nor a folder"
}
