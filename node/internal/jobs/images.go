package jobs

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpunex/gpunex/protocol"
	"github.com/gpunex/gpunex/sandbox"
)

// A job's image on the provider: the archive the renter streams or a registry pull, one
// import per archive at a time, the per-renter cache of imported archives, and the image
// cache kept within jobs.image_cache_gb.

// jobImage is a job's image in the sandbox: its name and the manifest digest its import
// or pull recorded. The job starts by both (sandbox.Spec.ImageDigest), so that a name
// another import moved to other content is not run (sandbox.ErrImageChanged).
type jobImage struct {
	Ref, Digest string
}

// receiveImage takes the job's image: the archive the renter streams (checked against the
// proposal's digest), or a pull of the reference.
func (r *Runner) receiveImage(s network.Stream, in *bufio.Reader, p *protocol.Proposal) (jobImage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if p.Image.Ref != "" {
		s.SetDeadline(time.Now().Add(10 * time.Minute))
		digest, err := r.rt.PullImage(ctx, p.Image.Ref)
		if err != nil {
			return jobImage{}, fmt.Errorf("pull %s: %w", p.Image.Ref, err)
		}
		return jobImage{Ref: p.Image.Ref, Digest: digest}, nil
	}
	// At least 1 MB/s, and never less than the usual step timeout.
	s.SetDeadline(time.Now().Add(jobStepTimeout + time.Duration(p.Image.ArchiveSize>>20)*time.Second))
	dir := r.jobDir(p.Job)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return jobImage{}, err
	}
	path := filepath.Join(dir, "image.tar")
	f, err := os.Create(path)
	if err != nil {
		return jobImage{}, err
	}
	defer os.Remove(path)
	defer f.Close()
	h := newHashingReader(io.LimitReader(in, p.Image.ArchiveSize))
	n, err := io.Copy(f, h)
	if err != nil {
		return jobImage{}, fmt.Errorf("receive image archive: %w", err)
	}
	if n != p.Image.ArchiveSize {
		return jobImage{}, fmt.Errorf("image archive: %d of %d bytes received", n, p.Image.ArchiveSize)
	}
	if got := h.sum(); got != p.Image.ArchiveSHA256 {
		r.metrics.JobProposals.WithLabelValues("image_digest").Inc()
		return jobImage{}, fmt.Errorf("%w: image archive digest sha256:%s does not match the proposal's sha256:%s", protocol.ErrInvalid, got, p.Image.ArchiveSHA256)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return jobImage{}, err
	}
	// One import per archive at a time: proposals racing with the same image wait for the
	// first import and use it.
	lock := r.importLock(p.Image.ArchiveSHA256)
	lock.Lock()
	defer lock.Unlock()
	if img := r.cachedImage(p); img.Ref != "" {
		return img, nil
	}
	ref, digest, err := r.rt.ImportImage(ctx, f)
	if err != nil {
		return jobImage{}, fmt.Errorf("import image: %w", err)
	}
	img := jobImage{Ref: ref, Digest: digest}
	r.mu.Lock()
	r.images[imageKey(p)] = img
	r.mu.Unlock()
	return img, nil
}

// importLock returns the lock that serialises imports of one archive.
func (r *Runner) importLock(sha string) *sync.Mutex {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.imports[sha]
	if l == nil {
		l = &sync.Mutex{}
		r.imports[sha] = l
	}
	return l
}

// imageKey names an archive image in the runner's cache: per renter, so that how fast a
// job starts does not tell a renter which images others sent.
func imageKey(p *protocol.Proposal) string { return p.Renter + "/" + p.Image.ArchiveSHA256 }

// cachedImage returns an archive image this provider imported before for the same renter
// and still holds, or none (an empty Ref).
func (r *Runner) cachedImage(p *protocol.Proposal) jobImage {
	if p.Image.ArchiveSHA256 == "" {
		return jobImage{}
	}
	r.mu.Lock()
	img := r.images[imageKey(p)]
	r.mu.Unlock()
	if img.Ref == "" {
		return jobImage{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.rt.ImageSize(ctx, img.Ref); err != nil {
		return jobImage{}
	}
	return img
}

// imageChanged answers a start refused because the job's image name now holds other
// content than its import or pull recorded (sandbox.ErrImageChanged: another import took
// the name). A registry image is pulled again by its reference and its new digest
// returned; an archive image is forgotten, so that the renter's next proposal sends the
// archive again, and the job fails saying so.
func (r *Runner) imageChanged(p *protocol.Proposal, img jobImage) (string, error) {
	r.log.Warn("a job's image name holds other content than its import or pull recorded", "job", p.Job, "renter", p.Renter, "image", img.Ref, "digest", img.Digest)
	if p.Image.Ref != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		digest, err := r.rt.PullImage(ctx, p.Image.Ref)
		if err != nil {
			return "", fmt.Errorf("pull %s again: %w", p.Image.Ref, err)
		}
		return digest, nil
	}
	r.mu.Lock()
	if r.images[imageKey(p)] == img {
		delete(r.images, imageKey(p))
	}
	r.mu.Unlock()
	return "", fmt.Errorf("%w: another import took its name on this provider; propose the job again to send the archive again", sandbox.ErrImageChanged)
}

// pruneImages keeps the images held for later jobs within jobs.image_cache_gb.
func (r *Runner) pruneImages() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := r.rt.PruneImages(ctx, r.cfg.ImageCacheGB<<30); err != nil {
		r.log.Warn("pruning the image cache failed", "err", err)
	}
}

// hashingReader computes the SHA-256 of what is read through it.
type hashingReader struct {
	r io.Reader
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func newHashingReader(r io.Reader) *hashingReader { return &hashingReader{r: r, h: sha256.New()} }

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}

func (h *hashingReader) sum() string { return hex.EncodeToString(h.h.Sum(nil)) }
