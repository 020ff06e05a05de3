package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
	"github.com/spf13/cobra"
)

func scoreCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "score [PEER] [--json]",
		Short: "Show providers' reliability scores and what moved them (this node's own when it is a provider and no PEER is given)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			provider, own := "", false
			if len(args) == 1 {
				provider = args[0]
			} else if st, err := cl.Status(cmd.Context()); err == nil && st.Role == "provider" {
				provider, own = st.PeerID, true
			}
			if own && !asJSON {
				printTier(cmd, cl)
			}
			scores, err := cl.Scores(cmd.Context(), provider)
			if own && errors.Is(err, api.ErrNotFound) {
				err = nil // none yet: said below
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), scores)
			}
			if len(scores) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no score records yet")
				return nil
			}
			w := newTable(cmd.OutOrStdout())
			fmt.Fprintln(w, "PROVIDER\tSCORE\tTREND\tUPTIME\tCOMPLETION\tBENCH CONSISTENCY\tPROBES\tJOBS\tBENCHMARKS\tBY COORDINATOR")
			for _, s := range scores {
				fmt.Fprintf(w, "%s\t%d\t%+d\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%s\n", s.Provider, s.Score, s.Trend, s.Uptime, s.Completion, s.Consistency, s.Probes, s.Jobs, s.Benchmarks, s.Coordinator)
			}
			w.Flush()
			for _, s := range scores {
				if len(s.Why) > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", s.Provider, strings.Join(s.Why, "; "))
				}
			}
			return nil
		},
	}
	jsonFlag(c, &asJSON)
	return c
}

// printTier shows a provider its tier and where the tier rule stands (docs/onboarding.md,
// "The tier after approval").
func printTier(cmd *cobra.Command, cl *api.Client) {
	v, err := cl.ApplyStatus(cmd.Context())
	if err != nil || v.Certificate == nil {
		return
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "tier: %s (certificate %d, until %s)\n", v.Certificate.Tier, v.Certificate.Serial, v.Certificate.ExpiresAt.Local().Format(time.DateTime))
	if v.Certificate.Tier == protocol.TierEnterprise {
		fmt.Fprintln(out, "tier rule: Enterprise holds while the coordinator measures your link at its Enterprise minimum each way at your benchmark runs;"+
			" under it for the coordinator's grace period (7 days by default), the tier moves down to Community")
	}
	if m, ok := strings.CutPrefix(v.Message, protocol.TierMessagePrefix); ok {
		fmt.Fprintf(out, "tier news (%s): %s\n", v.UpdatedAt.Local().Format(time.DateTime), m)
	}
	fmt.Fprintln(out)
}
