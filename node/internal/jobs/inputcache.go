package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/protocol"
)

// The provider's cache of input chunks: one file per chunk, named by its SHA-256, in a
// folder per renter (dir/<renter>/<sha256>), so that a renter's second job with the same
// data sends nothing again and an interrupted upload resumes, while no renter learns what
// others sent (how fast an upload goes says nothing of other renters' data). It is kept
// within a quota (jobs.input_cache_gb), the least recently used chunks deleted first, and
// every chunk unused for jobs.retention is deleted. The chunks of an input being received
// or assembled are pinned: never evicted, so the quota may be passed by the inputs in
// flight (each within jobs.max_input_mb). A chunk's last use is its file's modification
// time, so that the order survives a restart.

// errChunkDigest: a chunk's bytes do not have the digest they were sent for.
var errChunkDigest = errors.New("chunk digest mismatch")

type inputCache struct {
	dir   string
	quota int64
	clock clock.Clock
	log   *slog.Logger

	mu     sync.Mutex
	loaded bool
	chunks map[string]*cachedChunk // renter + "/" + sha256
	pins   map[string]int          // same keys: inputs in flight holding the chunk
	total  int64
}

type cachedChunk struct {
	key  string
	size int64
	used time.Time
}

func newInputCache(dir string, quota int64, clk clock.Clock, log *slog.Logger) *inputCache {
	return &inputCache{dir: dir, quota: quota, clock: clk, log: log, chunks: map[string]*cachedChunk{}, pins: map[string]int{}}
}

func chunkKey(renter, sha string) string { return renter + "/" + sha }

func (c *inputCache) path(key string) string { return filepath.Join(c.dir, filepath.FromSlash(key)) }

// load reads what the cache holds from its folder, once (c.mu held). Chunk files left
// half-written by a crash are deleted.
func (c *inputCache) load() {
	if c.loaded {
		return
	}
	c.loaded = true
	renters, _ := os.ReadDir(c.dir)
	for _, rd := range renters {
		if !rd.IsDir() {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(c.dir, rd.Name()))
		for _, f := range files {
			key := chunkKey(rd.Name(), f.Name())
			info, err := f.Info()
			if err != nil || !info.Mode().IsRegular() || len(f.Name()) != 64 {
				os.Remove(c.path(key)) // a temporary file of an interrupted write
				continue
			}
			c.chunks[key] = &cachedChunk{key: key, size: info.Size(), used: info.ModTime()}
			c.total += info.Size()
		}
	}
}

// pin marks the chunks of an input in flight for renter: they are not evicted until unpin
// is called. It returns which are missing (a bitmap over chunks, as InputMsg carries it)
// and the bytes of those held, whose last use becomes now.
func (c *inputCache) pin(renter string, chunks []protocol.InputChunk) (missing []byte, held int64, unpin func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	now := c.clock.Now()
	for i, ch := range chunks {
		key := chunkKey(renter, ch.SHA256)
		c.pins[key]++
		if got := c.chunks[key]; got != nil && got.size == ch.Size {
			held += ch.Size
			got.used = now
			os.Chtimes(c.path(key), now, now)
			continue
		}
		if missing == nil {
			missing = make([]byte, (len(chunks)+7)/8)
		}
		missing[i/8] |= 1 << (i % 8)
	}
	var once sync.Once
	return missing, held, func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, ch := range chunks {
				key := chunkKey(renter, ch.SHA256)
				if c.pins[key]--; c.pins[key] <= 0 {
					delete(c.pins, key)
				}
			}
		})
	}
}

// makeRoom deletes the least recently used chunks no input in flight holds until need more
// bytes fit within the quota, or nothing more can go.
func (c *inputCache) makeRoom(need int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	c.evictLocked(c.quota-need, time.Time{})
}

// expire deletes the chunks no input in flight holds that were last used before cutoff,
// then the least recently used ones beyond the quota.
func (c *inputCache) expire(cutoff time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	c.evictLocked(c.quota, cutoff)
}

// evictLocked deletes unpinned chunks used before cutoff, then unpinned chunks oldest first
// until the cache holds at most limit bytes (c.mu held).
func (c *inputCache) evictLocked(limit int64, cutoff time.Time) {
	if c.total <= limit && cutoff.IsZero() {
		return
	}
	all := make([]*cachedChunk, 0, len(c.chunks))
	for _, ch := range c.chunks {
		if c.pins[ch.key] == 0 {
			all = append(all, ch)
		}
	}
	slices.SortFunc(all, func(a, b *cachedChunk) int { return a.used.Compare(b.used) })
	removed := 0
	for _, ch := range all {
		if !ch.used.Before(cutoff) && c.total <= limit {
			break
		}
		if err := os.Remove(c.path(ch.key)); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.log.Warn("deleting an input chunk failed", "chunk", ch.key, "err", err)
			continue
		}
		delete(c.chunks, ch.key)
		c.total -= ch.size
		removed++
	}
	if removed > 0 {
		c.log.Info("input chunks deleted", "chunks", removed, "cache_bytes", c.total, "quota_bytes", c.quota)
	}
	if !cutoff.IsZero() { // the hourly sweep: folders of renters left without chunks go too
		if entries, err := os.ReadDir(c.dir); err == nil {
			for _, e := range entries {
				os.Remove(filepath.Join(c.dir, e.Name())) // fails unless empty
			}
		}
	}
}

// store writes a chunk of renter's arriving from r (exactly size bytes), checked against
// its digest: a chunk whose bytes do not match is errChunkDigest and nothing is kept. It
// returns how many bytes it read from r.
func (c *inputCache) store(renter string, ch protocol.InputChunk, r io.Reader) (int64, error) {
	key := chunkKey(renter, ch.SHA256)
	f, err := c.tempFile(filepath.Dir(c.path(key)))
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name()) // after a rename, nothing
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, ch.Size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != ch.Size {
		err = fmt.Errorf("%w: chunk cut short (%d of %d bytes)", io.ErrUnexpectedEOF, n, ch.Size)
	}
	if err != nil {
		return n, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != ch.SHA256 {
		return n, fmt.Errorf("%w: the bytes sent for chunk %s have digest %s", errChunkDigest, ch.SHA256, got)
	}
	now := c.clock.Now()
	os.Chtimes(f.Name(), now, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.Rename(f.Name(), c.path(key)); err != nil {
		return n, err
	}
	if old := c.chunks[key]; old != nil {
		c.total -= old.size // the same bytes, stored twice by two inputs racing
	}
	c.chunks[key] = &cachedChunk{key: key, size: ch.Size, used: now}
	c.total += ch.Size
	return n, nil
}

// tempFile creates a file to write a chunk in, in the renter's folder (made if need be:
// under c.mu, so that the hourly sweep does not take it away meanwhile).
func (c *inputCache) tempFile(dir string) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load() // before a chunk of its own is counted
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return os.CreateTemp(dir, "part-")
}

// open opens a held chunk of renter's for reading.
func (c *inputCache) open(renter, sha string) (*os.File, error) {
	return os.Open(c.path(chunkKey(renter, sha)))
}

// held says whether renter's chunk is in the cache.
func (c *inputCache) held(renter string, ch protocol.InputChunk) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	got := c.chunks[chunkKey(renter, ch.SHA256)]
	return got != nil && got.size == ch.Size
}

// bytes is what the cache holds, and what of it renter's chunks.
func (c *inputCache) bytes(renter string) (total, ofRenter int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	for key, ch := range c.chunks {
		if strings.HasPrefix(key, renter+"/") {
			ofRenter += ch.size
		}
	}
	return c.total, ofRenter
}
