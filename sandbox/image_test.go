package sandbox

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An image archive, compressed or not, passes; a key file, an empty file or a tar of
// something else does not.
func TestCheckImageArchive(t *testing.T) {
	var img bytes.Buffer
	if _, err := BusyboxImage(&img, "gpunex.test/check:1"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) *os.File {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o600)
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(img.Bytes())
	zw.Close()
	var other bytes.Buffer
	tw := tar.NewWriter(&other)
	tw.WriteHeader(&tar.Header{Name: "notes.txt", Mode: 0o644, Size: 5})
	tw.Write([]byte("hello"))
	tw.Close()
	for _, c := range []struct {
		name string
		r    io.Reader
		ok   bool
	}{
		{"image.tar", write("image.tar", img.Bytes()), true},
		{"image.tar.gz", write("image.tar.gz", gz.Bytes()), true},
		{"image from a pipe", bytes.NewReader(img.Bytes()), true},
		{"id_ed25519", write("id_ed25519", []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n")), false},
		{"empty", write("empty", nil), false},
		{"notes.tar", write("notes.tar", other.Bytes()), false},
	} {
		err := CheckImageArchive(c.r)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "not an image archive")) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
