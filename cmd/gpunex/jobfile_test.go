//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestJobFile: a job file's paths (its inputs' too) are taken against its folder, a price may be written as
// a number, and a key the format does not have is an error that names it, before any node
// is asked.
func TestJobFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.toml")
	os.WriteFile(path, []byte(`image_archive = "img/busybox.tar"
command = ["echo", "hi"]
env = { A = "1" }
hours = 2
max_price = 2.5
output = "/tmp/abs"
inputs = ["data", "/srv/config.yaml"]
`), 0o644)
	f, err := readJobFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.ImageArchive != filepath.Join(dir, "img", "busybox.tar") || f.Output != "/tmp/abs" || f.Hours != 2 || f.MaxPrice != "2.5" ||
		!slices.Equal(f.Command, []string{"echo", "hi"}) || f.Env["A"] != "1" || !slices.Equal(f.Inputs, []string{filepath.Join(dir, "data"), "/srv/config.yaml"}) {
		t.Fatalf("job file read as %+v", f)
	}
	os.WriteFile(path, []byte("model = \"H100-80GB\"\nhours = 1\ncolour = \"blue\"\n[env]\nA = \"1\"\n"), 0o644)
	_, errOut, code := gpunex(t, "job", "run", "-f", path, "--home", dir)
	if code != 1 || !strings.Contains(errOut, path+": unknown fields: colour") {
		t.Fatalf("an unknown key: exit %d: %s", code, errOut)
	}
}
