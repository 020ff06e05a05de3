package main

import (
	"fmt"
	"io"
	"os"
	"unicode/utf8"
)

// isTerminal says whether f is a terminal (a character device) rather than a file or a pipe.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// jobOutput returns where to write a job's output, which its provider sends: w itself,
// byte for byte, unless w is a terminal. There the job's bytes could drive the terminal
// (ESC starts sequences that move the cursor, rewrite the screen or the window's title,
// or on some terminals set the clipboard or answer with typed input), so its control
// characters are written as visible escapes; done writes what a last incomplete character
// held back.
func jobOutput(w io.Writer) (out io.Writer, done func() error) {
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		e := &controlEscaper{w: f}
		return e, e.flush
	}
	return w, func() error { return nil }
}

// controlEscaper writes text with its control characters as escapes: the C0 controls but
// newline, tab and carriage return, and DEL, as \x1b and the like; the C1 controls
// (U+0080 to U+009F, which some terminals obey as ESC sequences) as \u009b and the like;
// a byte that is not part of UTF-8 text as \x9b and the like. A UTF-8 character cut at the
// end of a write is held until the rest of it comes.
type controlEscaper struct {
	w    io.Writer
	held []byte
}

func (e *controlEscaper) Write(p []byte) (int, error) {
	in := append(e.held, p...)
	e.held = nil
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		b := in[i]
		if b < utf8.RuneSelf {
			if b < 0x20 && b != '\n' && b != '\t' && b != '\r' || b == 0x7f {
				out = fmt.Appendf(out, `\x%02x`, b)
			} else {
				out = append(out, b)
			}
			i++
			continue
		}
		if !utf8.FullRune(in[i:]) {
			e.held = append([]byte(nil), in[i:]...)
			break
		}
		r, size := utf8.DecodeRune(in[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, b)
		case r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, in[i:i+size]...)
		}
		i += size
	}
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes the bytes of a character the output ended in the middle of, as escapes.
func (e *controlEscaper) flush() error {
	var out []byte
	for _, b := range e.held {
		out = fmt.Appendf(out, `\x%02x`, b)
	}
	e.held = nil
	_, err := e.w.Write(out)
	return err
}
