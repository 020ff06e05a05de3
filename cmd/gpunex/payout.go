package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/api"
)

// gpunex payout: the provider's payout settings change asked for from a dashboard session
// waits for [payout] change_delay; on the node's terminal (with api.token, which only the
// machine's user can read) it is confirmed at once or cancelled.

func payoutCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{Use: "payout", Short: "Show, confirm or cancel a payout settings change waiting to apply"}
	c.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	for _, sub := range []struct{ use, short, method, path string }{
		{"show", "Show the payout settings in force and any change waiting", "GET", "/v1/provider/payout"},
		{"confirm", "Apply the payout settings change waiting at once (on the node's terminal only)", "POST", "/v1/provider/payout/confirm"},
		{"cancel", "Cancel the payout settings change waiting", "DELETE", "/v1/provider/payout/pending"},
	} {
		c.AddCommand(&cobra.Command{Use: sub.use + " [--json]", Short: sub.short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return ask(cmd, asJSON, func(cl *api.Client, ctx context.Context) (api.PayoutSettingsView, error) {
					var v api.PayoutSettingsView
					return v, cl.Do(ctx, sub.method, sub.path, nil, &v)
				}, printPayoutSettings)
			}})
	}
	return c
}

func printPayoutSettings(out io.Writer, v api.PayoutSettingsView) error {
	switch {
	case v.Settings == nil:
		fmt.Fprintln(out, "in force: none (earnings wait at the coordinator)")
	default:
		from := "the dashboard"
		if v.FromConfig {
			from = "config.toml"
		}
		fmt.Fprintf(out, "in force: paid %s by %s to %s (from %s)\n", v.Settings.Schedule, v.Settings.Method, v.Settings.Destination(), from)
	}
	if p := v.Pending; p != nil {
		what := "back to [payout] of config.toml"
		if p.Settings != nil {
			what = fmt.Sprintf("paid %s by %s to %s", p.Settings.Schedule, p.Settings.Method, p.Settings.Destination())
		}
		fmt.Fprintf(out, "waiting: %s, asked for %s, applies %s (gpunex payout confirm | cancel)\n", what,
			p.RequestedAt.Local().Format(time.DateTime), p.ApplyAt.Local().Format(time.DateTime))
	}
	return nil
}
