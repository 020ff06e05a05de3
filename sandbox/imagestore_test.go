//go:build linux

package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// readArchive returns the entries of an image archive, by name, in their order.
func readArchive(t *testing.T, archive []byte) (names []string, data map[string][]byte) {
	t.Helper()
	data = map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, data
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, seen := data[h.Name]; !seen {
			names = append(names, h.Name)
		}
		data[h.Name] = b
	}
}

// mergeArchives writes one OCI layout holding the blobs of every archive given and the
// index edit returns, from the index of the first.
func mergeArchives(t *testing.T, edit func(ix *ocispec.Index, others []ocispec.Index), archives ...[]byte) []byte {
	t.Helper()
	var names []string
	data := map[string][]byte{}
	var first ocispec.Index
	var others []ocispec.Index
	for i, a := range archives {
		n, d := readArchive(t, a)
		var ix ocispec.Index
		if err := json.Unmarshal(d[ocispec.ImageIndexFile], &ix); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ix
		} else {
			others = append(others, ix)
		}
		for _, name := range n {
			if _, seen := data[name]; !seen {
				names = append(names, name)
			}
			data[name] = d[name]
		}
	}
	edit(&first, others)
	ix, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	data[ocispec.ImageIndexFile] = ix
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, name := range names {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data[name])), ModTime: imageEpoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if strings.HasSuffix(name, "/") {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// squatArchive is an attacker's archive: its own image (busybox with a /padding file),
// listed again in index.json, without a platform, once under each name given (the
// annotation containerd's importer names image records by).
func squatArchive(t *testing.T, names ...string) (archive []byte, digest string) {
	t.Helper()
	var own bytes.Buffer
	digest, err := PaddedBusyboxImage(&own, "attacker.test/own:1", 4096)
	if err != nil {
		t.Fatal(err)
	}
	archive = mergeArchives(t, func(ix *ocispec.Index, _ []ocispec.Index) {
		m := ix.Manifests[0]
		for _, name := range names {
			ix.Manifests = append(ix.Manifests, ocispec.Descriptor{MediaType: m.MediaType, Digest: m.Digest, Size: m.Size,
				Annotations: map[string]string{images.AnnotationImageName: name, ocispec.AnnotationRefName: name}})
		}
	}, own.Bytes())
	return archive, digest
}

// TestImageArchiveCannotRenameImages: a renter's archive naming other images (another
// renter's cached archive image, a registry image by its full and its short name) names
// nothing but its own image: the other names keep pointing where they did, and a job
// started by the victim's reference runs the victim's image. A job whose image's name was
// moved to other content anyway is refused before its container exists.
func TestImageArchiveCannotRenameImages(t *testing.T) {
	rt, victimRef := testRuntime(t)
	ctx := context.Background()
	nctx := rt.ns(ctx)
	archive, attacker := squatArchive(t, victimRef, "docker.io/library/busybox:latest", "busybox:latest")
	ref, digest, err := rt.ImportImage(ctx, bytes.NewReader(archive))
	if err != nil {
		t.Fatalf("importing the attacker's archive: %v", err)
	}
	if digest != attacker || ref != "import.gpunex.local/image@"+attacker {
		t.Fatalf("ImportImage = %s %s, want the attacker's own image %s", ref, digest, attacker)
	}
	t.Cleanup(func() { rt.dropImage(context.Background(), ref) })
	if img, err := rt.Client().GetImage(nctx, victimRef); err != nil || img.Target().Digest.String() != testDigest {
		if err == nil {
			t.Fatalf("the victim's image %s now resolves to %s, want %s", victimRef, img.Target().Digest, testDigest)
		}
		t.Fatal(err)
	}
	for _, name := range []string{"docker.io/library/busybox:latest", "busybox:latest"} {
		if img, err := rt.Client().GetImage(nctx, name); err == nil {
			t.Errorf("the archive named %s (%s)", name, img.Target().Digest)
		} else if !errdefs.IsNotFound(err) {
			t.Error(err)
		}
	}
	all, err := rt.Client().ImageService().List(nctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Errorf("%d image records after two imports, want 2 (one per archive): %v", len(all), all)
	}
	s := &suite{rt: rt, image: victimRef}
	victim := s.spec(t, "sh", "-c", "ls /padding 2>/dev/null && echo ATTACKER-IMAGE; echo DONE")
	victim.ImageDigest = testDigest
	exit, log := s.run(t, rt, victim)
	wantExit(t, exit, 0, ReasonExited, log)
	if strings.Contains(log, "ATTACKER-IMAGE") || !strings.Contains(log, "DONE") {
		t.Fatalf("the victim's job ran the attacker's image; log:\n%s", log)
	}

	// The name moved to the attacker's manifest (by whatever means): the start is refused.
	is := rt.Client().ImageService()
	moved, err := is.Get(nctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	moved.Name = "gpunex.test/moved:1"
	if _, err := is.Create(nctx, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.dropImage(context.Background(), moved.Name) })
	job := s.spec(t, "true")
	job.Image, job.ImageDigest = moved.Name, testDigest
	if err := rt.Start(ctx, job); !errors.Is(err, ErrImageChanged) {
		rt.Remove(ctx, job.ID)
		t.Fatalf("a job whose image name points at other content: %v, want ErrImageChanged", err)
	}
	if left := leftovers(t, rt, job.ID); len(left) > 0 {
		t.Fatalf("the refused start left %v", left)
	}
	job.ImageDigest = attacker // the control: the digest the name does hold
	if exit, log := s.run(t, rt, job); exit.Code != 0 {
		t.Fatalf("control: the job with the name's own digest: %+v; log:\n%s", exit, log)
	}
}

// TestImageArchiveOneImage: an archive holding two different images for this host's
// platform is refused (which one would a job run?), and nothing of it is kept; the same
// images one per archive import (the control).
func TestImageArchiveOneImage(t *testing.T) {
	rt, _ := testRuntime(t)
	ctx := context.Background()
	var a, b bytes.Buffer
	if _, err := PaddedBusyboxImage(&a, "gpunex.test/a:1", 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := PaddedBusyboxImage(&b, "gpunex.test/b:1", 4096); err != nil {
		t.Fatal(err)
	}
	two := mergeArchives(t, func(ix *ocispec.Index, others []ocispec.Index) {
		ix.Manifests = append(ix.Manifests, others[0].Manifests...)
	}, a.Bytes(), b.Bytes())
	if _, _, err := rt.ImportImage(ctx, bytes.NewReader(two)); err == nil || !strings.Contains(err.Error(), "one image") {
		t.Fatalf("an archive of two images for this platform: %v; want a refusal asking for one image", err)
	}
	all, err := rt.Client().ImageService().List(rt.ns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Errorf("%d image records after a refused import, want the test's busybox only: %v", len(all), all)
	}
	for _, archive := range [][]byte{a.Bytes(), b.Bytes()} {
		ref, _, err := rt.ImportImage(ctx, bytes.NewReader(archive))
		if err != nil {
			t.Fatalf("control: one image per archive: %v", err)
		}
		t.Cleanup(func() { rt.dropImage(context.Background(), ref) })
	}
}

// TestRegistryReferencesNormalized: a job naming a registry image by its short name
// (busybox) runs the image a pull stored under its full name (docker.io/library/busybox:latest).
func TestRegistryReferencesNormalized(t *testing.T) {
	rt, ref := testRuntime(t)
	ctx := context.Background()
	nctx := rt.ns(ctx)
	img, err := rt.Client().ImageService().Get(nctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	img.Name = "docker.io/library/busybox:latest" // as PullImage("busybox") names it
	if _, err := rt.Client().ImageService().Create(nctx, img); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.dropImage(context.Background(), img.Name) })
	s := &suite{rt: rt, image: "busybox"}
	job := s.spec(t, "true")
	job.ImageDigest = testDigest
	if exit, log := s.run(t, rt, job); exit.Code != 0 {
		t.Fatalf("a job by the short name: %+v; log:\n%s", exit, log)
	}
	if _, err := rt.ImageSize(ctx, "busybox:latest"); err != nil {
		t.Errorf("ImageSize by the short name: %v", err)
	}
}

// TestPruneImagesCountsPackedImages: an image whose layers were never unpacked still
// takes disk (its content): the cache's budget counts it, and prunes it.
func TestPruneImagesCountsPackedImages(t *testing.T) {
	rt, busybox := testRuntime(t)
	ctx := context.Background()
	var archive bytes.Buffer
	if _, err := PaddedBusyboxImage(&archive, "gpunex.test/packed:1", 4<<20); err != nil {
		t.Fatal(err)
	}
	// Imported by containerd alone: content, an image record, no snapshot.
	imgs, err := rt.Client().Import(rt.ns(ctx), &archive)
	if err != nil || len(imgs) == 0 {
		t.Fatalf("import %v: %v", imgs, err)
	}
	t.Cleanup(func() {
		for _, img := range imgs {
			rt.dropImage(context.Background(), img.Name)
		}
	})
	s := &suite{rt: rt, image: busybox}
	if exit, log := s.run(t, rt, s.spec(t, "true")); exit.Code != 0 { // busybox is used after the import
		t.Fatalf("%+v %s", exit, log)
	}
	size, err := rt.ImageSize(ctx, busybox)
	if err != nil {
		t.Fatal(err)
	}
	removed, err := rt.PruneImages(ctx, size+1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != len(imgs) || removed[0] != imgs[0].Name {
		t.Fatalf("pruning to busybox + 1 MiB removed %v; want the 4 MiB image never unpacked (%s)", removed, imgs[0].Name)
	}
}
