package node

import (
	"context"
	"fmt"
	"time"

	"github.com/gpunex/gpunex/bench"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/alerts"
	"github.com/gpunex/gpunex/node/internal/p2p"
)

// The node's alerts to its operator (docs/operations.md, "Alerts"): the benchmark runner's
// and the applicant's events are wired where they are built; the conditions below are
// checked every alerts.CheckEvery.

// watchAlerts adds the conditions of the node's role: the disk of its data folder (dir,
// "" for none), and for a provider its certificate's expiry, its score and its payouts.
func (n *Node) watchAlerts(dir string) {
	a := n.alerts
	if dir != "" {
		a.Watch(alerts.Condition{Key: "disk", Resolved: "the disk has room again", Check: func(time.Time) (bool, string, string, bool) {
			limit := n.cfg.Alerts.DiskFreeGB
			free, err := bench.FreeGiB(dir)
			if err != nil || limit <= 0 {
				return false, "", "", err == nil
			}
			// Resolved only with 10% (at least 1 GiB) more than the level: a disk hovering
			// around it is not told about at every check.
			if was, _ := n.ledger.Alerts.AlertFiring("disk"); was {
				limit += max(1, limit/10)
			}
			return free < limit, fmt.Sprintf("the disk is filling up: %d GiB free", free),
				fmt.Sprintf("%s has %d GiB free, under alerts.disk_free_gb (%d). The ledger, images and jobs' output live there: free space, or lower jobs.image_cache_gb.", dir, free, limit), true
		}})
	}
	if n.cfg.Role != config.RoleProvider {
		return
	}
	a.Watch(alerts.Condition{Key: "certificate-expiring", Resolved: "the certificate was renewed", Check: func(now time.Time) (bool, string, string, bool) {
		c := n.applicant.HeldCertificate()
		days := n.cfg.Alerts.CertificateDays
		if c == nil || days <= 0 {
			return false, "", "", c != nil
		}
		left := c.ExpiresAt.Sub(now)
		return left < time.Duration(days)*24*time.Hour, fmt.Sprintf("the certificate expires in %d days", int(left.Hours()/24)),
			fmt.Sprintf("Certificate %d (%s tier) expires on %s. The coordinator renews approved certificates 30 days ahead and the node asks for it: check `gpunex apply status`.",
				c.Serial, c.Tier, c.ExpiresAt.UTC().Format(time.RFC1123)), true
	}})
	a.Watch(alerts.Condition{Key: "score", Resolved: "the score is back above the alert level", Check: func(time.Time) (bool, string, string, bool) {
		s := n.ownScore()
		level := n.cfg.Alerts.ScoreBelow
		if s == nil || level <= 0 {
			return false, "", "", s != nil
		}
		if was, _ := n.ledger.Alerts.AlertFiring("score"); was {
			level += 5 // resolved 5 points above the level, not at every wobble around it
		}
		return s.Score < level, fmt.Sprintf("the score fell to %d", s.Score),
			fmt.Sprintf("The coordinator's latest score is %d, under alerts.score_below (%d): uptime %.3f, job completion %.3f, benchmark consistency %.3f. `gpunex score` says what moved it.",
				s.Score, level, s.Uptime, s.Completion, s.Consistency), true
	}})
	// Unreachable: behind NAT with no relay slot, renters cannot reach the provider at all.
	// Told after 5 minutes (a reservation is retried every 20 s), resolved once reachable or
	// relayed.
	a.Watch(alerts.Condition{Key: "unreachable", Resolved: "the node is reachable again", Check: func(now time.Time) (bool, string, string, bool) {
		return unreachable(n.peer.Reachability(), n.applicant.HeldCertificate() != nil, now)
	}})
	var lastPayouts time.Time
	a.Watch(alerts.Condition{Key: "payouts", Check: func(now time.Time) (bool, string, string, bool) {
		// Payouts are batched daily at most: asking the coordinator hourly is enough.
		if now.Sub(lastPayouts) >= time.Hour {
			lastPayouts = now
			n.alertPayouts()
		}
		return false, "", "", false
	}})
}

// alertPayouts tells the operator of each payout paid since the last check, once. At the
// first check the payouts already paid are only noted.
func (n *Node) alertPayouts() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := n.wallet.Earnings(ctx, api.EarningsQuery{Period: "month"})
	if err != nil {
		return
	}
	n.earningsPending.Store(v.Pending)
	n.earningsChecked.Store(n.clock.Now().Unix())
	seeded, _ := n.ledger.Alerts.AlertFiring("payouts-seen")
	for _, p := range v.Payouts {
		if !p.Paid {
			continue
		}
		if told, _ := n.ledger.Alerts.SetAlertFiring("payout/"+p.Batch, true); told || !seeded {
			continue
		}
		n.alerts.Event("payout", fmt.Sprintf("payout of %s USDC sent", p.AmountUSDC),
			fmt.Sprintf("Batch %s paid %s USDC for %d receipts by %s to %s (transaction %s %s).", p.Batch, p.AmountUSDC, p.Receipts, p.Method, p.Destination, p.Transaction, p.Explorer))
	}
	n.ledger.Alerts.SetAlertFiring("payouts-seen", true)
}

// unreachable is the unreachable alert's rule: a certified provider that peers found behind
// a NAT or firewall, with no relay slot for 5 minutes (a slot is asked for every 20 s).
// ok is false while it cannot be told yet.
func unreachable(r p2p.Reachability, certified bool, now time.Time) (firing bool, subject, body string, ok bool) {
	switch {
	case !certified:
		return false, "", "", true // nothing to rent: nobody needs to reach it
	case r.State == "unknown":
		return false, "", "", false
	case r.State == "public" || len(r.Relays) > 0:
		return false, "", "", true
	case now.Sub(r.Since) < 5*time.Minute:
		return false, "", "", false // a relay slot is asked for every 20 s
	}
	return true, "the node is unreachable from outside",
		fmt.Sprintf("Peers found this node behind a NAT or firewall at %s, and no coordinator gives it a relay slot: renters cannot reach it, so its offer cannot be rented. Forward TCP and UDP 4001 to this machine (or enable UPnP on the router), and check `gpunex status` and `gpunex doctor`.",
			r.Since.UTC().Format(time.RFC1123)), true
}
