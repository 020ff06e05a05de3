package onboarding

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Certificate renewal. A coordinator renews, before they expire, the certificates of the
// providers it approved and did not revoke, so that a provider in good standing does not
// drop out of the market when its certificate ages; the provider gets the new certificate
// pushed, or asks for it (applicant.run) when its own nears expiry.

var (
	// RenewCheckEvery is how often a coordinator looks for certificates to renew.
	RenewCheckEvery = time.Hour
	// RenewAskBefore is when a provider starts asking its coordinator for a renewed
	// certificate (in case the push did not reach it), and RenewAskEvery how often.
	RenewAskBefore = 30 * 24 * time.Hour
	RenewAskEvery  = 6 * time.Hour
)

// RenewLoop renews due certificates, applies the tier rule (CheckTiers) and deletes the
// closed applications past their retention (Prune), at start and then every
// RenewCheckEvery.
func (c *Coordinator) RenewLoop(ctx context.Context) {
	for {
		if c.cfg.CertificateRenewBefore.Duration > 0 {
			if n, err := c.renewDue(c.clock.Now()); err != nil {
				c.log.Warn("certificate renewal", "renewed", n, "err", err)
			}
		}
		if n, err := c.CheckTiers(c.clock.Now()); err != nil {
			c.log.Warn("tier rule", "moved_down", n, "err", err)
		}
		if _, err := c.Prune(c.clock.Now()); err != nil {
			c.log.Warn("deleting closed applications", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(RenewCheckEvery):
		}
	}
}

// renewDue renews every approved, unrevoked certificate that expires within
// coordinator.certificate_renew_before of now (or has expired), and tells each provider.
// It returns how many it renewed.
func (c *Coordinator) renewDue(now time.Time) (int, error) {
	before := c.cfg.CertificateRenewBefore.Duration
	c.mu.Lock()
	var renewed []ledger.Application
	var errs []error
	// Only each provider's latest approved application (renewed even while a newer one is
	// pending or was rejected).
	for _, a := range c.latestApproved(&errs) {
		if len(a.Certificate) == 0 {
			continue
		}
		old, err := protocol.OpenCertificate(a.Certificate, c.trust)
		if err != nil {
			errs = append(errs, fmt.Errorf("application %s: stored certificate: %w", a.ID, err))
			continue
		}
		if old.Signer != c.id || old.ExpiresAt.Sub(now) > before || c.revocations.RevocationOf(old) != nil {
			continue
		}
		updated, err := c.update(a.ID, func(a *ledger.Application) error {
			if a.Status != protocol.StatusApproved || !bytes.Equal(a.Certificate, old.Raw) {
				return errNothingToRenew // decided again meanwhile
			}
			cert, err := c.reissue(&old.Certificate, now)
			if err != nil {
				return err
			}
			until := now.UTC().Add(c.cfg.CertificateValidity.Duration).Format(time.RFC3339)
			a.Certificate, a.UpdatedAt = cert, now
			a.Message = "certificate renewed until " + until
			a.Events = append(a.Events, ledger.Event{At: now, Actor: "coordinator", Action: "renewed",
				Detail: fmt.Sprintf("certificate %d expiring %s replaced, valid until %s", old.Serial, old.ExpiresAt.UTC().Format(time.RFC3339), until)})
			return c.sign(a, cert, now)
		})
		if errors.Is(err, errNothingToRenew) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("application %s: %w", a.ID, err))
			continue
		}
		renewed = append(renewed, updated)
	}
	c.mu.Unlock()
	for _, a := range renewed {
		c.log.Info("certificate renewed", "application", a.ID, "provider", a.Provider, "message", a.Message)
		c.tell(a, true)
	}
	return len(renewed), errors.Join(errs...)
}

var errNothingToRenew = errors.New("nothing to renew")

// latestApproved reads each provider's latest approved application (an older approved one
// was replaced), adding to errs those it cannot read.
func (c *Coordinator) latestApproved(errs *[]error) []ledger.Application {
	ids := c.queue.latestApproved()
	sort.Strings(ids)
	var out []ledger.Application
	for _, id := range ids {
		a, err := c.applications.GetApplication(id)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("application %s: %w", id, err))
			continue
		}
		if a.Status == protocol.StatusApproved {
			out = append(out, a)
		}
	}
	return out
}

// reissue signs a new certificate with the same provider, application, tier, GPUs and
// commitment as old, a new serial, valid from now for coordinator.certificate_validity.
func (c *Coordinator) reissue(old *protocol.Certificate, now time.Time) ([]byte, error) {
	serial, err := c.serials.NextSerial("certificate", now)
	if err != nil {
		return nil, err
	}
	cert := *old
	cert.Serial, cert.IssuedAt = serial, now.UTC()
	cert.ExpiresAt = cert.IssuedAt.Add(c.cfg.CertificateValidity.Duration)
	return protocol.Seal(protocol.KindCertificate, cert, c.peer.Key)
}

// holdsCertificate says whether this node holds a certificate that no revocation covers
// (expired or not): one its coordinator may renew.
func (a *Applicant) holdsCertificate() bool {
	c := a.HeldCertificate()
	return c != nil && a.revocations.RevocationOf(c) == nil
}

// certificateNeedsRenewal says whether a provider should ask its coordinator for its
// status because its own certificate is missing, unreadable, or within RenewAskBefore of
// its expiry.
func (a *Applicant) certificateNeedsRenewal(now time.Time) bool {
	c := a.HeldCertificate()
	return c == nil || c.ExpiresAt.Sub(now) <= RenewAskBefore
}
