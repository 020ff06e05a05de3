package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// importPrefix starts the names of imported images: import.gpunex.local/image@<manifest
// digest>.
const importPrefix = "import.gpunex.local/image@"

// ImportImage loads an image archive (an OCI layout tar, or a docker save tar), checks what
// it unpacks to (checkUnpackedSize), unpacks it for the snapshotter, and returns the name
// jobs use, import.gpunex.local/image@<manifest digest>, and that digest.
//
// An archive brings one image: the manifest for this host's platform that its index
// leads to (through nested indexes too); an archive leading to several is refused. The
// names an archive gives its images (annotations in index.json, a docker archive's tags)
// are never recorded: the import's only image record is the digest name, made here, so
// that one renter's archive cannot rename another renter's image or a registry image in
// the namespace every job shares. Everything else the archive held (other platforms,
// blobs no manifest names) is deleted with the import's lease.
func (c *Containerd) ImportImage(ctx context.Context, tarball io.Reader) (ref, digest string, err error) {
	ctx = c.ns(ctx)
	ls := c.client.LeasesService()
	lease, err := ls.Create(ctx, leases.WithRandomID(), leases.WithExpiration(24*time.Hour))
	if err != nil {
		return "", "", fmt.Errorf("import the image archive: %w", err)
	}
	defer func() {
		// Synchronous: what the archive brought and no image holds is gone on return.
		if err := ls.Delete(context.WithoutCancel(ctx), lease, leases.SynchronousDelete); err != nil {
			c.log.Warn("ending an image import's lease failed: containerd's garbage collector deletes its content later", "err", err)
		}
	}()
	ctx = leases.WithLease(ctx, lease.ID)
	cs := c.client.ContentStore()
	index, err := archive.ImportIndex(ctx, cs, tarball)
	if err != nil {
		return "", "", fmt.Errorf("import the image archive (an OCI layout tar is expected): %w", err)
	}
	target, err := archiveManifest(ctx, cs, index)
	if err != nil {
		return "", "", fmt.Errorf("import the image archive: %w", err)
	}
	if err := c.checkUnpackedSize(ctx, target); err != nil {
		return "", "", fmt.Errorf("import the image archive: %w", err)
	}
	// The manifest's labels name its config and layers, which keeps them (and the
	// snapshots the config names once unpacked) from the garbage collector once the
	// image record holds the manifest.
	if err := images.Walk(ctx, images.SetChildrenLabels(cs, images.ChildrenHandler(cs)), target); err != nil {
		return "", "", fmt.Errorf("import the image archive: %w", err)
	}
	img := images.Image{Name: importPrefix + target.Digest.String(), Target: target}
	if err := client.NewImage(c.client, img).Unpack(ctx, c.opts.Snapshotter); err != nil {
		return "", "", fmt.Errorf("unpack image %s: %w", img.Name, err)
	}
	is := c.client.ImageService()
	if _, err := is.Create(ctx, img); err != nil {
		if !errdefs.IsAlreadyExists(err) {
			return "", "", fmt.Errorf("name image %s: %w", img.Name, err)
		}
		if _, err := is.Update(ctx, img, "target"); err != nil {
			return "", "", fmt.Errorf("name image %s: %w", img.Name, err)
		}
	}
	c.mu.Lock()
	c.unpacked[target.Digest.String()] = true
	c.mu.Unlock()
	return img.Name, target.Digest.String(), nil
}

// Bounds on what archiveManifest reads of an archive's indexes and manifests.
const (
	maxImageMetadataBytes = 4 << 20 // one index, manifest or config
	maxIndexDepth         = 4       // indexes within indexes
	maxIndexEntries       = 1024    // manifests listed by all its indexes
)

// archiveManifest finds the one image an archive's index leads to for this host's
// platform: its manifest's descriptor, with its platform. It fails when there is none, or
// more than one (two different manifests, whatever their names).
func archiveManifest(ctx context.Context, cs content.Provider, index ocispec.Descriptor) (ocispec.Descriptor, error) {
	want := platforms.Default()
	var found []ocispec.Descriptor
	entries := 0
	var walk func(desc ocispec.Descriptor, depth int) error
	walk = func(desc ocispec.Descriptor, depth int) error {
		switch {
		case images.IsIndexType(desc.MediaType):
			if depth > maxIndexDepth {
				return fmt.Errorf("its indexes are nested more than %d deep", maxIndexDepth)
			}
			var ix ocispec.Index
			if err := readImageJSON(ctx, cs, desc, &ix); err != nil {
				return err
			}
			for _, m := range ix.Manifests {
				if entries++; entries > maxIndexEntries {
					return fmt.Errorf("its indexes list more than %d manifests", maxIndexEntries)
				}
				if m.Platform != nil && !want.Match(*m.Platform) {
					continue
				}
				if err := walk(m, depth+1); err != nil {
					return err
				}
			}
		case images.IsManifestType(desc.MediaType):
			if slices.ContainsFunc(found, func(f ocispec.Descriptor) bool { return f.Digest == desc.Digest }) {
				return nil
			}
			p := desc.Platform
			if p == nil {
				var m ocispec.Manifest
				var cfg ocispec.Image
				if err := readImageJSON(ctx, cs, desc, &m); err != nil {
					return err
				}
				if err := readImageJSON(ctx, cs, m.Config, &cfg); err != nil {
					return err
				}
				p = &cfg.Platform
			}
			if want.Match(*p) {
				found = append(found, ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size, Platform: p})
			}
		}
		return nil // anything else (an attestation, an unknown type) is not an image
	}
	if err := walk(index, 0); err != nil {
		return ocispec.Descriptor{}, err
	}
	switch len(found) {
	case 0:
		return ocispec.Descriptor{}, fmt.Errorf("it holds no image for %s", platforms.DefaultString())
	case 1:
		return found[0], nil
	}
	return ocispec.Descriptor{}, fmt.Errorf("it holds %d different images for %s (%s, %s...): send one image per archive", len(found), platforms.DefaultString(), found[0].Digest, found[1].Digest)
}

// readImageJSON reads an index, manifest or config of an archive, at most
// maxImageMetadataBytes.
func readImageJSON(ctx context.Context, cs content.Provider, desc ocispec.Descriptor, v any) error {
	if desc.Size > maxImageMetadataBytes {
		return fmt.Errorf("%s %s is %d bytes, more than an image's metadata takes (%d)", desc.MediaType, desc.Digest, desc.Size, maxImageMetadataBytes)
	}
	b, err := content.ReadBlob(ctx, cs, desc)
	if err != nil {
		return fmt.Errorf("read %s: %w", desc.Digest, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: %w", desc.Digest, err)
	}
	return nil
}

// PullImage fetches an image from one of the allowed registries (Registries, at public
// addresses), at most MaxPullBytes of layers, checks what it unpacks to
// (checkUnpackedSize), and unpacks it.
func (c *Containerd) PullImage(ctx context.Context, ref string) (digest string, err error) {
	ctx = c.ns(ctx)
	name, err := c.checkRegistry(ref)
	if err != nil {
		return "", err
	}
	img, err := c.client.Pull(ctx, name, append(c.pullOpts(), client.WithPullSnapshotter(c.opts.Snapshotter))...)
	if err != nil {
		if errors.Is(err, ErrImageTooLarge) || errors.Is(err, ErrRegistryRefused) {
			return "", fmt.Errorf("pull %s: %w", ref, err)
		}
		return "", fmt.Errorf("pull %s (can this machine reach its registry? otherwise import an archive): %w", ref, err)
	}
	if err := c.checkUnpackedSize(ctx, img.Target()); err != nil {
		c.dropImage(ctx, img.Name())
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	if err := img.Unpack(ctx, c.opts.Snapshotter); err != nil {
		return "", fmt.Errorf("unpack %s: %w", ref, err)
	}
	return img.Target().Digest.String(), nil
}

// ImageSize returns the size of the unpacked layers of an image (the sum of the usage of
// its snapshots).
func (c *Containerd) ImageSize(ctx context.Context, ref string) (int64, error) {
	ctx = c.ns(ctx)
	img, err := c.image(ctx, ref)
	if err != nil {
		return 0, err
	}
	return c.unpackedSize(ctx, img)
}

// unpackedSize is the usage of an image's snapshots; an error when it is not unpacked.
func (c *Containerd) unpackedSize(ctx context.Context, img client.Image) (int64, error) {
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the layers of %s: %w", img.Name(), err)
	}
	sn := c.client.SnapshotService(c.opts.Snapshotter)
	var size int64
	for _, chain := range identity.ChainIDs(diffIDs) {
		u, err := sn.Usage(ctx, chain.String())
		if err != nil {
			return 0, fmt.Errorf("image %s is not unpacked (%w): import or pull it again", img.Name(), err)
		}
		size += u.Size
	}
	return size, nil
}

// contentSize is what an image holds in the content store for this host's platform: its
// index, manifest, config and layers, those present.
func (c *Containerd) contentSize(ctx context.Context, target ocispec.Descriptor) int64 {
	cs := c.client.ContentStore()
	var size int64
	count := images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		info, err := cs.Info(ctx, desc.Digest)
		if err != nil {
			return nil, images.ErrSkipDesc // absent: nothing below it is here either
		}
		size += info.Size
		return images.Children(ctx, cs, desc)
	})
	images.Walk(ctx, images.FilterPlatforms(count, platforms.Default()), target)
	return size
}

// normalizedRef is the full name of an image reference, as PullImage stores it: busybox
// is docker.io/library/busybox:latest. A job naming an image by a short name gets the image
// pulled by that name, never a record someone stored under the short name itself.
func normalizedRef(ref string) (string, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return named.String(), nil
}

// image finds a present image by its normalized name.
func (c *Containerd) image(ctx context.Context, ref string) (client.Image, error) {
	name, err := normalizedRef(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrImageNotFound, err)
	}
	img, err := c.client.GetImage(ctx, name)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s: import or pull it first", ErrImageNotFound, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("look up image %s: %w", ref, err)
	}
	return img, nil
}

// imageConfig returns the config of an image, unpacking it first if it is not.
func (c *Containerd) imageConfig(ctx context.Context, img client.Image) (ocispec.Image, error) {
	key := img.Target().Digest.String()
	c.mu.Lock()
	cfg, ok := c.configs[key]
	unpacked := c.unpacked[key]
	c.mu.Unlock()
	if !unpacked {
		done, err := img.IsUnpacked(ctx, c.opts.Snapshotter)
		if err != nil {
			return cfg, fmt.Errorf("check image %s: %w", img.Name(), err)
		}
		if !done {
			if err := img.Unpack(ctx, c.opts.Snapshotter); err != nil {
				return cfg, fmt.Errorf("unpack image %s: %w", img.Name(), err)
			}
		}
	}
	if !ok {
		var err error
		if cfg, err = img.Spec(ctx); err != nil {
			return cfg, fmt.Errorf("read the config of image %s: %w", img.Name(), err)
		}
	}
	c.mu.Lock()
	c.configs[key], c.unpacked[key] = cfg, true
	c.mu.Unlock()
	return cfg, nil
}
