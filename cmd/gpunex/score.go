package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

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
			provider := ""
			if len(args) == 1 {
				provider = args[0]
			} else if st, err := cl.Status(cmd.Context()); err == nil && st.Role == "provider" {
				provider = st.PeerID
			}
			scores, err := cl.Scores(cmd.Context(), provider)
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
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "PROVIDER\tSCORE\tTREND\tUPTIME\tCOMPLETION\tBENCH CONSISTENCY\tPROBES\tJOBS\tBENCHMARKS")
			for _, s := range scores {
				fmt.Fprintf(w, "%s\t%d\t%+d\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\n", s.Provider, s.Score, s.Trend, s.Uptime, s.Completion, s.Consistency, s.Probes, s.Jobs, s.Benchmarks)
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
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
