package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
)

// TestJobStartsByItsImageDigest (security review, finding 1, the runner's half): a job
// starts by the digest its image's import or pull recorded. When another import has moved
// the name to other content, a cached archive image is not run: the job fails saying so,
// and the renter's next proposal sends the archive again; a registry image is pulled again
// and the job runs what the pull recorded.
func TestJobStartsByItsImageDigest(t *testing.T) {
	m := newMarket(t, 3)
	image := imageArchive(t, "first")
	raw, err := os.ReadFile(image)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	want := "sha256:" + hex.EncodeToString(sum[:])
	v := m.run(t, m.request(image))
	spec, _ := m.pv.rt.spec(v.ID)
	if spec.ImageDigest != want {
		t.Fatalf("the job started by digest %q, not its import's %q", spec.ImageDigest, want)
	}

	m.pv.rt.mu.Lock()
	m.pv.rt.squat[spec.Image] = "sha256:" + strings.Repeat("a", 64) // another import takes the name
	m.pv.rt.mu.Unlock()
	_, err = m.rn.ProposeJob(context.Background(), m.request(image))
	if err == nil || !strings.Contains(err.Error(), "propose the job again") {
		t.Fatalf("a job whose cached image name was taken: %v", err)
	}
	js, _ := m.pv.ledger.Jobs()
	failed := slices.IndexFunc(js, func(j ledger.Job) bool {
		return j.State == ledger.JobFailed && strings.Contains(j.Error, "not the one it was given")
	})
	if failed < 0 || len(js) != 2 {
		t.Fatalf("the provider's jobs: %+v", js)
	}
	again := m.run(t, m.request(image))
	if spec, _ := m.pv.rt.spec(again.ID); spec.ImageDigest != want || m.pv.rt.imports != 2 {
		t.Fatalf("the next proposal ran digest %q after %d imports: the archive should be sent and imported again", spec.ImageDigest, m.pv.rt.imports)
	}

	m.pv.clk.Advance(time.Minute) // jobs.proposals_per_minute
	req := m.request("")
	req.Image = "registry.example.org/team/train:3"
	m.pv.rt.mu.Lock()
	m.pv.rt.squat[req.Image] = "sha256:" + strings.Repeat("b", 64)
	m.pv.rt.mu.Unlock()
	pulled := m.run(t, req)
	if spec, _ := m.pv.rt.spec(pulled.ID); spec.ImageDigest != "sha256:00" || !slices.Equal(m.pv.rt.pulls, []string{req.Image, req.Image}) {
		t.Fatalf("a registry image whose name was taken ran digest %q after pulls %v: want it pulled again", spec.ImageDigest, m.pv.rt.pulls)
	}
}
