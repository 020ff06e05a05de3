package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Planned maintenance: the provider keeps windows and recurring rules in its ledger and
// announces the windows ahead in its offer; the coordinator does not count probes missed
// inside them.

// AddMaintenance adds a window (From, To) or a recurring rule and republishes the offer.
func (n *Node) AddMaintenance(m ledger.Maintenance) (ledger.Maintenance, error) {
	if n.prov == nil {
		return m, fmt.Errorf("%w: only providers declare maintenance", ErrWrongRole)
	}
	now := n.clock.Now()
	switch {
	case m.Rule != "" && (!m.From.IsZero() || !m.To.IsZero()):
		return m, badRequest(errors.New("give either a window (from, to) or a recurring rule"))
	case m.Rule != "":
		if _, err := protocol.ParseMaintenanceRule(m.Rule, m.Note); err != nil {
			return m, badRequest(err)
		}
	case !m.To.After(m.From) || m.To.Sub(m.From) > protocol.MaxMaintenanceLength:
		return m, badRequest(fmt.Errorf("maintenance window: to must be after from, at most %s later", protocol.MaxMaintenanceLength))
	case !m.To.After(now):
		return m, badRequest(errors.New("maintenance window already over"))
	}
	if len(m.Note) > 200 {
		return m, badRequest(errors.New("note: at most 200 bytes"))
	}
	var id [4]byte
	rand.Read(id[:])
	m.ID = hex.EncodeToString(id[:])
	ms, err := n.ledger.MaintenanceList()
	if err != nil {
		return m, err
	}
	if err := n.ledger.SetMaintenance(append(ms, m)); err != nil {
		return m, err
	}
	n.prov.poke()
	return m, nil
}

// RemoveMaintenance removes a window or rule by ID.
func (n *Node) RemoveMaintenance(id string) error {
	ms, err := n.ledger.MaintenanceList()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ms, func(m ledger.Maintenance) bool { return m.ID == id })
	if i < 0 {
		return fmt.Errorf("%w: no maintenance %s", ErrNotFound, id)
	}
	if err := n.ledger.SetMaintenance(slices.Delete(ms, i, i+1)); err != nil {
		return err
	}
	if n.prov != nil {
		n.prov.poke()
	}
	return nil
}

// maintenanceWindows expands the planned maintenance into the windows an offer issued at
// now announces: those not over yet, within the horizon, earliest first, at most the cap.
func (n *Node) maintenanceWindows(now time.Time) []protocol.MaintenanceWindow {
	ms, err := n.ledger.MaintenanceList()
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

// Maintenance is a planned maintenance window or rule (see ledger.Maintenance).
type Maintenance = ledger.Maintenance

// MaintenanceView is the answer of GET /v1/provider/maintenance.
type MaintenanceView struct {
	Planned   []Maintenance                `json:"planned"`
	Announced []protocol.MaintenanceWindow `json:"announced"`
}
