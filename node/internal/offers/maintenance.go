package offers

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Planned maintenance: the provider keeps windows and recurring rules in its ledger and
// announces the windows ahead in its offer; the coordinator does not count probes missed
// inside them.

// AddMaintenance adds a window (From, To) or a recurring rule and republishes the offer.
func (p *Publisher) AddMaintenance(m ledger.Maintenance) (ledger.Maintenance, error) {
	now := p.clock.Now()
	switch {
	case m.Rule != "" && (!m.From.IsZero() || !m.To.IsZero()):
		return m, api.Invalid(errors.New("give either a window (from, to) or a recurring rule"))
	case m.Rule != "":
		if _, err := protocol.ParseMaintenanceRule(m.Rule, m.Note); err != nil {
			return m, api.Invalid(err)
		}
	case !m.To.After(m.From) || m.To.Sub(m.From) > protocol.MaxMaintenanceLength:
		return m, api.Invalid(fmt.Errorf("maintenance window: to must be after from, at most %s later", protocol.MaxMaintenanceLength))
	case !m.To.After(now):
		return m, api.Invalid(errors.New("maintenance window already over"))
	}
	if len(m.Note) > 200 {
		return m, api.Invalid(errors.New("note: at most 200 bytes"))
	}
	var id [4]byte
	rand.Read(id[:])
	m.ID = hex.EncodeToString(id[:])
	ms, err := p.own.MaintenanceList()
	if err != nil {
		return m, err
	}
	if err := p.own.SetMaintenance(append(ms, m)); err != nil {
		return m, err
	}
	p.Poke()
	return m, nil
}

// RemoveMaintenance removes a window or rule by ID.
func (p *Publisher) RemoveMaintenance(id string) error {
	ms, err := p.own.MaintenanceList()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ms, func(m ledger.Maintenance) bool { return m.ID == id })
	if i < 0 {
		return fmt.Errorf("%w: no maintenance %s", api.ErrNotFound, id)
	}
	if err := p.own.SetMaintenance(slices.Delete(ms, i, i+1)); err != nil {
		return err
	}
	p.Poke()
	return nil
}

// MaintenanceWindows expands the planned maintenance into the windows an offer issued at
// now announces: those not over yet, within the horizon, earliest first, at most the cap.
func (p *Publisher) MaintenanceWindows(now time.Time) []protocol.MaintenanceWindow {
	ms, err := p.own.MaintenanceList()
	if err != nil {
		return nil
	}
	var out []protocol.MaintenanceWindow
	for _, m := range ms {
		if m.Rule != "" {
			if r, err := protocol.ParseMaintenanceRule(m.Rule, m.Note); err == nil {
				out = append(out, r.Windows(now, now.Add(protocol.MaintenanceHorizon))...)
			}
			continue
		}
		if m.To.After(now) && m.From.Before(now.Add(protocol.MaintenanceHorizon)) {
			out = append(out, protocol.MaintenanceWindow{From: m.From.UTC(), To: m.To.UTC(), Note: m.Note})
		}
	}
	slices.SortFunc(out, func(a, b protocol.MaintenanceWindow) int { return a.From.Compare(b.From) })
	if len(out) > protocol.MaxMaintenanceWindows {
		out = out[:protocol.MaxMaintenanceWindows]
	}
	return out
}
