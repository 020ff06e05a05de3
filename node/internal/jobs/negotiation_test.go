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

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/internal/p2p"
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

// TestRefusedWithoutRuntime: a provider whose sandbox is missing refuses every proposal
// and says why.
func TestRefusedWithoutRuntime(t *testing.T) {
	r := newProvider(t, nil, []bench.SimulatedGPU{{Model: "H100-80GB"}}, func(d *Deps) {
		d.Runtime, d.RuntimeErr = nil, errors.New("no containerd here")
	})
	_, _, _, err := r.decide(&protocol.Proposal{Job: "00000000000000aa", Model: "H100-80GB", GPUs: 1}, nil, r.clock.Now())
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "cannot run jobs right now: no containerd here") {
		t.Fatalf("without a runtime: %v", err)
	}
}

// signHold is a coordinator's escrow hold of amount for a proposal, lasting past its lease.
func signHold(t *testing.T, key crypto.PrivKey, p *protocol.Proposal, amount protocol.MicroUSDC) []byte {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(key)
	raw, err := protocol.Seal(protocol.KindEscrowHold, protocol.EscrowHold{Version: protocol.SettlementVersion, Coordinator: id.String(),
		Renter: p.Renter, Provider: p.Provider, Job: p.Job, Amount: amount, IssuedAt: t0,
		ExpiresAt: t0.Add(time.Duration(p.MaxSeconds)*time.Second + 2*protocol.HoldGrace)}, key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestDecisionRules: the provider's policy on a checked proposal: each rule refuses with a
// reason the renter can act on, a price above the renter's maximum gets a counter-offer,
// and nothing refused keeps a GPU.
func TestDecisionRules(t *testing.T) {
	coordKey, coord := newKey(t)
	strangerKey, _ := newKey(t)
	_, renter := newKey(t)
	full := protocol.HoldAmount(1_000_000, 1, 3600)
	for _, c := range []struct {
		name    string
		edit    func(pv *provider, p *protocol.Proposal)
		want    string // in the refusal; "" accepts
		is      error
		counter protocol.MicroUSDC
	}{
		{name: "accepted", edit: func(*provider, *protocol.Proposal) {}},
		{name: "price above the maximum", edit: func(_ *provider, p *protocol.Proposal) { p.MaxPrice = 500_000 },
			want: "the price is 1.00 USDC per GPU-hour, above your maximum of 0.50", counter: 1_000_000},
		{name: "blocked renter", edit: func(pv *provider, p *protocol.Proposal) { pv.cfg.BlockedRenters = []string{renter.String()} },
			want: "renter " + renter.String() + " is blocked by this provider", is: ErrRefused},
		{name: "outside the schedule", edit: func(pv *provider, _ *protocol.Proposal) { pv.pub.open = false },
			want: "outside the provider's availability window", is: ErrRefused},
		{name: "no offer", edit: func(pv *provider, _ *protocol.Proposal) { pv.publisher = nil },
			want: "outside the provider's availability window", is: ErrRefused},
		{name: "model not offered", edit: func(_ *provider, p *protocol.Proposal) { p.Model = "A100-80GB" },
			want: "no A100-80GB on offer here now", is: ErrRefused},
		{name: "offer withdrawn", edit: func(pv *provider, _ *protocol.Proposal) { pv.pub.offer.Offer.Withdrawn = "maintenance" },
			want: "no L4-24GB on offer here now", is: ErrRefused},
		{name: "egress without any", edit: func(pv *provider, p *protocol.Proposal) { pv.pub.offer.Offer.Egress, p.Egress = "", true },
			want: "this provider gives jobs no network", is: ErrRefused},
		{name: "more GPUs than offered", edit: func(_ *provider, p *protocol.Proposal) { p.GPUs = 3 },
			want: "3 x L4-24GB asked, 2 offered", is: ErrRefused},
		{name: "image archive too large", edit: func(_ *provider, p *protocol.Proposal) {
			p.Image = protocol.Image{ArchiveSHA256: strings.Repeat("a", 64), ArchiveSize: 101 << 20}
		}, want: "image archive of 101 MB, this provider takes at most 100 MB", is: ErrRefused},
		{name: "job proposed before", edit: func(pv *provider, p *protocol.Proposal) {
			pv.ledger.CreateJob(ledger.Job{ID: p.Job, Side: "provider", State: ledger.JobReleased})
		}, want: "was proposed before", is: protocol.ErrReplay},
		{name: "no free GPU", edit: func(pv *provider, _ *protocol.Proposal) { pv.Reserve("other", "L4-24GB", 2) },
			want: "capacity: 0 of 2 L4-24GB free right now", is: ErrRefused},
		{name: "escrow required, none given", edit: func(pv *provider, _ *protocol.Proposal) { pv.cfg.RequireEscrow = true },
			want: "this provider requires an escrow hold", is: ErrRefused},
		{name: "escrow required and held", edit: func(pv *provider, p *protocol.Proposal) {
			pv.cfg.RequireEscrow = true
			p.Hold = signHold(t, coordKey, p, full)
		}},
		{name: "hold of an untrusted coordinator", edit: func(_ *provider, p *protocol.Proposal) { p.Hold = signHold(t, strangerKey, p, full) },
			want: "escrow hold refused", is: ErrRefused},
		{name: "hold short of the maximum cost", edit: func(_ *provider, p *protocol.Proposal) { p.Hold = signHold(t, coordKey, p, full-1) },
			want: "does not cover the job's maximum cost", is: ErrRefused},
		{name: "hold for another job", edit: func(_ *provider, p *protocol.Proposal) {
			q := *p
			q.Job = "00000000000000ff"
			p.Hold = signHold(t, coordKey, &q, full)
		}, want: "not this proposal", is: ErrRefused},
		{name: "shutting down", edit: func(pv *provider, _ *protocol.Proposal) { pv.StopAll(context.Background(), "test") },
			want: "the provider is shutting down", is: ErrRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}, {Model: "L4-24GB"}}, func(d *Deps) { d.Trusted = []peer.ID{coord} })
			p := &protocol.Proposal{Version: protocol.JobVersion, Job: "00000000000000d1", Renter: renter.String(), Provider: pv.peer.ID.String(),
				IssuedAt: t0, Model: "L4-24GB", GPUs: 1, MaxSeconds: 3600, MaxPrice: 1_000_000, Image: protocol.Image{Ref: "example.org/job:1"}}
			c.edit(pv, p)
			busyBefore := pv.RunningJobs()
			lease, gpus, counter, err := pv.decide(p, []byte("raw proposal"), pv.clk.Now())
			if c.want == "" {
				if err != nil || len(lease) == 0 || len(gpus) != p.GPUs || !pv.Busy(gpus[0].UUID) {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("%v is not %v", err, c.is)
			}
			if counter != c.counter {
				t.Fatalf("counter-offer %s, want %s", counter, c.counter)
			}
			if lease != nil || gpus != nil || pv.RunningJobs() != busyBefore {
				t.Fatal("a refused proposal leased GPUs")
			}
		})
	}
}

// TestLeaseTerms: the lease a provider signs holds its offer's price, ends the proposal's
// maximum duration after it is issued, and grants the sandbox limits of [jobs] for each
// GPU leased.
func TestLeaseTerms(t *testing.T) {
	pv := newProvider(t, nil, []bench.SimulatedGPU{{Model: "L4-24GB"}, {Model: "L4-24GB"}})
	pv.clk.Advance(time.Hour)
	_, renter := newKey(t)
	p := &protocol.Proposal{Version: protocol.JobVersion, Job: "00000000000000d2", Renter: renter.String(), Provider: pv.peer.ID.String(),
		IssuedAt: pv.clk.Now(), Model: "L4-24GB", GPUs: 2, MaxSeconds: 7200, MaxPrice: 3_000_000, Image: protocol.Image{Ref: "example.org/job:1"}, Egress: true}
	raw := []byte("raw proposal")
	lease, gpus, _, err := pv.decide(p, raw, pv.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	l, signer, err := protocol.OpenLease(lease)
	if err != nil {
		t.Fatal(err)
	}
	want := protocol.Limits{MemoryBytes: 2 * 1024 << 20, CPUMillis: 4000, Pids: 100, ScratchBytes: 64 << 20}
	switch {
	case signer != pv.peer.ID:
		t.Fatalf("lease signed by %s", signer)
	case l.Price != 1_000_000:
		t.Fatalf("lease price %s: the offer's price, not the renter's maximum, is charged", l.Price)
	case !l.EndsAt.Equal(pv.clk.Now().Add(2*time.Hour)) || !l.IssuedAt.Equal(pv.clk.Now()):
		t.Fatalf("lease from %s to %s", l.IssuedAt, l.EndsAt)
	case l.Limits != want:
		t.Fatalf("limits %+v, want %+v", l.Limits, want)
	case !l.Egress || l.GPUs != 2 || len(gpus) != 2 || l.Proposal != protocol.RecordSHA256(raw) || l.Renter != renter.String():
		t.Fatalf("lease %+v for %d GPUs", l, len(gpus))
	}
}

// ask opens a job stream from a peer to a provider, sends m and returns the answer.
func ask(t *testing.T, from *p2p.Peer, to peer.ID, m protocol.JobMsg) protocol.JobMsg {
	t.Helper()
	s, err := from.OpenStream(context.Background(), to, protocol.JobProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	// A provider that refuses before reading answers first: the mock network's streams
	// have no buffer, so the proposal is written alongside.
	go sendMsg(s, m)
	a, err := readMsg(bufio.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestJobStreamRefuses: the job stream refuses, before any policy, what a renter cannot
// send: more proposals a minute than jobs.proposals_per_minute (until a minute passed), a
// first frame that is not a proposal, a proposal signed by another peer than the sender,
// one addressed to another provider, one longer than the longest job.
func TestJobStreamRefuses(t *testing.T) {
	net := newTestNet(t)
	pv := newProvider(t, net.peer(t), []bench.SimulatedGPU{{Model: "L4-24GB"}})
	from := net.peer(t)
	net.connect(t)
	pv.serve()
	otherKey, other := newKey(t)
	proposal := func(key crypto.PrivKey, signer peer.ID, edit func(*protocol.Proposal)) []byte {
		p := protocol.Proposal{Version: protocol.JobVersion, Job: "00000000000000e1", Renter: signer.String(), Provider: pv.peer.ID.String(),
			IssuedAt: pv.clk.Now(), Model: "L4-24GB", GPUs: 1, MaxSeconds: 60, MaxPrice: 100, Image: protocol.Image{Ref: "example.org/job:1"}}
		edit(&p)
		raw, err := protocol.Seal(protocol.KindProposal, p, key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, c := range []struct {
		name string
		m    protocol.JobMsg
		want string
	}{
		{"not a proposal", protocol.JobMsg{Type: "countersign"}, `expected a proposal, got "countersign"`},
		{"signed by another peer", protocol.JobMsg{Type: "propose", Record: proposal(otherKey, other, func(*protocol.Proposal) {})},
			"proposal signed by " + other.String() + " arrived from " + from.ID.String()},
		{"addressed to another provider", protocol.JobMsg{Type: "propose", Record: proposal(from.Key, from.ID, func(p *protocol.Proposal) { p.Provider = other.String() })},
			"proposal addressed to " + other.String()},
	} {
		if a := ask(t, from, pv.peer.ID, c.m); a.Type != "reject" || !strings.Contains(a.Reason, c.want) {
			t.Errorf("%s: answered %s %q", c.name, a.Type, a.Reason)
		}
	}
	// The fourth in a minute (proposals_per_minute = 3).
	long := protocol.JobMsg{Type: "propose", Record: proposal(from.Key, from.ID, func(p *protocol.Proposal) { p.MaxSeconds = int64(protocol.MaxJobDuration/time.Second) + 1 })}
	if a := ask(t, from, pv.peer.ID, long); a.Type != "reject" || !strings.Contains(a.Reason, "more than 3 proposals in a minute from "+from.ID.String()) {
		t.Fatalf("a fourth proposal in a minute: %s %q", a.Type, a.Reason)
	}
	pv.clk.Advance(time.Minute)
	if a := ask(t, from, pv.peer.ID, long); a.Type != "reject" || !strings.Contains(a.Reason, "max_seconds") {
		t.Fatalf("a job longer than the longest, a minute later: %s %q", a.Type, a.Reason)
	}
	// Another renter is not slowed down by the first.
	third := net.peer(t)
	net.connect(t)
	if a := ask(t, third, pv.peer.ID, protocol.JobMsg{Type: "propose", Record: proposal(third.Key, third.ID, func(p *protocol.Proposal) { p.MaxPrice = 1 })}); a.Type != "counter" || a.Price != 1_000_000 {
		t.Fatalf("another renter's proposal under the price: %s %q", a.Type, a.Reason)
	}
	if jobs, _ := pv.ledger.Jobs(); len(jobs) != 0 {
		t.Fatalf("refused proposals left %d jobs", len(jobs))
	}
}
