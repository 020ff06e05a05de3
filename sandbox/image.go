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

// CheckImageArchive reads the file names of a tar archive (gzip-compressed or not) and
// says whether it holds an image as ImportImage takes it: an OCI layout (index.json) or a
// `docker save` archive (manifest.json) at its top. A renter's node checks its image
// archive before sending it to a provider, so that a job file naming some other file (a
// key, a document) does not send that file away.
func CheckImageArchive(r io.Reader) error {
	var magic [2]byte
	n, _ := io.ReadFull(r, magic[:])
	if s, ok := r.(io.Seeker); ok {
		// Seekable (a file): back to its start, and tar skips file contents by seeking, so
		// that only the headers are read.
		if _, err := s.Seek(-int64(n), io.SeekCurrent); err != nil {
			return err
		}
	} else {
		r = io.MultiReader(bytes.NewReader(magic[:n]), r)
	}
	if n == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("not an image archive: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return errors.New("not an image archive: a tar from `docker save` or an OCI layout (index.json) is expected, and this one holds neither manifest.json nor index.json")
		}
		if err != nil {
			return fmt.Errorf("not an image archive (a tar from `docker save` or an OCI layout is expected): %w", err)
		}
		switch strings.TrimPrefix(h.Name, "./") {
		case "index.json", "manifest.json":
			return nil
		}
	}
}
