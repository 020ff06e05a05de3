package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	godigest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ImportImage loads an OCI layout tar, unpacks it for the snapshotter, and returns the
// name jobs use, import.gpunex.local/image@<manifest digest> (whatever name the archive
// gives itself), and its manifest digest. Only the host's platform is imported.
func (c *Containerd) ImportImage(ctx context.Context, archive io.Reader) (ref, digest string, err error) {
	ctx = c.ns(ctx)
	imgs, err := c.client.Import(ctx, archive,
		client.WithAllPlatforms(false),
		client.WithDigestRef(func(d godigest.Digest) string { return "import.gpunex.local/image@" + d.String() }),
		client.WithSkipDigestRef(func(name string) bool { return name != "" }),
	)
	if err != nil {
		return "", "", fmt.Errorf("import the image archive (an OCI layout tar is expected): %w", err)
	}
	// An index may name one manifest per platform: take this host's.
	i := slices.IndexFunc(imgs, func(img images.Image) bool {
		return img.Target.Platform == nil || platforms.Default().Match(*img.Target.Platform)
	})
	if i < 0 {
		return "", "", fmt.Errorf("import the image archive: it holds no image for %s", platforms.DefaultString())
	}
	img := imgs[i]
	if err := c.checkUnpackedSize(ctx, img.Target); err != nil {
		for _, im := range imgs {
			c.dropImage(ctx, im.Name)
		}
		return "", "", fmt.Errorf("import the image archive: %w", err)
	}
	if err := client.NewImage(c.client, img).Unpack(ctx, c.opts.Snapshotter); err != nil {
		return "", "", fmt.Errorf("unpack image %s: %w", img.Name, err)
	}
	// Jobs refer to the image by its manifest digest: an archive's own name is chosen by
	// whoever built it, and another renter's archive with the same name would replace it.
	name := "import.gpunex.local/image@" + img.Target.Digest.String()
	if img.Name != name {
		is := c.client.ImageService()
		if _, err := is.Create(ctx, images.Image{Name: name, Target: img.Target}); err != nil {
			if !errdefs.IsAlreadyExists(err) {
				return "", "", fmt.Errorf("name image %s: %w", name, err)
			}
			if _, err := is.Update(ctx, images.Image{Name: name, Target: img.Target}); err != nil {
				return "", "", fmt.Errorf("name image %s: %w", name, err)
			}
		}
		// The archive's own name is not used: drop it (the content stays, named by digest).
		if err := is.Delete(ctx, img.Name); err != nil && !errdefs.IsNotFound(err) {
			return "", "", fmt.Errorf("drop image name %s: %w", img.Name, err)
		}
	}
	c.mu.Lock()
	c.unpacked[img.Target.Digest.String()] = true
	c.mu.Unlock()
	return name, img.Target.Digest.String(), nil
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
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the layers of %s: %w", ref, err)
	}
	sn := c.client.SnapshotService(c.opts.Snapshotter)
	var size int64
	for _, chain := range identity.ChainIDs(diffIDs) {
		u, err := sn.Usage(ctx, chain.String())
		if err != nil {
			return 0, fmt.Errorf("image %s is not unpacked (%w): import or pull it again", ref, err)
		}
		size += u.Size
	}
	return size, nil
}

// image finds a present image.
func (c *Containerd) image(ctx context.Context, ref string) (client.Image, error) {
	img, err := c.client.GetImage(ctx, ref)
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
