package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpunex/gpunex/node/internal/onboarding"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

// ownCertificate reads a provider's own certificate.
func ownCertificate(t *testing.T, n *Node) *protocol.SignedCertificate {
	t.Helper()
	raw, err := n.ledger.Applicant.OwnCertificate()
	if err != nil {
		t.Fatal(err)
	}
	c, err := protocol.OpenCertificate(raw, trustOf(n))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCertificateRenewal: an approved provider's certificate is renewed before it expires,
// with the same tier, GPUs and commitment, and its offer carries the new one; a provider
// that misses the push gets it by asking; a revoked provider's certificate is not renewed.
func TestCertificateRenewal(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node network test")
	}
	fastOnboarding(t)
	every, askEvery := onboarding.RenewCheckEvery, onboarding.RenewAskEvery
	onboarding.RenewCheckEvery, onboarding.RenewAskEvery = 200*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() { onboarding.RenewCheckEvery, onboarding.RenewAskEvery = every, askEvery })

	// Certificates live 2 minutes and are renewed 1m55s before they expire: 5 s after
	// each issue.
	ccfg := testConfig(config.RoleCoordinator)
	ccfg.Coordinator.CertificateValidity = config.Duration{Duration: 2 * time.Minute}
	ccfg.Coordinator.CertificateRenewBefore = config.Duration{Duration: 115 * time.Second}
	tn := newTestNetWith(t, ccfg)
	coord := tn.boot
	renter := tn.add(testConfig(config.RoleRenter), nil)

	approve := func(i int) *Node {
		cfg := providerConfig(i)
		p := tn.addUncertified(cfg)
		own, err := p.applicant.Submit(applicationForm(cfg, true, 12))
		if err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p, protocol.StatusPending)
		if _, err := coord.coord.Decide(own.ID, api.Decision{Action: "approve", Tier: protocol.TierEnterprise, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p, protocol.StatusApproved)
		return p
	}
	prov := approve(0)
	// This one takes no pushed notification: it must ask for its renewed certificate.
	deaf := approve(1)
	deaf.peer.Host.RemoveStreamHandler(protocol.NotifyProtocol)
	revoked := approve(2)

	first := ownCertificate(t, prov)
	firstDeaf := ownCertificate(t, deaf)
	if _, err := coord.coord.Revoke(context.Background(), revoked.ID(), "test", "carol"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, revoked, protocol.StatusRevoked)

	for _, c := range []struct {
		n     *Node
		first *protocol.SignedCertificate
	}{{prov, first}, {deaf, firstDeaf}} {
		eventually(t, 15*time.Second, "renewed certificate", func() (bool, string) {
			got := ownCertificate(t, c.n)
			return got.Serial != c.first.Serial, fmt.Sprintf("serial %d", got.Serial)
		})
		got := ownCertificate(t, c.n)
		if !got.ExpiresAt.After(c.first.ExpiresAt) || got.Tier != c.first.Tier || !got.CommitmentEnd.Equal(c.first.CommitmentEnd) ||
			got.Application != c.first.Application || fmt.Sprint(got.GPUs) != fmt.Sprint(c.first.GPUs) {
			t.Fatalf("renewed certificate %+v; was %+v", got.Certificate, c.first.Certificate)
		}
		if own := mustOwn(t, c.n); own.Status != protocol.StatusApproved || !strings.HasPrefix(own.Message, "certificate renewed until ") {
			t.Fatalf("provider's application after renewal: %s %q", own.Status, own.Message)
		}
	}
	// What renters see carries the renewed certificate.
	eventually(t, 15*time.Second, "offer with the renewed certificate", func() (bool, string) {
		o := prov.publisher.Current()
		if o == nil {
			return false, "no offer"
		}
		c, err := protocol.CheckCertificate(o.Offer.Certificate, time.Now(), protocol.NewTrust(tn.boot.ID()))
		if err != nil {
			return false, err.Error()
		}
		_, listed := searchHas(t, renter, prov.ID())
		return c.Serial != first.Serial && listed, fmt.Sprintf("serial %d listed %v", c.Serial, listed)
	})
	app, err := coord.ledger.Applications.GetApplication(mustOwn(t, prov).ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := app.Events[len(app.Events)-1]; last.Action != "renewed" || last.Actor != "coordinator" {
		t.Fatalf("coordinator's audit trail ends with %+v", last)
	}
	// The provider applies again (more GPUs, say): while the new application is reviewed,
	// and after it is refused, the approved one's certificate is still renewed.
	renewedAgain := func(what string) {
		t.Helper()
		before := ownCertificate(t, prov).Serial
		eventually(t, 15*time.Second, what, func() (bool, string) {
			got := ownCertificate(t, prov)
			return got.Serial != before && got.Application == first.Application, fmt.Sprintf("serial %d of %s", got.Serial, got.Application)
		})
	}
	again, err := prov.applicant.Submit(applicationForm(providerConfig(0), true, 24))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusPending)
	renewedAgain("renewed while a new application is pending")
	if _, err := coord.coord.Decide(again.ID, api.Decision{Action: "reject", Message: "not now", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, prov, protocol.StatusRejected)
	renewedAgain("renewed after the new application was refused")
	// Revoked: no certificate, none renewed.
	app, err = coord.ledger.Applications.GetApplication(mustOwn(t, revoked).ID)
	if err != nil {
		t.Fatal(err)
	}
	revokedAt := -1
	for i, e := range app.Events {
		switch {
		case e.Action == "revoked":
			revokedAt = i
		case e.Action == "renewed" && revokedAt >= 0:
			t.Fatalf("a revoked provider's certificate was renewed: %+v", app.Events)
		}
	}
	if raw, _ := revoked.ledger.Applicant.OwnCertificate(); len(raw) != 0 {
		t.Fatal("a revoked provider holds a certificate")
	}
}

// TestProviderTakesOnlyRenewals: a certificate of another application, even a newer one,
// does not replace the one held; a renewal of it (same application and coordinator,
// issued later) does.
func TestProviderTakesOnlyRenewals(t *testing.T) {
	tn := newTestNet(t)
	prov := tn.add(providerConfig(0), nil)
	held := ownCertificate(t, prov)
	reissue := func(app string, at time.Time) []byte {
		c := held.Certificate
		c.Application, c.Serial, c.IssuedAt, c.ExpiresAt = app, c.Serial+uint64(at.Unix()), at, at.AddDate(0, 0, 30)
		raw, err := protocol.Seal(protocol.KindCertificate, c, tn.bootKey)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	if err := prov.applicant.TakeNewerCertificate(reissue("ba9876543210", time.Now())); err != nil || ownCertificate(t, prov).Serial != held.Serial {
		t.Fatalf("a certificate of another application replaced the one held: %v", err)
	}
	renewal := reissue(held.Application, time.Now())
	if err := prov.applicant.TakeNewerCertificate(renewal); err != nil || ownCertificate(t, prov).Application != held.Application || ownCertificate(t, prov).Serial == held.Serial {
		t.Fatalf("the renewal was not taken: %v", err)
	}
}
