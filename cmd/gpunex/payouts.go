package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/protocol"
)

// `gpunex coordinator payouts`: the coordinator's payout batches (docs/settlement.md).

func payoutsCommand() *cobra.Command {
	c := &cobra.Command{Use: "payouts", Short: "Run, list, show and confirm payout batches"}
	var asJSON bool
	c.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(payoutsRunCommand(&asJSON), payoutsListCommand(&asJSON), payoutsShowCommand(&asJSON),
		payoutsConfirmCommand(&asJSON), payoutsExportCommand(), payoutsReplanCommand(&asJSON))
	return c
}

func payoutsRunCommand(asJSON *bool) *cobra.Command {
	var o api.PayoutRunOptions
	var minUSDC string
	c := &cobra.Command{
		Use:   "run [--now] [--min-usdc X] [--dry-run] [--json]",
		Short: "Pay every due provider its pending earnings (weekly on Mondays, monthly on the first business day; --now: all)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if minUSDC != "" {
				m, err := protocol.ParseUSDC(minUSDC)
				if err != nil {
					return err
				}
				o.Min = &m
			}
			run := func(cl *api.Client, ctx context.Context) (api.BatchView, error) { return cl.RunPayouts(ctx, o) }
			return ask(cmd, *asJSON, run, printBatch)
		},
	}
	c.Flags().BoolVar(&o.Now, "now", false, "pay every provider with pending earnings, whatever its schedule")
	c.Flags().StringVar(&minUSDC, "min-usdc", "", "least pending amount paid (default: settlement.min_payout_usdc)")
	c.Flags().BoolVar(&o.DryRun, "dry-run", false, "plan and check, send nothing")
	return c
}

func payoutsListCommand(asJSON *bool) *cobra.Command {
	return &cobra.Command{
		Use:   "list [--json]",
		Short: "List payout batches",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, *asJSON, (*api.Client).Batches, printBatches)
		},
	}
}

func printBatches(out io.Writer, vs []api.BatchView) error {
	w := newTable(out)
	fmt.Fprintln(w, "BATCH\tCREATED\tSTATE\tPAYOUTS\tUSDC\tTRANSACTIONS")
	for _, v := range vs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\n", v.BatchID, v.CreatedAt.Format("2006-01-02 15:04"), v.State, len(v.Payouts), v.TotalUSDC, len(v.Transactions))
	}
	return w.Flush()
}

func payoutsShowCommand(asJSON *bool) *cobra.Command {
	var raw, bundle bool
	c := &cobra.Command{
		Use:   "show ID [--raw | --bundle] [--json]",
		Short: "Show a payout batch; --raw prints its signed record, --bundle the audit bundle (batch, receipts, leases, holds, settings)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPayoutsShow(cmd, args[0], raw, bundle, *asJSON)
		},
	}
	c.Flags().BoolVar(&raw, "raw", false, "print the signed PayoutBatch record (gpunex verify reads it)")
	c.Flags().BoolVar(&bundle, "bundle", false, "print the audit bundle as JSON (gpunex audit payouts --batch FILE reads it)")
	return c
}

func runPayoutsShow(cmd *cobra.Command, id string, raw, bundle, asJSON bool) error {
	cl, err := client(cmd)
	if err != nil {
		return err
	}
	if bundle {
		b, err := cl.Bundle(cmd.Context(), id)
		if err != nil {
			return err
		}
		return printJSON(cmd.OutOrStdout(), b.Bundle)
	}
	v, err := cl.Batch(cmd.Context(), id)
	if err != nil {
		return err
	}
	if raw {
		_, err := cmd.OutOrStdout().Write(v.Record)
		return err
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), v)
	}
	return printBatch(cmd.OutOrStdout(), v.BatchView)
}

func payoutsConfirmCommand(asJSON *bool) *cobra.Command {
	var reference string
	var providers []string
	c := &cobra.Command{
		Use:   "confirm ID --reference REF [--provider PEER]...",
		Short: "Mark a batch's bank-transfer payouts paid once the bank confirmed them",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			confirm := func(cl *api.Client, ctx context.Context) (api.BatchView, error) {
				return cl.ConfirmBank(ctx, args[0], reference, providers)
			}
			return ask(cmd, *asJSON, confirm, printBatch)
		},
	}
	c.Flags().StringVar(&reference, "reference", "", "the bank's reference of the transfers")
	c.Flags().StringSliceVar(&providers, "provider", nil, "only these providers (default: every bank payout of the batch)")
	c.MarkFlagRequired("reference")
	return c
}

func payoutsExportCommand() *cobra.Command {
	var format, output string
	c := &cobra.Command{
		Use:   "export ID [--format csv|pain001] [-o FILE]",
		Short: "Write a batch's bank-transfer payouts as a file for the operator's bank",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			data, err := cl.BankExport(cmd.Context(), args[0], format)
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				_, err = io.WriteString(cmd.OutOrStdout(), data)
				return err
			}
			return os.WriteFile(output, []byte(data), 0o600)
		},
	}
	c.Flags().StringVar(&format, "format", "csv", "csv or pain001 (ISO 20022 pain.001.001.03)")
	c.Flags().StringVarP(&output, "output", "o", "", "file to write (default: standard output)")
	return c
}

func payoutsReplanCommand(asJSON *bool) *cobra.Command {
	var providers []string
	c := &cobra.Command{
		Use:   "replan ID [--provider PEER]... [--json]",
		Short: "Move unpaid payouts (all, or those providers') out of a batch that cannot settle, settle the rest; the next batch pays them",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			replan := func(cl *api.Client, ctx context.Context) (api.BatchView, error) {
				return cl.ReplanPayouts(ctx, args[0], providers)
			}
			return ask(cmd, *asJSON, replan, printBatch)
		},
	}
	c.Flags().StringSliceVar(&providers, "provider", nil, "the provider whose payout to move (repeatable; all unpaid ones when absent)")
	return c
}

func printBatch(out io.Writer, v api.BatchView) error {
	if v.State == "empty" {
		fmt.Fprintln(out, "nothing to pay")
	} else {
		fmt.Fprintf(out, "batch_id %s: %s, %d payouts, %s USDC, %d transactions, %d lamports of fees\n", v.BatchID, v.State, len(v.Payouts), v.TotalUSDC, len(v.Transactions), v.FeesLamports)
		if v.MerkleRoot != "" {
			fmt.Fprintf(out, "receipts Merkle root %s\n", v.MerkleRoot)
		}
		w := newTable(out)
		fmt.Fprintln(w, "PROVIDER\tMETHOD\tDESTINATION\tUSDC\tRECEIPTS\tPAID\tTRANSACTION")
		for _, p := range v.Payouts {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%v\t%s\n", p.Provider, p.Method, p.Destination, p.AmountUSDC, p.Receipts, p.Paid, dash(p.Transaction))
		}
		w.Flush()
	}
	for _, d := range v.Deferred {
		fmt.Fprintf(out, "moved to the next batch: %s, %s USDC (%d receipts): %s\n", d.Provider, d.AmountUSDC, d.Receipts, d.Reason)
	}
	for _, s := range v.Skipped {
		fmt.Fprintf(out, "skipped %s\n", s)
	}
	if v.Error != "" {
		fmt.Fprintf(out, "error: %s\n", v.Error)
	}
	return nil
}
