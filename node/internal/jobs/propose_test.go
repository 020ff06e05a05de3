package jobs

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// TestJobFromProposalToStart: a renter's proposal with an image archive and an escrow hold
// ends with the job running on the provider's sandbox: the lease's terms are the container's
// limits, the archive is imported, both ledgers say running on the same GPU. The same
// renter's next job with the same archive does not send it again; another renter's does
// (how fast a job starts tells nobody which images others sent).
func TestJobFromProposalToStart(t *testing.T) {
	m := newMarket(t, 3, func(d *Deps) { d.Jobs.RequireEscrow = true })
	image := imageArchive(t, "first")
	v := m.run(t, m.request(image))

	if v.State != ledger.JobRunning || v.Side != "renter" || v.Peer != m.pv.peer.ID.String() || v.Model != "L4-24GB" || v.Price != 1_000_000 ||
		len(v.GPUUUIDs) != 1 || !v.EndsAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("the renter's view of the started job: %+v", v.JobStatus)
	}
	pj := m.pv.job(t, v.ID)
	if pj.State != ledger.JobRunning || pj.Peer != m.rn.peer.ID.String() || !slices.Equal(pj.GPUs, v.GPUUUIDs) || !m.pv.Busy(v.GPUUUIDs[0]) {
		t.Fatalf("the provider's job: %s on %v from %s", pj.State, pj.GPUs, pj.Peer)
	}
	spec, ok := m.pv.rt.spec(v.ID)
	if !ok {
		t.Fatal("no container started")
	}
	dir := m.pv.jobDir(v.ID)
	switch {
	case !strings.HasPrefix(spec.Image, "import/") || m.pv.rt.imports != 1:
		t.Fatalf("image %q after %d imports: the archive should have been imported once", spec.Image, m.pv.rt.imports)
	case !slices.Equal(spec.Args, []string{"run", "it"}) || !slices.Equal(spec.Env, []string{"SEED=7"}):
		t.Fatalf("command %v, environment %v", spec.Args, spec.Env)
	case len(spec.GPUs) != 1 || spec.GPUs[0].UUID != v.GPUUUIDs[0]:
		t.Fatalf("the container got GPUs %+v, the job %v", spec.GPUs, v.GPUUUIDs)
	case spec.WallClock != time.Hour || spec.MemoryBytes != 1024<<20 || spec.CPUMillis != 2000 || spec.Pids != 100 || spec.ScratchBytes != 64<<20 || spec.Egress:
		t.Fatalf("container limits %+v: not the lease's", spec)
	case spec.OutputDir != filepath.Join(dir, "output") || spec.LogPath != filepath.Join(dir, "log"):
		t.Fatalf("output %s, log %s: not in the job's folder %s", spec.OutputDir, spec.LogPath, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "image.tar")); !os.IsNotExist(err) {
		t.Fatalf("the received archive is kept after its import: %v", err)
	}

	again := m.run(t, m.request(image))
	if spec2, _ := m.pv.rt.spec(again.ID); spec2.Image != spec.Image || m.pv.rt.imports != 1 {
		t.Fatalf("the same renter's archive imported %d times", m.pv.rt.imports)
	}
	other := m.renter(t)
	other.escrow.coordinator = m.coordKey
	if _, err := other.ProposeJob(context.Background(), m.request(image)); err != nil {
		t.Fatal(err)
	}
	if m.pv.rt.imports != 2 {
		t.Fatalf("another renter's copy of the archive: %d imports, want 2", m.pv.rt.imports)
	}
}

// TestRegistryImage: a job naming a registry reference has the provider pull it; nothing
// is streamed.
func TestRegistryImage(t *testing.T) {
	m := newMarket(t, 1)
	req := m.request("")
	req.Image = "registry.example.org/team/train:3"
	v := m.run(t, req)
	if spec, _ := m.pv.rt.spec(v.ID); spec.Image != req.Image || !slices.Equal(m.pv.rt.pulls, []string{req.Image}) || m.pv.rt.imports != 0 {
		t.Fatalf("ran %q after pulls %v and %d imports", spec.Image, m.pv.rt.pulls, m.pv.rt.imports)
	}
}

// TestRefusedProposalGivesHoldBack: a proposal the provider counters or refuses leaves
// nothing behind on either side, its escrow hold is given back before the renter hears,
// and the renter is told what to do (a 409 wrapping ErrRefused).
func TestRefusedProposalGivesHoldBack(t *testing.T) {
	m := newMarket(t, 1)
	req := m.request(imageArchive(t, "x"))
	req.MaxPrice = "0.5"
	_, err := m.rn.ProposeJob(context.Background(), req)
	if !errors.Is(err, ErrRefused) || !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "the provider counters at 1.00 USDC per GPU-hour") {
		t.Fatalf("a maximum under the price: %v", err)
	}
	if len(m.rn.escrow.released) != 1 || len(m.rn.escrow.retried) != 0 {
		t.Fatalf("hold released %v, retried %v: a refused proposal's hold comes back at once", m.rn.escrow.released, m.rn.escrow.retried)
	}
	if rj, _ := m.rn.ledger.Jobs(); len(rj) != 0 {
		t.Fatalf("the renter kept %d jobs of a refused proposal", len(rj))
	}
	if pj, _ := m.pv.ledger.Jobs(); len(pj) != 0 || m.pv.RunningJobs() != 0 {
		t.Fatalf("the provider kept %d jobs of a refused proposal", len(pj))
	}

	// A provider requiring escrow, a renter without an account at its coordinator.
	m.pv.cfg.RequireEscrow = true
	m.rn.escrow.coordinator = nil
	_, err = m.rn.ProposeJob(context.Background(), m.request(imageArchive(t, "x")))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "this provider requires an escrow hold") || !strings.Contains(err.Error(), "(no hold was given: ") {
		t.Fatalf("no hold to a provider that requires one: %v", err)
	}
}

// TestRenterRequestChecks: mistakes of the renter's own are refused before any provider
// is asked (400): a file that is no image archive, an offer of another model, a choice
// among offers with a provider named.
func TestRenterRequestChecks(t *testing.T) {
	m := newMarket(t, 1)
	notImage := filepath.Join(t.TempDir(), "id_ed25519")
	os.WriteFile(notImage, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n"), 0o600)
	for name, req := range map[string]api.JobRequest{
		"a key as image":        m.request(notImage),
		"no provider nor model": {GPUs: 1, MaxSeconds: 60, Image: "a:1"},
		"tries with a provider": func() api.JobRequest { r := m.request(""); r.Image, r.Tries = "a:1", 2; return r }(),
		"offer of another model": func() api.JobRequest {
			r := m.request("")
			r.Provider, r.Offer, r.Model, r.Image = "", protocol.OfferID(m.pv.peer.ID, "L4-24GB"), "H100-80GB", "a:1"
			return r
		}(),
		"egress from an offer without": func() api.JobRequest {
			r := m.request("")
			r.Image, r.Egress = "a:1", true
			m.rn.offers.byPeer[m.pv.peer.ID].Offer.Egress = ""
			return r
		}(),
	} {
		if _, err := m.rn.ProposeJob(context.Background(), req); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%s: %v, want an invalid request", name, err)
		}
	}
	if pj, _ := m.pv.ledger.Jobs(); len(pj) != 0 || m.pv.rt.imports != 0 {
		t.Fatal("the provider heard of a request the renter should have refused")
	}
}

// TestFailedStartIsNotCharged: a job leased but not started (the sandbox refused it) is
// failed on both sides, its GPU is free again, and its hold is asked back later (the
// provider may still be marking the failure).
func TestFailedStartIsNotCharged(t *testing.T) {
	m := newMarket(t, 1)
	m.pv.rt.startErr = errors.New("no space left on device")
	_, err := m.rn.ProposeJob(context.Background(), m.request(imageArchive(t, "x")))
	if err == nil || !strings.Contains(err.Error(), "the provider could not start the job: start: no space left on device") {
		t.Fatalf("a start refused by the sandbox: %v", err)
	}
	rj, _ := m.rn.ledger.Jobs()
	pj, _ := m.pv.ledger.Jobs()
	if len(rj) != 1 || rj[0].State != ledger.JobFailed || len(pj) != 1 || pj[0].State != ledger.JobFailed || len(pj[0].Receipt) != 0 {
		t.Fatalf("after a failed start: renter %+v, provider %+v", rj, pj)
	}
	eventually(t, "the GPU of a job that never started free again", func() bool { return m.pv.RunningJobs() == 0 })
	eventually(t, "the failed job's hold asked back", func() bool {
		m.rn.escrow.mu.Lock()
		defer m.rn.escrow.mu.Unlock()
		return slices.Equal(m.rn.escrow.retried, []string{rj[0].ID})
	})
	if a := m.pv.ReleaseAnswer(rj[0].ID); !a.Release {
		t.Fatalf("the provider keeps the hold of a job it never started: %+v", a)
	}
}

// TestArchiveMustMatchProposal: a renter that streams other bytes than the archive it
// proposed gets its job refused; the provider imports nothing and runs nothing.
func TestArchiveMustMatchProposal(t *testing.T) {
	m := newMarket(t, 1)
	sent := []byte("these bytes are not the archive")
	p := protocol.Proposal{Version: protocol.JobVersion, Job: "00000000000000f1", Renter: m.rn.peer.ID.String(), Provider: m.pv.peer.ID.String(),
		IssuedAt: t0, Model: "L4-24GB", GPUs: 1, MaxSeconds: 60, MaxPrice: 1_000_000,
		Image: protocol.Image{ArchiveSHA256: strings.Repeat("ab", 32), ArchiveSize: int64(len(sent))}}
	praw, _ := protocol.Seal(protocol.KindProposal, p, m.rn.peer.Key)
	s, err := m.rn.peer.OpenStream(context.Background(), m.pv.peer.ID, protocol.JobProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	in := bufio.NewReader(s)
	accepted, err := askProvider(s, in, praw, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := m.rn.keepLease(p.Job, m.pv.peer.ID, praw, accepted.Record)
	if err != nil {
		t.Fatal(err)
	}
	sendMsg(s, protocol.JobMsg{Type: "countersign", Record: cs})
	s.Write(sent)
	a, err := readMsg(in)
	if err != nil || a.Type != "error" || !strings.Contains(a.Reason, "does not match the proposal's sha256:"+p.Image.ArchiveSHA256) {
		t.Fatalf("other bytes than proposed: %s %q %v", a.Type, a.Reason, err)
	}
	if j := m.pv.job(t, p.Job); j.State != ledger.JobFailed || m.pv.rt.imports != 0 {
		t.Fatalf("after a wrong archive: job %s, %d imports", j.State, m.pv.rt.imports)
	}
	eventually(t, "the GPU free again", func() bool { return m.pv.RunningJobs() == 0 })
	if _, ok := m.pv.rt.spec(p.Job); ok {
		t.Fatal("a container started from an archive other than the proposed one")
	}
}
