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

// An image archive (an OCI layout, or a docker save's manifest and layers) passes; a key
// file, an empty file, a compressed archive, a tar of something else, or a backup that
// happens to hold a manifest.json beside a key does not.
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
	tarOf := func(files ...string) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for i := 0; i < len(files); i += 2 {
			tw.WriteHeader(&tar.Header{Name: files[i], Mode: 0o644, Size: int64(len(files[i+1]))})
			tw.Write([]byte(files[i+1]))
		}
		tw.Close()
		return b.Bytes()
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(img.Bytes())
	zw.Close()
	id := strings.Repeat("ab", 32)
	docker := tarOf("manifest.json", `[{"Config":"`+id+`.json","RepoTags":["x:1"],"Layers":["`+id+`/layer.tar"]}]`,
		id+".json", "{}", id+"/layer.tar", "", id+"/VERSION", "1.0", "repositories", "{}")
	for _, c := range []struct {
		name string
		r    io.Reader
		ok   bool
	}{
		{"image.tar", write("image.tar", img.Bytes()), true},
		{"image from a pipe", io.MultiReader(bytes.NewReader(img.Bytes())), true},
		{"docker save", write("docker.tar", docker), true},
		{"image.tar.gz", write("image.tar.gz", gz.Bytes()), false},
		{"id_ed25519", write("id_ed25519", []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n")), false},
		{"key from a pipe", io.MultiReader(strings.NewReader("-----BEGIN OPENSSH PRIVATE KEY-----\n")), false},
		{"empty", write("empty", nil), false},
		{"notes.tar", write("notes.tar", tarOf("notes.txt", "hello")), false},
		{"backup.tar", write("backup.tar", tarOf("home/me/.ssh/id_ed25519", "secret", "./manifest.json", `[{"Config":"a","Layers":[]}]`)), false},
		{"extension.tar", write("extension.tar", tarOf("manifest.json", `{"name":"an extension","version":"1"}`)), false},
		{"index without layout", write("site.tar", tarOf("index.json", `{"schemaVersion":2,"manifests":[{}]}`)), false},
	} {
		err := CheckImageArchive(c.r)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "not an image archive")) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
