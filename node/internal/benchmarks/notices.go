package benchmarks

import (
	"fmt"
	"strings"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// What a run tells the operator: a notice (kept in the ledger, logged, and alerted) for
// each GPU, or the whole host, delisted or listed again.

// notifyChanges tells the operator about every GPU that fell under a threshold or came
// back over it, and about the host's link or disk falling under its minimum or passing
// again.
func (b *Runner) notifyChanges(old, cur *protocol.SignedAttestation) {
	wasBelow := ""
	if old != nil {
		wasBelow = old.HostBelow
	}
	switch {
	case cur.HostBelow != "" && wasBelow == "":
		b.notice("this provider is delisted: its link or disk is under the minimum", cur.HostBelow+
			". Every GPU stays out of your offer and gets no job until a benchmark run passes (gpunex bench run; the minimums are in docs/benchmarks.md).")
	case cur.HostBelow == "" && wasBelow != "":
		b.notice("this provider is listed again: its link and disk pass the minimums", "The latest benchmarks pass the host minimums; your GPUs are back in your offer unless one is under its own threshold.")
	}
	was := map[string]string{}
	if old != nil {
		for _, g := range old.GPUs {
			was[g.UUID] = g.Below
		}
	}
	now := map[string]bool{}
	for _, g := range cur.GPUs {
		now[g.UUID] = true
		before, known := was[g.UUID]
		switch {
		case strings.HasPrefix(g.Below, protocol.LostPrefix) && (!known || before == ""):
			b.notice(fmt.Sprintf("GPU %s (%s) delisted", g.UUID, g.Model), g.Below+": the driver no longer reaches it (fallen off the bus). "+
				"Check `nvidia-smi` and the kernel log for Xid errors, power and seating; a lost GPU usually needs a reboot. "+
				"It stays out of your offer and gets no job until it answers again.")
		case strings.HasPrefix(g.Below, protocol.NotInCatalogue) && (!known || before == ""):
			b.notice(fmt.Sprintf("GPU %s (%s) delisted", g.UUID, g.Model), g.Below+". It stays out of your offer until the coordinator's model catalogue holds "+
				"its model (ask the coordinator; `gpunex coordinator models list` on its node shows the catalogue): the node benchmarks it again as soon as the catalogue arrives.")
		case g.Below != "" && (!known || before == ""):
			b.notice(fmt.Sprintf("GPU %s (%s) delisted", g.UUID, g.Model), g.Below+". It stays out of your offer until a benchmark run passes (gpunex bench run).")
		case g.Below == "" && known && before != "":
			b.notice(fmt.Sprintf("GPU %s (%s) listed again", g.UUID, g.Model), fmt.Sprintf("The latest benchmarks pass the thresholds (performance score %d).", g.PerfScore))
		}
	}
	// A lost GPU has no UUID of its own in the attestation (lost-<index>): when it answers
	// again, its entry is gone.
	if old != nil {
		for _, g := range old.GPUs {
			if strings.HasPrefix(g.Below, protocol.LostPrefix) && !now[g.UUID] {
				b.notice(fmt.Sprintf("GPU %s (%s) answers again", g.UUID, g.Model), "The driver reaches it again; it is back in your offer once its benchmarks pass (see gpunex bench show).")
			}
		}
	}
}

func (b *Runner) notice(subject, body string) {
	now := b.clock.Now()
	seq, err := b.serials.NextSerial("node-notification", now)
	if err == nil {
		_, err = b.notifications.AddNotification(ledger.Notification{ReceivedAt: now, From: "node", Seq: seq, Subject: subject, Body: body})
	}
	if err != nil {
		b.log.Warn("storing a notification failed", "err", err)
	}
	b.log.Warn(subject, "why", body)
	if b.alert != nil {
		b.alert("benchmarks", subject, body)
	}
}

// Delisted counts, per model, the GPUs the latest attestation puts under a threshold (all
// of them when the host is under its minimum).
func (b *Runner) Delisted() map[string]int {
	out := map[string]int{}
	if a := b.Latest(); a != nil {
		for _, g := range a.GPUs {
			if g.Below != "" || a.HostBelow != "" {
				out[g.Model]++
			}
		}
	}
	return out
}
