package onboarding

import (
	"fmt"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Declared against measured: an application declares each host's internet bandwidth; the
// coordinator has measured the applicant's link itself whenever the applicant's node ran
// its benchmarks against it (the network receipts it signs, kept in its ledger). The review
// shows both, flags a measured link under LinkTolerance of what was declared, proposes the
// tier on the measurement once one exists, and refuses Enterprise where the measurement
// contradicts it.

// LinkTolerance: a link measured under this fraction of the declared bandwidth is flagged.
// The measurement crosses the internet to the coordinator and lasts seconds, so it reads
// lower than a line's rate; under half is more than that.
const LinkTolerance = 0.5

// measuredLink is the coordinator's latest measurement of a provider's link, nil when it
// has none.
func (c *Coordinator) measuredLink(provider string) *ledger.LinkMeasurement {
	m, err := c.links.LinkMeasurement(provider)
	if err != nil {
		return nil
	}
	return &m
}

// linkGaps lists the GPU entries whose declared bandwidth the measurement contradicts.
func linkGaps(app *protocol.Application, m *ledger.LinkMeasurement) []string {
	if app == nil || m == nil {
		return nil
	}
	var out []string
	for i, g := range app.GPUs {
		for _, d := range []struct {
			name                 string
			declared, measuredMb float64
		}{{"up", g.UpGbps, m.UpMbps}, {"down", g.DownGbps, m.DownMbps}} {
			if d.declared > 0 && d.measuredMb < LinkTolerance*d.declared*1000 {
				out = append(out, fmt.Sprintf("gpus[%d]: internet %s %g Gbps declared, %.2f Gbps measured by this coordinator on %s (under %.0f%%)",
					i, d.name, d.declared, d.measuredMb/1000, m.MeasuredAt.UTC().Format("2006-01-02 15:04"), LinkTolerance*100))
			}
		}
	}
	return out
}

// enterpriseRuledOut says why the measured link rules Enterprise out under
// coordinator.host_minimum.enterprise_mbps, or "" (also when nothing was measured: the
// tier then rests on the declaration).
func (c *Coordinator) enterpriseRuledOut(m *ledger.LinkMeasurement) string {
	e := c.cfg.HostMinimum.EnterpriseMbps
	if m == nil || (m.UpMbps >= e && m.DownMbps >= e) {
		return ""
	}
	return fmt.Sprintf("link measured at %.0f/%.0f Mbit/s (up/down) by this coordinator on %s < %.0f each way for Enterprise",
		m.UpMbps, m.DownMbps, m.MeasuredAt.UTC().Format("2006-01-02 15:04"), e)
}

// withMeasurement adds the coordinator's measurement to an application's view: the
// figures, the gaps, and the tier proposal on them.
func (c *Coordinator) withMeasurement(v *api.ApplicationView, raw []byte) {
	m := c.measuredLink(v.Provider)
	if m == nil {
		return
	}
	v.MeasuredLink = &api.MeasuredLink{MeasuredAt: m.MeasuredAt, RTTMilli: m.RTTMilli, UpMbps: m.UpMbps, DownMbps: m.DownMbps}
	if app, err := protocol.OpenApplication(raw); err == nil {
		v.LinkGaps = linkGaps(app, m)
	}
	if why := c.enterpriseRuledOut(m); why != "" && v.ProposedTier == protocol.TierEnterprise {
		v.ProposedTier = protocol.TierCommunity
		v.TierReasons = append(v.TierReasons, why)
	}
}
