package sandbox

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	_ "crypto/sha256" // registers the digest algorithm
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispecs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// BusyboxPath is the static busybox BusyboxImage packs (Debian's busybox-static).
const BusyboxPath = "/bin/busybox"

// imageEpoch is the fixed modification time of every file in BusyboxImage's archive, so
// that the same busybox always gives the same digest.
var imageEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// BusyboxImage writes an OCI image archive (an OCI layout tar, as ImportImage takes) named
// ref, holding the host's static busybox (/bin/busybox) with a link in /bin for each of
// its applets, an /etc/passwd and /etc/group with root and nobody, and empty /output,
// /scratch and /tmp. Its command is sh. It returns the manifest digest, which is the same
// for the same busybox binary: every time stamp is fixed. Tests and the devnet use it
// because no registry can be reached from them. It needs busybox-static: on Debian,
// apt-get install busybox-static.
func BusyboxImage(w io.Writer, ref string) (manifestDigest string, err error) {
	return busyboxImageWith(w, ref)
}

// PaddedBusyboxImage is BusyboxImage with a layer holding /padding, padBytes of random data
// (which compression cannot shrink): an image of a given size for measuring transfers.
func PaddedBusyboxImage(w io.Writer, ref string, padBytes int) (manifestDigest string, err error) {
	pad := make([]byte, padBytes)
	if _, err := rand.Read(pad); err != nil {
		return "", err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "padding", Mode: 0o644, Size: int64(padBytes), ModTime: imageEpoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	if _, err := tw.Write(pad); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return busyboxImageWith(w, ref, layer.Bytes())
}

// busyboxImageWith is BusyboxImage with more layers on top, each an uncompressed tar
// (tests: bombs, traversal).
func busyboxImageWith(w io.Writer, ref string, extra ...[]byte) (manifestDigest string, err error) {
	if ref == "" {
		return "", errors.New("BusyboxImage: the image reference is empty")
	}
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return "", fmt.Errorf("read %s (%w): install it with apt-get install busybox-static", BusyboxPath, err)
	}
	applets, err := busyboxApplets()
	if err != nil {
		return "", err
	}
	raw, err := busyboxLayer(bin, applets)
	if err != nil {
		return "", err
	}
	var blobs [][]byte
	var layerDescs []ocispec.Descriptor
	var diffIDs []digest.Digest
	for _, r := range append([][]byte{raw}, extra...) {
		layer, err := gzipLayer(r)
		if err != nil {
			return "", err
		}
		blobs = append(blobs, layer)
		layerDescs = append(layerDescs, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digestOf(layer), Size: int64(len(layer))})
		diffIDs = append(diffIDs, digestOf(r))
	}

	created := imageEpoch
	config, err := json.Marshal(ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"},
		Config: ocispec.ImageConfig{
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd:        []string{"sh"},
			WorkingDir: "/",
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: diffIDs},
	})
	if err != nil {
		return "", err
	}
	configDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digestOf(config), Size: int64(len(config))}

	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned: ocispecs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    layerDescs,
	})
	if err != nil {
		return "", err
	}
	manifestDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digestOf(manifest), Size: int64(len(manifest))}

	index, err := json.Marshal(ocispec.Index{
		Versioned: ocispecs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{{
			MediaType: manifestDesc.MediaType, Digest: manifestDesc.Digest, Size: manifestDesc.Size,
			Platform: &ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"},
			Annotations: map[string]string{
				ocispec.AnnotationRefName:  ref,
				"io.containerd.image.name": ref,
			},
		}},
	})
	if err != nil {
		return "", err
	}

	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: imageEpoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: imageEpoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return "", err
		}
	}
	files := []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, []byte(`{"imageLayoutVersion":"` + ocispec.ImageLayoutVersion + `"}`)},
		{ocispec.ImageIndexFile, index},
		{blobPath(configDesc.Digest), config},
		{blobPath(manifestDesc.Digest), manifest},
	}
	for i, b := range blobs {
		files = append(files, struct {
			name string
			data []byte
		}{blobPath(layerDescs[i].Digest), b})
	}
	for _, f := range files {
		if err := add(f.name, f.data); err != nil {
			return "", fmt.Errorf("write the image archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("write the image archive: %w", err)
	}
	return manifestDesc.Digest.String(), nil
}

// busyboxApplets lists the applets of the host's busybox (busybox --list), sorted.
func busyboxApplets() ([]string, error) {
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list the applets of %s (%w): install busybox-static", BusyboxPath, err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	slices.Sort(applets)
	return slices.Compact(applets), nil
}

// busyboxLayer builds the layer's tar.
func busyboxLayer(bin []byte, applets []string) (_ []byte, err error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	hdr := func(h *tar.Header) {
		h.ModTime, h.Format = imageEpoch, tar.FormatPAX
		if err == nil {
			err = tw.WriteHeader(h)
		}
	}
	dir := func(name string, mode int64) { hdr(&tar.Header{Name: name, Mode: mode, Typeflag: tar.TypeDir}) }
	file := func(name string, mode int64, data []byte) {
		hdr(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg})
		if err == nil {
			_, err = tw.Write(data)
		}
	}
	link := func(name, target string) {
		hdr(&tar.Header{Name: name, Linkname: target, Mode: 0o777, Typeflag: tar.TypeSymlink})
	}
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "root/", "sys/", "usr/", "usr/bin/", "output/"} {
		mode := int64(0o755)
		if d == "root/" {
			mode = 0o700
		}
		dir(d, mode)
	}
	dir("tmp/", 0o1777)
	dir("scratch/", 0o1777)
	file("bin/busybox", 0o755, bin)
	for _, a := range applets {
		link("bin/"+a, "busybox")
	}
	link("usr/bin/env", "/bin/busybox")
	file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("build the busybox layer: %w", err)
	}
	return raw.Bytes(), nil
}

// gzipLayer compresses a layer's tar.
func gzipLayer(raw []byte) ([]byte, error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

func digestOf(b []byte) digest.Digest { return digest.FromBytes(b) }

func blobPath(d digest.Digest) string { return "blobs/" + d.Algorithm().String() + "/" + d.Encoded() }

// CheckImageArchive reads a tar archive and says whether it is an image as ImportImage
// takes it, and nothing else: an OCI layout (oci-layout and an index.json naming
// manifests) or a `docker save` archive (a manifest.json naming a config and layers), in
// which every entry is one such archives hold (blobs/ALG/HEX, ID/layer.tar, ID.json,
// repositories). A renter's node checks its image archive before sending it to a provider,
// so that a job file naming some other file (a key, a backup that happens to hold a
// manifest.json) does not send that file away. Compressed archives are refused: the
// provider imports a plain tar.
func CheckImageArchive(r io.Reader) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("not an image archive (a plain tar from `docker save` or an OCI layout is expected): "+format, args...)
	}
	var magic [4]byte
	n, _ := io.ReadFull(r, magic[:])
	if s, ok := r.(io.Seeker); ok {
		// Seekable (a file): back to its start; tar then skips file contents by seeking.
		if _, err := s.Seek(-int64(n), io.SeekCurrent); err != nil {
			return err
		}
	} else {
		r = io.MultiReader(bytes.NewReader(magic[:n]), r)
	}
	switch {
	case n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		return fail("it is gzip-compressed; decompress it first")
	case n == 4 && magic == [4]byte{0x28, 0xb5, 0x2f, 0xfd}:
		return fail("it is zstd-compressed; decompress it first")
	}
	var layout, index, manifest bool
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail("%v", err)
		}
		name := strings.TrimSuffix(path.Clean(strings.TrimPrefix(h.Name, "./")), "/")
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeSymlink {
			return fail("%q is not a file or a folder", h.Name)
		}
		switch {
		case name == "oci-layout":
			layout = true
		case name == "index.json":
			var ix struct {
				SchemaVersion int               `json:"schemaVersion"`
				Manifests     []json.RawMessage `json:"manifests"`
			}
			if json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&ix) != nil || ix.SchemaVersion != 2 || len(ix.Manifests) == 0 {
				return fail("its index.json names no manifest")
			}
			index = true
		case name == "manifest.json":
			var ms []struct {
				Config string
				Layers []string
			}
			if json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&ms) != nil || len(ms) == 0 || ms[0].Config == "" {
				return fail("its manifest.json is not a docker image manifest")
			}
			manifest = true
		case !imageEntry.MatchString(name):
			return fail("it holds %q, which no image archive holds", h.Name)
		}
	}
	if !(layout && index) && !manifest {
		return fail("it holds neither an OCI layout (oci-layout and index.json) nor a docker manifest.json")
	}
	return nil
}

// imageEntry matches the other entries an image archive holds: OCI blobs, and docker's
// layer folders, configs and repositories file.
var imageEntry = regexp.MustCompile(`^(\.|repositories|blobs(/sha(256|384|512)(/[0-9a-f]{64,128})?)?|[0-9a-f]{64}(\.json)?|[0-9a-f]{64}/(layer\.tar|json|VERSION))$`)
