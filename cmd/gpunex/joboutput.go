package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

// fetchOutput downloads what a job wrote to /output into dir and says how many files it
// wrote.
func fetchOutput(cmd *cobra.Command, cl *api.Client, id, dir string) (int, error) {
	pr, pw := io.Pipe()
	defer pr.Close() // a fetch still writing when untar stops ends
	go func() { pw.CloseWithError(cl.FetchOutput(cmd.Context(), id, pw)) }()
	return untar(pr, dir)
}

// untar extracts regular files and folders into dir, on this machine: every path is
// resolved inside dir (os.Root), so neither "..", an absolute name nor a link already in
// dir leads out of it, and no file already there is written over. Links, devices and
// other entries are skipped.
func untar(r io.Reader, dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return n, fmt.Errorf("archive entry %q leaves the folder", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return n, err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return n, err
			}
			// Never over a file already there: a provider's output (or a job file shared
			// by someone else naming a folder such as ~) cannot replace this machine's files.
			f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
			if errors.Is(err, fs.ErrExist) {
				return n, fmt.Errorf("%s is already in %s: a job's output never replaces a file; fetch it into a new folder", name, dir)
			}
			if err != nil {
				return n, err
			}
			_, err = io.Copy(f, tr)
			f.Close()
			if err != nil {
				return n, err
			}
			n++
		}
	}
}
