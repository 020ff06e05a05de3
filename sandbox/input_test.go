//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInputReadOnly: a job reads the files and folders of its input at /input, as the job's
// user, and can neither change them nor add to them, even where the host's modes would let
// anyone (the mount is read-only); the host's copy stays as it was.
func TestInputReadOnly(t *testing.T) {
	rt, ref := testRuntime(t)
	s := &suite{rt: rt, image: ref}
	spec := s.spec(t, "sh", "-c", `cat /input/notes.txt; cat /input/data/sub/a.txt; ls /input/data
echo x > /input/notes.txt 2>/dev/null && echo WROTE-FILE
touch /input/new 2>/dev/null && echo ADDED-FILE
mkdir /input/data/d 2>/dev/null && echo ADDED-FOLDER
chmod 777 /input/notes.txt 2>/dev/null && echo CHMODDED
rm -f /input/data/sub/a.txt 2>/dev/null; test -e /input/data/sub/a.txt || echo REMOVED
mount -o remount,rw /input 2>/dev/null && echo REMOUNTED
echo done`)
	in := filepath.Join(t.TempDir(), "input")
	for _, d := range []string{in, filepath.Join(in, "data"), filepath.Join(in, "data", "sub")} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777) // whatever the umask: only the mount keeps the job out
	}
	for f, body := range map[string]string{filepath.Join(in, "notes.txt"): "the notes\n", filepath.Join(in, "data", "sub", "a.txt"): "file a\n"} {
		os.WriteFile(f, []byte(body), 0o666)
		os.Chmod(f, 0o666)
	}
	spec.InputDir = in
	exit, log := s.run(t, rt, spec)
	wantExit(t, exit, 0, ReasonExited, log)
	for _, want := range []string{"the notes", "file a", "sub", "done"} {
		if !strings.Contains(log, want) {
			t.Errorf("the job did not read %q from /input; log:\n%s", want, log)
		}
	}
	for _, bad := range []string{"WROTE-FILE", "ADDED-FILE", "ADDED-FOLDER", "CHMODDED", "REMOVED", "REMOUNTED"} {
		if strings.Contains(log, bad) {
			t.Errorf("the job changed its input: %s; log:\n%s", bad, log)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(in, "notes.txt")); string(b) != "the notes\n" {
		t.Errorf("the host's copy changed: %q", b)
	}
	if st, _ := os.Stat(filepath.Join(in, "notes.txt")); st.Mode().Perm() != 0o666 {
		t.Errorf("the host's copy's mode changed: %v", st.Mode())
	}
}

// TestInputDirChecked: an input folder must be an absolute path to a folder.
func TestInputDirChecked(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o600)
	link := filepath.Join(dir, "l")
	os.Symlink(dir, link)
	for _, bad := range []string{"relative/input", file, link, filepath.Join(dir, "missing")} {
		s := Spec{InputDir: bad}
		if err := s.validateInput(); err == nil {
			t.Errorf("InputDir %q accepted", bad)
		}
	}
	s := Spec{InputDir: dir}
	if err := s.validateInput(); err != nil {
		t.Fatal(err)
	}
}
