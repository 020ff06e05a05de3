package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUntarStaysInFolder: a provider's output archive cannot write outside the folder the
// renter gave, by ".." or through a link already there, nor over a file already in it;
// ordinary files land.
func TestUntarStaysInFolder(t *testing.T) {
	outside := t.TempDir()
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	archive := func(name string) *bytes.Buffer {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
		tw.Write([]byte("hi"))
		tw.Close()
		return &b
	}
	for _, name := range []string{"../escaped", "link/escaped", "/abs/escaped"} {
		if _, err := untar(archive(name), dir); err == nil {
			t.Errorf("entry %q was accepted", name)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Fatalf("the archive wrote outside the folder: %v", entries)
	}
	if n, err := untar(archive("sub/result.txt"), dir); err != nil || n != 1 {
		t.Fatalf("control: an ordinary file: %d %v", n, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "result.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("control: %q %v", b, err)
	}
	// A file already there (a .bashrc, when the folder named is a home) is not replaced.
	os.WriteFile(filepath.Join(dir, ".bashrc"), []byte("mine"), 0o644)
	if _, err := untar(archive(".bashrc"), dir); err == nil || !strings.Contains(err.Error(), "never replaces a file") {
		t.Fatalf("an entry over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".bashrc")); string(b) != "mine" {
		t.Fatalf("the existing file now holds %q", b)
	}
}
