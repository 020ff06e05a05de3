package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Defaults of the image limits in ContainerdOptions.
const (
	DefaultMaxUnpackedBytes = 64 << 30  // 64 GiB of files once unpacked
	DefaultMaxPullBytes     = 32 << 30  // 32 GiB of compressed layers
	DefaultMaxImageEntries  = 1_000_000 // files, folders and links in all layers
)

// DefaultRegistries are the registries jobs may pull from unless the provider says
// otherwise (jobs.registries).
var DefaultRegistries = []string{"docker.io", "ghcr.io", "nvcr.io", "quay.io", "public.ecr.aws", "registry.k8s.io", "gcr.io", "mcr.microsoft.com"}

// ErrImageTooLarge is returned by ImportImage and PullImage for an image over the
// runtime's limits; nothing of it is kept.
var ErrImageTooLarge = errors.New("image too large")

// ErrRegistryRefused is returned by PullImage for a registry the provider does not allow,
// or one at a non-public address.
var ErrRegistryRefused = errors.New("registry refused")

// checkUnpackedSize reads every layer of an image from the content store, decompressing
// it and reading its tar headers without writing anything, and fails with
// ErrImageTooLarge once the layers' files add up to more than MaxUnpackedBytes (their
// declared sizes, which a sparse file or a gzip bomb cannot hide), their decompressed
// streams to more than that, or their entries to more than MaxImageEntries. It runs before
// the image is unpacked, so that a bomb costs one read of it and no disk.
func (c *Containerd) checkUnpackedSize(ctx context.Context, target ocispec.Descriptor) error {
	cs := c.client.ContentStore()
	m, err := images.Manifest(ctx, cs, target, platforms.Default())
	if err != nil {
		return fmt.Errorf("read the image's manifest: %w", err)
	}
	max := c.opts.MaxUnpackedBytes
	var files, entries int64
	var stream int64
	for _, l := range m.Layers {
		ra, err := cs.ReaderAt(ctx, l)
		if err != nil {
			return fmt.Errorf("read layer %s: %w", l.Digest, err)
		}
		err = func() error {
			defer ra.Close()
			dr, err := compression.DecompressStream(io.NewSectionReader(ra, 0, ra.Size()))
			if err != nil {
				return fmt.Errorf("layer %s: %w", l.Digest, err)
			}
			defer dr.Close()
			counted := &countingReader{r: io.LimitReader(dr, max-stream+1)}
			tr := tar.NewReader(counted)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					if stream+counted.n > max {
						return fmt.Errorf("%w: its layers decompress to more than %d MB (jobs.max_image_unpacked_mb)", ErrImageTooLarge, max>>20)
					}
					return fmt.Errorf("layer %s is not a valid tar stream: %w", l.Digest, err)
				}
				entries++
				if entries > c.opts.MaxImageEntries {
					return fmt.Errorf("%w: more than %d files", ErrImageTooLarge, c.opts.MaxImageEntries)
				}
				if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeGNUSparse {
					files += h.Size
				}
				if files > max {
					return fmt.Errorf("%w: its files add up to more than %d MB once unpacked (jobs.max_image_unpacked_mb)", ErrImageTooLarge, max>>20)
				}
			}
			// Past the tar's end, a layer may still carry data: read it too.
			io.Copy(io.Discard, counted)
			stream += counted.n
			if stream > max {
				return fmt.Errorf("%w: its layers decompress to more than %d MB (jobs.max_image_unpacked_mb)", ErrImageTooLarge, max>>20)
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// checkRegistry refuses a reference whose registry is not in the allow-list.
func (c *Containerd) checkRegistry(ref string) (string, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	domain := reference.Domain(named)
	if !slices.Contains(c.opts.Registries, domain) {
		return "", fmt.Errorf("%w: %s is not among the registries this provider pulls from (jobs.registries: %s); send an image archive instead",
			ErrRegistryRefused, domain, strings.Join(c.opts.Registries, ", "))
	}
	return named.String(), nil
}

// publicAddress tells whether a registry at ip may be contacted: not loopback, private
// (RFC 1918, CGNAT, unique local), link-local (cloud metadata), multicast or unspecified.
func publicAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsMulticast() || ip.IsUnspecified() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range []netip.Prefix{
		netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("240.0.0.0/4"),
		netip.MustParsePrefix("192.0.0.0/24"), netip.MustParsePrefix("198.18.0.0/15"),
	} {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// registryResolver is a registry client whose every connection, redirects included, goes
// to a public address: the check runs on the address actually dialled, after name
// resolution, so a name that resolves to the provider's own network is refused too.
func (c *Containerd) registryResolver() *http.Client {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return err
			}
			if !publicAddress(ip) && !c.opts.PrivateRegistries {
				return fmt.Errorf("%w: %s is not a public address", ErrRegistryRefused, ip)
			}
			return nil
		}}
	return &http.Client{Transport: &http.Transport{
		DialContext: dialer.DialContext, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 30 * time.Second,
		ResponseHeaderTimeout: time.Minute, MaxIdleConns: 10, IdleConnTimeout: 90 * time.Second,
	}}
}

// pullOpts are the options of a pull: a resolver limited to public addresses, and a
// size limit on the compressed layers, checked before each is fetched.
func (c *Containerd) pullOpts() []client.RemoteOpt {
	var total atomic.Int64
	max := c.opts.MaxPullBytes
	return []client.RemoteOpt{
		client.WithResolver(docker.NewResolver(docker.ResolverOptions{Hosts: docker.ConfigureDefaultRegistries(docker.WithClient(c.registryResolver()))})),
		client.WithImageHandlerWrapper(func(h images.Handler) images.Handler {
			return images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
				if images.IsLayerType(desc.MediaType) && total.Add(desc.Size) > max {
					return nil, fmt.Errorf("%w: its layers are more than %d MB to download (jobs.max_image_mb)", ErrImageTooLarge, max>>20)
				}
				return h.Handle(ctx, desc)
			})
		}),
	}
}

// dropImage deletes an image refused after its content arrived; containerd's garbage
// collector then deletes the content nothing else uses.
func (c *Containerd) dropImage(ctx context.Context, name string) {
	c.client.ImageService().Delete(context.WithoutCancel(ctx), name, images.SynchronousDelete())
}

// labelLastUsed records, on an image, when a job last started from it (RFC 3339).
const labelLastUsed = "gpunex/last-used"

// markUsed records that a job starts from an image now.
func (c *Containerd) markUsed(ctx context.Context, name string) {
	is := c.client.ImageService()
	img, err := is.Get(ctx, name)
	if err != nil {
		return
	}
	if img.Labels == nil {
		img.Labels = map[string]string{}
	}
	img.Labels[labelLastUsed] = time.Now().UTC().Format(time.RFC3339Nano)
	if _, err := is.Update(ctx, img, "labels."+labelLastUsed); err != nil {
		c.log.Warn("recording an image's use failed", "image", name, "err", err)
	}
}

// PruneImages deletes the least recently used images until the rest take at most
// maxBytes unpacked (each image counted whole: layers two images share count twice), and
// returns their names. Images a container of the namespace still uses are kept. What the
// deleted images alone held (content, snapshots) goes with them.
func (c *Containerd) PruneImages(ctx context.Context, maxBytes int64) ([]string, error) {
	ctx = c.ns(ctx)
	imgs, err := c.client.ImageService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	ctrs, err := c.client.Containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	inUse := map[string]bool{}
	for _, ctr := range ctrs {
		if info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata); err == nil {
			inUse[info.Image] = true
		}
	}
	type held struct {
		name string
		used time.Time
		size int64
	}
	var all []held
	var total int64
	for _, img := range imgs {
		size, err := c.unpackedSize(ctx, client.NewImage(c.client, img))
		if err != nil {
			// Not unpacked (a pull or an unpack that failed half-way): its content takes
			// the disk instead, up to a whole image of layers.
			size = c.contentSize(ctx, img.Target)
		}
		used := img.CreatedAt
		if t, err := time.Parse(time.RFC3339Nano, img.Labels[labelLastUsed]); err == nil {
			used = t
		}
		all = append(all, held{img.Name, used, size})
		total += size
	}
	slices.SortFunc(all, func(a, b held) int { return a.used.Compare(b.used) })
	var removed []string
	for _, h := range all {
		if total <= maxBytes {
			break
		}
		if inUse[h.name] {
			continue
		}
		if err := c.client.ImageService().Delete(ctx, h.name, images.SynchronousDelete()); err != nil {
			return removed, fmt.Errorf("delete image %s: %w", h.name, err)
		}
		c.mu.Lock()
		for k := range c.unpacked {
			delete(c.unpacked, k) // re-checked at the next start
		}
		c.mu.Unlock()
		total -= h.size
		removed = append(removed, h.name)
		c.log.Info("image deleted from the cache", "image", h.name, "unpacked_bytes", h.size, "last_used", h.used)
	}
	return removed, nil
}
