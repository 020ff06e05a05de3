//go:build linux

package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// layerTar writes a layer's tar from headers and contents (nil content: zeros of the
// header's size, written in pieces).
func layerTar(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	zeros := make([]byte, 1<<20)
	for _, h := range entries {
		h.ModTime, h.Format = imageEpoch, tar.FormatPAX
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		for left := h.Size; left > 0; {
			n := min(left, int64(len(zeros)))
			if _, err := tw.Write(zeros[:n]); err != nil {
				t.Fatal(err)
			}
			left -= n
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// limitedRuntime is a runtime on the test containerd with image limits.
func limitedRuntime(t *testing.T, o ContainerdOptions) *Containerd {
	t.Helper()
	rt, _ := testRuntime(t)
	return newInstanceWith(t, rt.Namespace(), o)
}

// TestImageBomb: a layer of 64 MiB of zeros is 64 KiB gzipped. With a 16 MiB limit its
// import is refused before anything is unpacked, and nothing of it is kept; the same
// runtime imports the busybox image (the control).
func TestImageBomb(t *testing.T) {
	rt := limitedRuntime(t, ContainerdOptions{MaxUnpackedBytes: 16 << 20})
	bomb := layerTar(t, tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Size: 64 << 20})
	var archive bytes.Buffer
	if _, err := busyboxImageWith(&archive, "gpunex.test/bomb:1", bomb); err != nil {
		t.Fatal(err)
	}
	if archive.Len() > 2<<20 {
		t.Fatalf("the bomb's archive is %d bytes: not a bomb", archive.Len())
	}
	ctx := namespaces.WithNamespace(context.Background(), rt.Namespace())
	_, _, err := rt.ImportImage(ctx, bytes.NewReader(archive.Bytes()))
	if !errors.Is(err, ErrImageTooLarge) || !strings.Contains(err.Error(), "jobs.max_image_unpacked_mb") {
		t.Fatalf("importing a 64 MiB bomb under a 16 MiB limit: %v; want ErrImageTooLarge naming the setting", err)
	}
	imgs, err := rt.Client().ImageService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 { // the test's busybox image only
		t.Errorf("images left after the refused import: %d", len(imgs))
	}
	if ref, _, err := rt.ImportImage(ctx, bytes.NewReader(testArchive)); err != nil || ref == "" {
		t.Fatalf("control: the busybox image under the same limit: %v", err)
	}
}

// TestImageEscapes: a layer whose entries climb out of the image (../), or write through a
// link to a host folder, cannot write on the host: either the import is refused or what
// it writes stays in the image.
func TestImageEscapes(t *testing.T) {
	rt, _ := testRuntime(t)
	marker := fmt.Sprintf("gpunex-escape-%d", os.Getpid())
	hostDir := t.TempDir()
	os.Chmod(hostDir, 0o777)
	layer := layerTar(t,
		tar.Header{Name: "../../../../../../" + filepath.Join(hostDir, marker+"-dotdot"), Typeflag: tar.TypeReg, Size: 5},
		tar.Header{Name: "hostlink", Typeflag: tar.TypeSymlink, Linkname: hostDir},
		tar.Header{Name: "hostlink/" + marker + "-through-link", Typeflag: tar.TypeReg, Size: 5},
		tar.Header{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "/"},
		tar.Header{Name: "abs" + filepath.Join(hostDir, marker+"-abs"), Typeflag: tar.TypeReg, Size: 5},
	)
	var archive bytes.Buffer
	if _, err := busyboxImageWith(&archive, "gpunex.test/escape:1", layer); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref, _, err := rt.ImportImage(ctx, bytes.NewReader(archive.Bytes()))
	t.Logf("import of the escaping layer: %v", err)
	entries, _ := os.ReadDir(hostDir)
	if len(entries) > 0 {
		t.Fatalf("the image wrote on the host: %v in %s", entries, hostDir)
	}
	if err != nil {
		return // refused: nothing written
	}
	t.Cleanup(func() { rt.dropImage(context.Background(), ref) })
	s := &suite{rt: rt, image: ref}
	exit, log := s.run(t, rt, s.spec(t, "sh", "-c", "ls -la / /hostlink/ 2>&1; exit 0"))
	wantExit(t, exit, 0, ReasonExited, log)
	if entries, _ := os.ReadDir(hostDir); len(entries) > 0 {
		t.Fatalf("the job's image wrote on the host: %v; log:\n%s", entries, log)
	}
}

// countingListener counts the connections it accepts (HTTP or not: the resolver speaks
// HTTPS to a registry that is not localhost).
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestPullRefusals: a registry that is not in the allow-list is refused without a
// connection; one in it whose address is private (here loopback) is refused at the dial,
// and reached when private registries are allowed (the control).
func TestPullRefusals(t *testing.T) {
	var hits atomic.Int64
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(countingListener{ln, &hits})
	t.Cleanup(func() { srv.Close() })
	host := ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	strict := limitedRuntime(t, ContainerdOptions{})
	if _, err := strict.PullImage(ctx, host+"/some/image:1"); !errors.Is(err, ErrRegistryRefused) || !strings.Contains(err.Error(), "jobs.registries") {
		t.Fatalf("a registry outside the allow-list: %v; want ErrRegistryRefused naming jobs.registries", err)
	}
	listed := limitedRuntime(t, ContainerdOptions{Registries: []string{host}})
	if _, err := listed.PullImage(ctx, host+"/some/image:1"); !errors.Is(err, ErrRegistryRefused) || !strings.Contains(err.Error(), "not a public address") {
		t.Fatalf("a listed registry at a loopback address: %v; want ErrRegistryRefused", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the private registry was contacted %d times", n)
	}
	private := limitedRuntime(t, ContainerdOptions{Registries: []string{host}, PrivateRegistries: true})
	if _, err := private.PullImage(ctx, host+"/some/image:1"); err == nil {
		t.Fatal("pulling from a registry that answers 404 succeeded")
	}
	if hits.Load() == 0 {
		t.Fatal("control: with private registries allowed the registry should be contacted")
	}
}

// TestPruneImages: past the cache's budget the least recently used images go first, and
// an image a job still runs from stays whatever the budget.
func TestPruneImages(t *testing.T) {
	rt, busybox := testRuntime(t)
	ctx := context.Background()
	imp := func(name string, size int64) string {
		var archive bytes.Buffer
		if _, err := busyboxImageWith(&archive, name, layerTar(t, tar.Header{Name: "data-" + strings.ReplaceAll(name, "/", "-"), Typeflag: tar.TypeReg, Size: size})); err != nil {
			t.Fatal(err)
		}
		ref, _, err := rt.ImportImage(ctx, &archive)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.dropImage(context.Background(), ref) })
		return ref
	}
	a := imp("gpunex.test/a:1", 1<<20)
	s := &suite{rt: rt, image: busybox}
	if exit, log := s.run(t, rt, s.spec(t, "true")); exit.Code != 0 { // busybox is used after a was imported
		t.Fatalf("%+v %s", exit, log)
	}
	b := imp("gpunex.test/b:1", 2<<20)
	running := s.spec(t, "sleep", "30")
	running.Image = b
	if err := rt.Start(ctx, running); err != nil {
		t.Fatal(err)
	}
	defer rt.Remove(ctx, running.ID)
	size := func(ref string) int64 {
		n, err := rt.ImageSize(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	removed, err := rt.PruneImages(ctx, size(busybox)+size(b)+1)
	if err != nil || len(removed) != 1 || removed[0] != a {
		t.Fatalf("pruning to busybox + b: removed %v (%v); want only %s, the least recently used", removed, err, a)
	}
	removed, err = rt.PruneImages(ctx, 0)
	if err != nil || len(removed) != 1 || removed[0] != busybox {
		t.Fatalf("pruning to nothing: removed %v (%v); want %s only (a job runs from %s)", removed, err, busybox, b)
	}
	if _, _, err := rt.ImportImage(ctx, bytes.NewReader(testArchive)); err != nil { // for the cleanup
		t.Fatal(err)
	}
}
