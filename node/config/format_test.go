package config

import (
	"os"
	"strings"
	"testing"
)

// TestHomeFormat: init records the home's format; a home written in a newer format is
// refused with what to do; a home from before the file is read as format 1.
func TestHomeFormat(t *testing.T) {
	h, _, err := Init(t.TempDir(), InitOptions{Role: RoleRenter, Version: "0.1.0-test"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(h.Path(FormatFile)); err != nil || !strings.Contains(string(b), `"format":1`) || !strings.Contains(string(b), `"written_by":"0.1.0-test"`) {
		t.Fatalf("home.json: %s %v", b, err)
	}
	if err := h.CheckFormat(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(h.Path(FormatFile), []byte(`{"format":2,"written_by":"9.0.0"}`), 0o600)
	if err := h.CheckFormat(); err == nil || !strings.Contains(err.Error(), "written by gpunex 9.0.0 in home format 2; this gpunex reads up to format 1: upgrade gpunex") {
		t.Fatalf("a newer home: %v", err)
	}
	os.Remove(h.Path(FormatFile))
	if err := h.CheckFormat(); err != nil {
		t.Fatalf("a home from before home.json: %v", err)
	}
}

// TestMovedSettings: a setting that moved is refused with its replacement's name.
func TestMovedSettings(t *testing.T) {
	MovedSettings["jobs.old_cache_gb"] = struct{ To, Since string }{"jobs.image_cache_gb", "0.2.0"}
	t.Cleanup(func() { delete(MovedSettings, "jobs.old_cache_gb") })
	h, _, err := Init(t.TempDir(), InitOptions{Role: RoleProvider})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(h.Path(ConfigFile))
	os.WriteFile(h.Path(ConfigFile), []byte(strings.Replace(string(b), "[jobs]\n", "[jobs]\nold_cache_gb = 50\n", 1)), 0o644)
	if _, err := h.Config(); err == nil || !strings.Contains(err.Error(), "jobs.old_cache_gb moved to jobs.image_cache_gb in gpunex 0.2.0: rename it") {
		t.Fatalf("a moved setting: %v", err)
	}
}
