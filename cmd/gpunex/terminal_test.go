package main

import (
	"bytes"
	"testing"
)

// hostileLog is a job's output that tries to drive the terminal it is printed on: set the
// window's title, clear the screen, write the clipboard (OSC 52), an 8-bit CSI (U+009B, and
// the raw byte 0x9b), among text a job may write: accents, a euro sign, tabs, a progress
// line redrawn with carriage returns.
const hostileLog = "step 1\té\r\n\x1b]0;owned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07€ \u009b31m \x9b31m 50%\r100%\x7f\n"

// what a terminal shows of it
const escapedLog = `step 1` + "\t" + `é` + "\r\n" + `\x1b]0;owned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07€ \u009b31m \x9b31m 50%` + "\r" + `100%\x7f` + "\n"

// TestJobOutputEscapesControls: on a terminal, a job's output shows its control characters
// as escapes, whatever the chunks it comes in (a character cut between two of them
// included); newlines, tabs, carriage returns and the rest of the text stay as they are.
func TestJobOutputEscapesControls(t *testing.T) {
	for cut := 0; cut <= len(hostileLog); cut++ {
		var shown bytes.Buffer
		e := &controlEscaper{w: &shown}
		for _, part := range []string{hostileLog[:cut], hostileLog[cut:]} {
			if n, err := e.Write([]byte(part)); n != len(part) || err != nil {
				t.Fatalf("write %q: %d, %v", part, n, err)
			}
		}
		if err := e.flush(); err != nil {
			t.Fatal(err)
		}
		if shown.String() != escapedLog {
			t.Fatalf("cut at %d: the terminal shows\n%q\nwant\n%q", cut, shown.String(), escapedLog)
		}
	}
	// An output ending in the middle of a character shows its bytes.
	var shown bytes.Buffer
	e := &controlEscaper{w: &shown}
	e.Write([]byte("ok \xe2\x82"))
	e.flush()
	if shown.String() != `ok \xe2\x82` {
		t.Fatalf("a cut character at the end: %q", shown.String())
	}
}
