package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpunex/gpunex/node/api"
)

// A job's input on the command line (gpunex job run --input): the paths made absolute (the
// node reads them on its own machine), and the upload's progress while the job is
// proposed: one updating line on a terminal, a line every few seconds otherwise.

// absPaths makes paths absolute against the working folder.
func absPaths(paths []string) ([]string, error) {
	out := make([]string, len(paths))
	for i, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		out[i] = abs
	}
	return out, nil
}

// progressName is a random name under which the node shows a request's upload.
func progressName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// followUpload shows, on w, the progress of the upload named name as the node reports it
// every half second, until stop is called; stop prints its last state.
func followUpload(ctx context.Context, cl *api.Client, name string, w io.Writer, tty bool) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var last api.InputProgress
	var printed time.Time
	show := func(final bool) {
		us, err := cl.Uploads(ctx)
		if err == nil {
			for _, u := range us {
				if u.Progress == name {
					last = u
				}
			}
		}
		if last.Phase == "" {
			return
		}
		line := uploadLine(last)
		switch {
		case tty && final:
			fmt.Fprintf(w, "\r\033[K%s\n", line)
		case tty:
			fmt.Fprintf(w, "\r\033[K%s", line)
		case final || time.Since(printed) >= 5*time.Second:
			fmt.Fprintln(w, line)
			printed = time.Now()
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				show(false)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		ctx = context.Background()
		show(true)
	}
}

// uploadLine says where an input stands: bytes, rate, time left.
func uploadLine(u api.InputProgress) string {
	switch u.Phase {
	case "hashing":
		return fmt.Sprintf("input: hashing %s of %s", api.BytesText(u.Hashed), api.BytesText(u.Bytes))
	case "uploading":
		toSend := u.Bytes - u.Held
		s := fmt.Sprintf("input: %s of %s sent", api.BytesText(u.Sent), api.BytesText(toSend))
		if u.Held > 0 {
			s += fmt.Sprintf(" (%s held by the provider already)", api.BytesText(u.Held))
		}
		if u.Rate > 0 {
			s += fmt.Sprintf(", %s/s, %s left", api.BytesText(u.Rate), time.Duration(u.ETASeconds)*time.Second)
		}
		return s
	case "done":
		s := fmt.Sprintf("input: %s at the provider, %s sent", api.BytesText(u.Bytes), api.BytesText(u.Sent))
		if u.Held > 0 {
			s += fmt.Sprintf(", %s it held already", api.BytesText(u.Held))
		}
		return s
	case "failed":
		return "input: failed: " + u.Error
	}
	return fmt.Sprintf("input: %s hashed, nothing sent", api.BytesText(u.Bytes))
}

// stderrIsTerminal says whether progress may rewrite its line.
func stderrIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}
