//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/sandbox"
)

// TestOCIImage: the node's OCI image (make image, GPUNEX_IMAGE) imports into containerd and
// runs as the unprivileged gpunex user: it reports its version and protocols, initialises a
// renter's home in its volume, and runs a node whose local API answers.
func TestOCIImage(t *testing.T) {
	img := builtArtifact(t, "GPUNEX_IMAGE", "make image", "a gpunex .oci.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := sandbox.StartContainerd(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	ctr := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", d.Address(), "--namespace", "image-test"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ctr("images", "import", img)
	var ref string
	for _, line := range strings.Split(ctr("images", "list", "-q"), "\n") {
		if strings.HasPrefix(line, "docker.io/gpunex/gpunex:") {
			ref = line
		}
	}
	if ref == "" {
		t.Fatalf("the image has no name docker.io/gpunex/gpunex:…: %s", ctr("images", "list"))
	}

	// The version and the protocols it speaks, as the package's binary prints them.
	var v struct {
		Version string `json:"version"`
		Streams []string
	}
	out := ctr("run", "--rm", ref, "version", "/usr/bin/gpunex", "version", "--json")
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version == "" {
		t.Fatalf("gpunex version --json in the image: %v\n%s", err, out)
	}
	if !strings.Contains(out, "/gpunex/wallet/2.0.0") {
		t.Fatalf("the image's node does not speak the wallet protocol: %s", out)
	}

	// A renter's home in the volume, then its node: files belong to gpunex (65532), and its
	// API answers on the host's loopback.
	vol := t.TempDir()
	if err := os.Chown(vol, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	mount := "type=bind,src=" + vol + ",dst=/var/lib/gpunex,options=rbind:rw"
	ctr("run", "--rm", "--mount", mount, ref, "init", "/usr/bin/gpunex", "init", "--role", "renter")
	home := filepath.Join(vol, "home")
	cfg, err := os.ReadFile(filepath.Join(home, "config.toml"))
	if err != nil {
		t.Fatalf("no home in the volume: %v", err)
	}
	cfg = []byte(strings.NewReplacer("/tcp/4001", "/tcp/0", "/udp/4001", "/udp/0").Replace(string(cfg)))
	os.WriteFile(filepath.Join(home, "config.toml"), cfg, 0o600)
	if fi, err := os.Stat(filepath.Join(home, "config.toml")); err != nil || fileOwner(fi) != 65532 {
		t.Fatalf("the home is not the gpunex user's: %v", err)
	}
	ctr("run", "-d", "--net-host", "--mount", mount, ref, "node", "/usr/bin/gpunex", "node", "run")
	defer func() {
		exec.Command("ctr", "--address", d.Address(), "--namespace", "image-test", "task", "kill", "node").Run()
	}()
	var st api.Status
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, _, code := gpunex(t, "status", "--json", "--home", home)
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.PeerID != "" {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("ctr", "--address", d.Address(), "--namespace", "image-test", "task", "ls").CombinedOutput()
			t.Fatalf("the node in the image does not answer: %s\n%s", out, logs)
		}
	}
	if st.Role != "renter" {
		t.Fatalf("status of the image's node: %+v", st)
	}
}

// fileOwner is the uid owning a file.
func fileOwner(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
