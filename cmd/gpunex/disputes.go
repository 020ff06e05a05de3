package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

// `gpunex coordinator disputes`: renters' disputes of job receipts (docs/settlement.md).

func disputesCommand() *cobra.Command {
	c := &cobra.Command{Use: "disputes", Short: "List, show and resolve renters' disputes of job receipts"}
	var asJSON bool
	c.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(disputesListCommand(&asJSON), disputesShowCommand(&asJSON), disputesResolveCommand(&asJSON))
	return c
}

func disputesListCommand(asJSON *bool) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "list [--all] [--json]",
		Short: "List open disputes (--all: decided ones too)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			disputes := func(cl *api.Client, ctx context.Context) ([]api.DisputeView, error) { return cl.Disputes(ctx, all) }
			return ask(cmd, *asJSON, disputes, printDisputes)
		},
	}
	c.Flags().BoolVar(&all, "all", false, "decided disputes too")
	return c
}

func printDisputes(out io.Writer, vs []api.DisputeView) error {
	w := newTable(out)
	fmt.Fprintln(w, "JOB\tRECEIVED\tSTATE\tRECEIPT USDC\tREPORTED\tRENTER SAYS\tFLOOR\tREASON")
	for _, v := range vs {
		reported := v.ReportedUSDC
		if v.Equivocation {
			reported += " (another receipt!)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Job, v.ReceivedAt.Format("2006-01-02 15:04"), v.State, v.ClaimedUSDC, reported, v.RenterSaysUSDC, v.FloorUSDC, v.Reason)
	}
	return w.Flush()
}

func disputesShowCommand(asJSON *bool) *cobra.Command {
	return &cobra.Command{
		Use:   "show JOB [--json]",
		Short: "Show a dispute: both sides' figures and the signed records",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dispute := func(cl *api.Client, ctx context.Context) (api.DisputeView, error) { return cl.Dispute(ctx, args[0]) }
			return ask(cmd, *asJSON, dispute, printDispute)
		},
	}
}

func printDispute(out io.Writer, v api.DisputeView) error {
	fmt.Fprintf(out, "Job %s (%s)\n  renter:   %s\n  provider: %s\n", v.Job, v.State, v.Renter, v.Provider)
	fmt.Fprintf(out, "  the receipt charges %s USDC; the renter says %s USDC (%s)\n", v.ClaimedUSDC, v.RenterSaysUSDC, v.Reason)
	switch {
	case v.Equivocation:
		fmt.Fprintf(out, "  THE PROVIDER SIGNED TWO RECEIPTS: it reported another one, of %s USDC. A decision charges at most the smaller; consider revoking its certificate.\n", v.ReportedUSDC)
	case v.ReportedUSDC != "":
		fmt.Fprintf(out, "  the provider reported this receipt\n")
	default:
		fmt.Fprintf(out, "  the provider has not reported the job yet\n")
	}
	if v.FloorUSDC != "" {
		fmt.Fprintf(out, "  the renter's countersigned checkpoints prove %s USDC: a decision charges at least that\n", v.FloorUSDC)
	}
	if !v.DecidedAt.IsZero() {
		fmt.Fprintf(out, "  decided %s: charged %s USDC\n", v.DecidedAt.Format(time.RFC3339), v.ChargedUSDC)
	} else {
		fmt.Fprintf(out, "Decide with: gpunex coordinator disputes resolve %s --for provider|renter, or --usdc AMOUNT\n", v.Job)
	}
	return nil
}

func disputesResolveCommand(asJSON *bool) *cobra.Command {
	var req api.ResolveRequest
	c := &cobra.Command{
		Use:   "resolve JOB (--for provider|renter | --usdc AMOUNT) [--note TEXT]",
		Short: "Decide a dispute: charge the receipt, what the renter said, or an amount between the checkpoints' floor and the receipt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resolve := func(cl *api.Client, ctx context.Context) (api.DisputeView, error) {
				return cl.ResolveDispute(ctx, args[0], req)
			}
			return ask(cmd, *asJSON, resolve, func(w io.Writer, v api.DisputeView) error {
				fmt.Fprintf(w, "Job %s decided: charged %s USDC (the receipt claimed %s)\n", v.Job, v.ChargedUSDC, v.ClaimedUSDC)
				return nil
			})
		},
	}
	c.Flags().StringVar(&req.For, "for", "", "provider (the receipt's amount) or renter (what the renter said, at least its checkpoints)")
	c.Flags().StringVar(&req.USDC, "usdc", "", "charge this amount instead")
	c.Flags().StringVar(&req.Note, "note", "", "why, signed into the decision")
	return c
}
