package main

import (
	"strings"
	"testing"

	"github.com/gpunex/gpunex/node/api"
)

// TestUploadLine: the line `gpunex job run --input` shows says what was hashed, then what
// was sent of what the provider lacked, at which rate and how long is left, then how it
// ended.
func TestUploadLine(t *testing.T) {
	for _, c := range []struct {
		u    api.InputProgress
		want []string
	}{
		{api.InputProgress{Phase: "hashing", Bytes: 3 << 30, Hashed: 1 << 30}, []string{"hashing 1.0 GiB of 3.0 GiB"}},
		{api.InputProgress{Phase: "uploading", Bytes: 3 << 30, Held: 1 << 30, Sent: 512 << 20, Rate: 100 << 20, ETASeconds: 15},
			[]string{"512.0 MiB of 2.0 GiB sent", "1.0 GiB held by the provider already", "100.0 MiB/s", "15s left"}},
		{api.InputProgress{Phase: "done", Bytes: 3 << 30, Sent: 2 << 30, Held: 1 << 30}, []string{"3.0 GiB at the provider, 2.0 GiB sent, 1.0 GiB it held already"}},
		{api.InputProgress{Phase: "failed", Error: "the input did not arrive"}, []string{"failed: the input did not arrive"}},
	} {
		line := uploadLine(c.u)
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: %q lacks %q", c.u.Phase, line, w)
			}
		}
	}
}
