package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// `gpunex job extend`: a running job's lease made longer (docs/renting.md, "Extending a
// lease").

func jobExtendCommand() *cobra.Command {
	var hours float64
	c := &cobra.Command{
		Use:   "extend ID --hours H",
		Short: "Make a running job's lease longer, before it ends",
		Long: "Extend a running job's lease by H hours (at most its --max-hours each time): the job's escrow hold is\n" +
			"raised at its coordinator to cover the longer lease, then the provider signs the longer lease. Refused,\n" +
			"the lease unchanged, when the balance does not cover it or the provider's availability ends sooner.\n" +
			"The job is still charged for the time it runs.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.ExtendJob(cmd.Context(), args[0], hours)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s: the lease now ends at %s\n", args[0], v.EndsAt.UTC().Format(time.RFC3339))
			return nil
		},
	}
	c.Flags().Float64Var(&hours, "hours", 0, "hours to add to the lease (required; at most the job's --max-hours)")
	c.MarkFlagRequired("hours")
	return c
}
