package onboarding

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// The tier rule after approval. An Enterprise provider's link is measured by this
// coordinator at each of its benchmark runs (the network receipts it signs). Measured under
// coordinator.host_minimum.enterprise_mbps either way, the provider is told, with the date
// its tier moves down; measured at or above it again before that date, the count stops and
// the provider is told so. Still under it when coordinator.host_minimum.enterprise_grace
// has passed since the first measurement under, its certificate is reissued for the
// Community tier: the same GPUs, commitment and validity period, a new serial. Going back
// to Enterprise takes a new application. docs/onboarding.md, "The tier after approval".

// tierStep is what checkTier decided for one application.
type tierStep int

const (
	tierUnchanged tierStep = iota
	tierWarned
	tierCleared
	tierMovedDown
)

// CheckTiers applies the tier rule to every provider's latest approved application and tells
// each provider whose state changed. It returns how many tiers moved down.
func (c *Coordinator) CheckTiers(now time.Time) (int, error) {
	grace := c.cfg.HostMinimum.EnterpriseGrace.Duration
	if grace <= 0 {
		return 0, nil
	}
	c.mu.Lock()
	var told []ledger.Application
	var revocations [][]byte
	var errs []error
	moved := 0
	for _, a := range c.latestApproved(&errs) {
		if a.Tier != protocol.TierEnterprise || len(a.Certificate) == 0 {
			continue
		}
		m := c.measuredLink(a.Provider)
		if m == nil {
			continue
		}
		var step tierStep
		var revocation []byte
		updated, err := c.update(a.ID, func(a *ledger.Application) error {
			step, revocation = tierUnchanged, nil
			if a.Status != protocol.StatusApproved || a.Tier != protocol.TierEnterprise {
				return nil
			}
			old, err := protocol.OpenCertificate(a.Certificate, c.trust)
			if err != nil || old.Signer != c.id || c.revocations.RevocationOf(old) != nil {
				return nil
			}
			if step, revocation, err = c.tierStep(a, old, m, grace, now); err != nil || step == tierUnchanged {
				return err
			}
			return c.sign(a, a.Certificate, now)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("application %s: %w", a.ID, err))
			continue
		}
		if step != tierUnchanged {
			told = append(told, updated)
		}
		if step == tierMovedDown {
			moved++
			revocations = append(revocations, revocation)
		}
	}
	c.mu.Unlock()
	for _, raw := range revocations {
		if err := c.revTopic.Publish(context.Background(), raw); err != nil {
			c.log.Warn("gossiping the revocation of an Enterprise certificate failed; peers get it by revocation sync", "err", err)
		}
	}
	for _, a := range told {
		c.log.Info("tier rule", "application", a.ID, "provider", a.Provider, "tier", a.Tier, "message", a.Message)
		c.tell(a, true)
	}
	return moved, errors.Join(errs...)
}

// tierStep applies the rule to one Enterprise application with its latest measurement,
// changing a (message, audit trail, and on a move down its tier and certificate, with the
// revocation of the Enterprise certificate it returns). A measurement from before the
// certificate was issued does not count: the review saw it.
func (c *Coordinator) tierStep(a *ledger.Application, old *protocol.SignedCertificate, m *ledger.LinkMeasurement, grace time.Duration, now time.Time) (tierStep, []byte, error) {
	if m.MeasuredAt.Before(old.IssuedAt) {
		return tierUnchanged, nil, nil
	}
	e := c.cfg.HostMinimum.EnterpriseMbps
	under := m.UpMbps < e || m.DownMbps < e
	measured := fmt.Sprintf("%.0f/%.0f Mbit/s (up/down) on %s", m.UpMbps, m.DownMbps, m.MeasuredAt.UTC().Format("2006-01-02 15:04 MST"))
	event := func(action, detail string) {
		a.Message, a.UpdatedAt = protocol.TierMessagePrefix+detail, now
		a.Events = append(a.Events, ledger.Event{At: now, Actor: "coordinator", Action: action, Detail: detail})
	}
	switch {
	case under && a.TierShortSince.IsZero():
		// The count starts at the measurement, or when this check first saw it.
		a.TierShortSince = m.MeasuredAt
		if now.Sub(m.MeasuredAt) > RenewCheckEvery {
			a.TierShortSince = now
		}
		event("tier-warning", fmt.Sprintf("your link was measured at %s, under the %.0f Mbit/s each way the Enterprise tier needs. "+
			"Unless a benchmark run measures at least that before %s, your tier moves down to Community. "+
			"Check your uplink and run `gpunex bench run` once it is fixed.", measured, e, a.TierShortSince.Add(grace).UTC().Format("2006-01-02 15:04 MST")))
		return tierWarned, nil, nil
	case !under && !a.TierShortSince.IsZero():
		a.TierShortSince = time.Time{}
		event("tier-kept", fmt.Sprintf("your link was measured at %s, which meets the Enterprise tier's %.0f Mbit/s: your tier stays Enterprise.", measured, e))
		return tierCleared, nil, nil
	case under && !now.Before(a.TierShortSince.Add(grace)):
		// The Enterprise certificate is revoked, so that the provider cannot go on
		// offering it; the Community one, issued just after the revocation, is not covered
		// by it, and keeps the old one's expiry: a move down is not a renewal.
		revocation, err := protocol.Seal(protocol.KindRevocation, protocol.Revocation{Version: protocol.RevocationVersion,
			Coordinator: c.id.String(), Provider: a.Provider, IssuedAt: now.UTC(),
			Reason: "tier moved down to Community: the Enterprise certificate is replaced"}, c.peer.Key)
		if err != nil {
			return tierUnchanged, nil, err
		}
		if err := c.revocations.TakeRevocation(revocation, "self"); err != nil {
			return tierUnchanged, nil, err
		}
		serial, err := c.serials.NextSerial("certificate", now)
		if err != nil {
			return tierUnchanged, nil, err
		}
		cert := old.Certificate
		cert.Tier, cert.Serial, cert.IssuedAt = protocol.TierCommunity, serial, now.UTC().Add(time.Millisecond)
		raw, err := protocol.Seal(protocol.KindCertificate, cert, c.peer.Key)
		if err != nil {
			return tierUnchanged, nil, err
		}
		since := a.TierShortSince
		a.Tier, a.Certificate, a.TierShortSince = protocol.TierCommunity, raw, time.Time{}
		event("tier-moved-down", fmt.Sprintf("your link has been measured under the Enterprise tier's %.0f Mbit/s each way since %s (latest: %s): "+
			"your tier is now Community, with a new certificate. Apply again for Enterprise once your link meets it.",
			e, since.UTC().Format("2006-01-02 15:04 MST"), measured))
		return tierMovedDown, revocation, nil
	}
	return tierUnchanged, nil, nil
}
