package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpunex/gpunex/ledger/audit"
	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/protocol"
)

// Money commands: wallet, earnings, price recommend, coordinator payouts, audit payouts.
// docs/settlement.md.

func walletCommand() *cobra.Command {
	c := &cobra.Command{Use: "wallet", Short: "The node's Solana wallet and its balance at the coordinator (deposits, escrow holds)"}
	var asJSON bool
	var coordinator string
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the node's Solana wallet keypair (wallet.keypair, mode 0600) and print its address",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			addr, err := cl.WalletInit(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wallet created: %s\nfund it with SOL for fees and USDC, then: gpunex wallet deposit --usdc AMOUNT\n", addr)
			return nil
		},
	}
	var usdc string
	deposit := &cobra.Command{
		Use:   "deposit --usdc AMOUNT",
		Short: "Send USDC from the wallet to the coordinator's treasury (memo naming this node) and have it credited",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := protocol.ParseUSDC(usdc); err != nil {
				return err
			}
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Deposit(cmd.Context(), usdc, coordinator)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deposited %s USDC in transaction %s\n%s\n", v.AmountUSDC, v.Signature, v.Explorer)
			if v.Balance != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "available %s USDC, held %s USDC\n", v.Balance.AvailableUSDC, v.Balance.HeldUSDC)
			}
			return nil
		},
	}
	deposit.Flags().StringVar(&usdc, "usdc", "", "amount of USDC, e.g. 100 or 12.50")
	deposit.MarkFlagRequired("usdc")
	claim := &cobra.Command{
		Use:   "claim [SIGNATURE]",
		Short: "Have the coordinator credit deposits sent but not credited yet (after a crash or an outage)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			sig := ""
			if len(args) == 1 {
				sig = args[0]
			}
			vs, err := cl.ClaimDeposits(cmd.Context(), sig, coordinator)
			if asJSON {
				printJSON(cmd.OutOrStdout(), vs)
				return err
			}
			for _, v := range vs {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: credited=%v\n", v.Signature, v.Credited)
			}
			if len(vs) == 0 && err == nil {
				fmt.Fprintln(cmd.OutOrStdout(), "every deposit is credited")
			}
			return err
		},
	}
	release := &cobra.Command{
		Use:   "release JOB",
		Short: "Ask for the escrow hold of a job that did not run (the provider confirms it never ran)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			b, err := cl.ReleaseHold(cmd.Context(), args[0], coordinator)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "hold released: available %s USDC, held %s USDC\n", b.AvailableUSDC, b.HeldUSDC)
			return nil
		},
	}
	balance := &cobra.Command{
		Use:   "balance [--json]",
		Short: "Show available and held funds at the coordinator, and the wallet's own USDC",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			b, err := cl.Balance(cmd.Context(), coordinator)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), b)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "coordinator %s\n", b.Coordinator)
			fmt.Fprintf(out, "available  %s USDC\nheld       %s USDC\ndeposited  %s USDC\ncharged    %s USDC\n", b.AvailableUSDC, b.HeldUSDC, b.DepositedUSDC, b.ChargedUSDC)
			if b.Wallet != "" {
				fmt.Fprintf(out, "wallet     %s holds %s USDC\n", b.Wallet, b.WalletUSDC)
			}
			if len(b.Holds) > 0 {
				w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
				fmt.Fprintln(w, "\nJOB\tPROVIDER\tHOLD USDC\tSTATE\tCHARGED USDC\tEXPIRES")
				for _, h := range b.Holds {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", h.Job, h.Provider, h.AmountUSDC, h.State, dash(h.ChargeUSDC), h.ExpiresAt.Format("2006-01-02 15:04"))
				}
				w.Flush()
			}
			return nil
		},
	}
	c.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	c.PersistentFlags().StringVar(&coordinator, "coordinator", "", "peer ID of the coordinator that keeps the account, one of trust.coordinators (default: the first; a job's hold is at the coordinator that certified its provider)")
	c.AddCommand(initCmd, deposit, claim, release, balance)
	return c
}

func earningsCommand() *cobra.Command {
	var period, from, to, by string
	var asJSON bool
	c := &cobra.Command{
		Use:   "earnings [--period week|month] [--from DATE --to DATE] [--by gpu|model] [--json]",
		Short: "Show a provider's earnings (after commission), pending payouts and payout history",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Earnings(cmd.Context(), url.Values{"period": {period}, "from": {from}, "to": {to}, "by": {by}})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s to %s: earned %s USDC (charged %s, commission %s)\npending payout %s USDC; paid out so far %s USDC\n",
				v.From.Format("2006-01-02"), v.To.Format("2006-01-02 15:04"), v.TotalUSDC, v.ChargedUSDC, v.CommissionUSDC, v.PendingUSDC, v.PaidUSDC)
			w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
			fmt.Fprintf(w, "\nBY %s\tJOBS\tGPU-HOURS\tEARNED USDC\n", strings.ToUpper(v.By))
			for _, g := range v.Groups {
				fmt.Fprintf(w, "%s\t%d\t%.2f\t%s\n", g.Key, g.Jobs, float64(g.GPUSeconds)/3600, g.NetUSDC)
			}
			fmt.Fprintln(w, "\nJOB\tENDED\tMODEL\tGPUS\tSECONDS\tCHARGED\tCOMMISSION\tEARNED\tPAID")
			for _, r := range v.History {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Job, r.EndedAt.Format("2006-01-02 15:04"), r.Model, r.GPUs, r.Seconds, r.ChargeUSDC, r.CommissionUSDC, r.NetUSDC, paidText(r.Paid, r.Batch))
			}
			w.Flush()
			for _, u := range v.Unreachable {
				fmt.Fprintf(out, "(not counted: %s)\n", u)
			}
			if v.Truncated {
				fmt.Fprintf(out, "(only the latest %d jobs of the period are listed, and grouped above; the totals cover them all: narrow --from/--to to see the rest)\n", len(v.History))
			}
			if len(v.Payouts) > 0 {
				w = tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
				fmt.Fprintln(w, "\nPAYOUT BATCH\tDATE\tMETHOD\tUSDC\tRECEIPTS\tSTATE\tTRANSACTION")
				for _, p := range v.Payouts {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.Batch, p.IssuedAt.Format("2006-01-02"), p.Method, p.AmountUSDC, p.Receipts, p.State, dash(p.Transaction))
				}
				w.Flush()
				for _, p := range v.Payouts {
					if p.Explorer != "" {
						fmt.Fprintf(out, "%s: %s\n", p.Batch, p.Explorer)
					}
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&period, "period", "month", "week or month: the current one")
	c.Flags().StringVar(&from, "from", "", "start date (2006-01-02), instead of the period's")
	c.Flags().StringVar(&to, "to", "", "end date (2006-01-02)")
	c.Flags().StringVar(&by, "by", "model", "group by gpu or model")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func paidText(paid bool, batch string) string {
	switch {
	case paid:
		return "paid (" + batch + ")"
	case batch != "":
		return "in " + batch
	}
	return "pending"
}

func priceCommand() *cobra.Command {
	c := &cobra.Command{Use: "price", Short: "Market prices"}
	var model, region string
	var asJSON bool
	rec := &cobra.Command{
		Use:   "recommend [--model M] [--region R] [--json]",
		Short: "Show the recommended hourly rate for a model and region and the market figures behind it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			adv, err := cl.Market(cmd.Context(), model, region)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), adv)
			}
			out := cmd.OutOrStdout()
			for _, a := range adv {
				fmt.Fprintf(out, "%s in %s: recommended %s USDC per GPU-hour", a.Model, a.Region, a.RecommendedUSDC)
				if a.YourPriceUSDC != "" {
					fmt.Fprintf(out, " (yours: %s)", a.YourPriceUSDC)
				}
				fmt.Fprintf(out, "\n  basis: %s\n  listed: %d GPUs from %d providers, median %s USDC\n  last %dh: %d leases, %s GPU-hours, median lease price %s USDC, utilisation %.1f%%\n  commission %.2f%%; statistics signed by %s at %s\n",
					a.Basis, a.ListedGPUs, a.ListedProviders, a.MedianListUSDC, a.WindowHours, a.Leases, a.LeasedGPUHours, a.MedianLeaseUSDC,
					float64(a.Utilisation)/10, float64(a.CommissionBPS)/100, a.Coordinator, a.IssuedAt.Format("2006-01-02 15:04 MST"))
			}
			fmt.Fprintln(out, "Following the recommendation is optional: gpunex offer set-price MODEL USDC")
			return nil
		},
	}
	rec.Flags().StringVar(&model, "model", "", "GPU model (all when empty)")
	rec.Flags().StringVar(&region, "region", "", "region (this provider's when empty)")
	rec.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(rec)
	return c
}

func payoutsCommand() *cobra.Command {
	c := &cobra.Command{Use: "payouts", Short: "Run, list, show and confirm payout batches"}
	var asJSON bool
	var now, dryRun bool
	var minUSDC string
	run := &cobra.Command{
		Use:   "run [--now] [--min-usdc X] [--dry-run] [--json]",
		Short: "Pay every due provider its pending earnings (weekly on Mondays, monthly on the first business day; --now: all)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := api.PayoutRunOptions{Now: now, DryRun: dryRun}
			if minUSDC != "" {
				m, err := protocol.ParseUSDC(minUSDC)
				if err != nil {
					return err
				}
				o.Min = &m
			}
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.RunPayouts(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return printBatch(cmd.OutOrStdout(), v)
		},
	}
	run.Flags().BoolVar(&now, "now", false, "pay every provider with pending earnings, whatever its schedule")
	run.Flags().StringVar(&minUSDC, "min-usdc", "", "least pending amount paid (default: settlement.min_payout_usdc)")
	run.Flags().BoolVar(&dryRun, "dry-run", false, "plan and check, send nothing")
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List payout batches",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			vs, err := cl.Batches(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), vs)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "BATCH\tCREATED\tSTATE\tPAYOUTS\tUSDC\tTRANSACTIONS")
			for _, v := range vs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\n", v.BatchID, v.CreatedAt.Format("2006-01-02 15:04"), v.State, len(v.Payouts), v.TotalUSDC, len(v.Transactions))
			}
			return w.Flush()
		},
	}
	var raw, bundle bool
	show := &cobra.Command{
		Use:   "show ID [--raw | --bundle] [--json]",
		Short: "Show a payout batch; --raw prints its signed record, --bundle the audit bundle (batch, receipts, leases, holds, settings)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			if bundle {
				b, err := cl.Bundle(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), b.Bundle)
			}
			v, err := cl.Batch(cmd.Context(), args[0])
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
		},
	}
	show.Flags().BoolVar(&raw, "raw", false, "print the signed PayoutBatch record (gpunex verify reads it)")
	show.Flags().BoolVar(&bundle, "bundle", false, "print the audit bundle as JSON (gpunex audit payouts --batch FILE reads it)")
	var reference string
	var providers []string
	confirm := &cobra.Command{
		Use:   "confirm ID --reference REF [--provider PEER]...",
		Short: "Mark a batch's bank-transfer payouts paid once the bank confirmed them",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.ConfirmBank(cmd.Context(), args[0], reference, providers)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return printBatch(cmd.OutOrStdout(), v)
		},
	}
	confirm.Flags().StringVar(&reference, "reference", "", "the bank's reference of the transfers")
	confirm.Flags().StringSliceVar(&providers, "provider", nil, "only these providers (default: every bank payout of the batch)")
	confirm.MarkFlagRequired("reference")
	var format, output string
	export := &cobra.Command{
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
	export.Flags().StringVar(&format, "format", "csv", "csv or pain001 (ISO 20022 pain.001.001.03)")
	export.Flags().StringVarP(&output, "output", "o", "", "file to write (default: standard output)")
	c.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	var replanFor []string
	replan := &cobra.Command{
		Use:   "replan ID [--provider PEER]... [--json]",
		Short: "Move unpaid payouts (all, or those providers') out of a batch that cannot settle, settle the rest; the next batch pays them",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.ReplanPayouts(cmd.Context(), args[0], replanFor)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return printBatch(cmd.OutOrStdout(), v)
		},
	}
	replan.Flags().StringSliceVar(&replanFor, "provider", nil, "the provider whose payout to move (repeatable; all unpaid ones when absent)")
	c.AddCommand(run, list, show, confirm, export, replan)
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
		w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
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

func auditCommand() *cobra.Command {
	c := &cobra.Command{Use: "audit", Short: "Audit the coordinator's settlement"}
	var batch, rpc string
	var coordinators []string
	var asJSON bool
	payouts := &cobra.Command{
		Use:   "payouts --batch FILE|ID --rpc URL [--json]",
		Short: "Recompute a payout batch from the signed receipts and check its transactions on Solana; exits 1 on any discrepancy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var bundle protocol.AuditBundle
			var known [][]byte
			if data, err := os.ReadFile(batch); err == nil {
				var f struct {
					protocol.AuditBundle
					Bundle *protocol.AuditBundle `json:"bundle"`
					Known  [][]byte              `json:"known"`
				}
				if err := json.Unmarshal(data, &f); err != nil {
					return fmt.Errorf("%s: not an audit bundle (gpunex coordinator payouts show ID --bundle writes one): %w", batch, err)
				}
				bundle, known = f.AuditBundle, f.Known
				if f.Bundle != nil {
					bundle = *f.Bundle
				}
			} else if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(batch, "/.") {
				cl, err := client(cmd)
				if err != nil {
					return fmt.Errorf("batch %s is not a file, and fetching it needs a running node: %w", batch, err)
				}
				v, err := cl.Bundle(cmd.Context(), batch)
				if err != nil {
					return err
				}
				bundle, known = *v.Bundle, v.Known
			} else {
				return err
			}
			h := home(cmd).Dir
			knownBatches, knownJobs := loadKnownBatches(h)
			o := audit.Options{RPC: rpc, Known: append(known, knownBatches...), KnownJobs: knownJobs}
			for _, s := range coordinators {
				id, err := peer.Decode(s)
				if err != nil {
					return fmt.Errorf("--coordinator %q: %w", s, err)
				}
				o.Trust = append(o.Trust, id)
			}
			if len(o.Trust) == 0 {
				if cfg, err := config.LoadConfig(filepath.Join(h, config.ConfigFile)); err == nil {
					o.Trust, _ = cfg.TrustedCoordinators()
				}
			}
			rep := audit.Batch(cmd.Context(), bundle, o)
			if rep.OK {
				rememberBatch(h, rep, bundle.Batch)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				printJSON(out, rep)
			} else {
				trust := "trusted"
				if !rep.Trusted {
					trust = "NOT checked against trusted coordinators (give --coordinator)"
				}
				fmt.Fprintf(out, "batch %s by coordinator %s (%s), state %s\n%d payouts, %d receipts (%d countersigned by their renter), %d transactions, %s USDC; %d other batches known\n",
					rep.Batch, rep.Coordinator, trust, rep.State, rep.Payouts, rep.Receipts, rep.Countersigned, rep.Transactions, rep.TotalUSDC, rep.KnownBatches)
				for _, d := range rep.Discrepancies {
					fmt.Fprintf(out, "DISCREPANCY: %s\n", d)
				}
				for _, u := range rep.Unverifiable {
					fmt.Fprintf(out, "not checkable: %s\n", u)
				}
				if rep.OK && len(rep.Unverifiable) > 0 {
					fmt.Fprintf(out, "OK: every amount recomputed from the signed receipts; the USDC payouts found on chain; %d bank payouts not checkable\n", len(rep.Unverifiable))
				} else if rep.OK {
					fmt.Fprintln(out, "OK: every amount recomputed from the signed receipts and found on chain")
				}
			}
			if !rep.OK {
				return exitError{1}
			}
			return nil
		},
	}
	payouts.Flags().StringVar(&batch, "batch", "", "an audit bundle file, or a batch ID fetched through the node")
	payouts.Flags().StringVar(&rpc, "rpc", "", "Solana JSON-RPC endpoint")
	payouts.Flags().StringSliceVar(&coordinators, "coordinator", nil, "trusted coordinator peer ID (default: trust.coordinators of --home)")
	payouts.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	payouts.MarkFlagRequired("batch")
	payouts.MarkFlagRequired("rpc")
	c.AddCommand(payouts)
	return c
}

// loadKnownBatches reads the batch records this auditor passed before (home/audit/), and
// the jobs each paid.
func loadKnownBatches(home string) ([][]byte, map[string]string) {
	dir := filepath.Join(home, "audit")
	entries, _ := os.ReadDir(dir)
	var records [][]byte
	jobs := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".batch"):
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				records = append(records, b)
			}
		case strings.HasSuffix(name, ".jobs"):
			var list []string
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && json.Unmarshal(b, &list) == nil {
				for _, j := range list {
					jobs[j] = strings.TrimSuffix(name, ".jobs")
				}
			}
		}
	}
	return records, jobs
}

// rememberBatch keeps a passed batch's record and jobs, for the double-payment checks of
// later audits.
func rememberBatch(home string, rep audit.Report, record []byte) {
	if rep.Batch == "" || strings.ContainsAny(rep.Batch, "/\\") {
		return
	}
	dir := filepath.Join(home, "audit")
	if os.MkdirAll(dir, 0o700) != nil {
		return
	}
	os.WriteFile(filepath.Join(dir, rep.Batch+".batch"), record, 0o600)
	if b, err := json.Marshal(rep.Jobs); err == nil {
		os.WriteFile(filepath.Join(dir, rep.Batch+".jobs"), b, 0o600)
	}
}

func disputesCommand() *cobra.Command {
	c := &cobra.Command{Use: "disputes", Short: "List, show and resolve renters' disputes of job receipts"}
	var asJSON, all bool
	list := &cobra.Command{
		Use:   "list [--all] [--json]",
		Short: "List open disputes (--all: decided ones too)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			vs, err := cl.Disputes(cmd.Context(), all)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), vs)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "JOB\tRECEIVED\tSTATE\tRECEIPT USDC\tRENTER SAYS\tFLOOR\tREASON")
			for _, v := range vs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Job, v.ReceivedAt.Format("2006-01-02 15:04"), v.State, v.ClaimedUSDC, v.RenterSaysUSDC, v.FloorUSDC, v.Reason)
			}
			return w.Flush()
		},
	}
	list.Flags().BoolVar(&all, "all", false, "decided disputes too")
	show := &cobra.Command{
		Use:   "show JOB [--json]",
		Short: "Show a dispute: both sides' figures and the signed records",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.Dispute(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Job %s (%s)\n  renter:   %s\n  provider: %s\n", v.Job, v.State, v.Renter, v.Provider)
			fmt.Fprintf(out, "  the receipt charges %s USDC; the renter says %s USDC (%s)\n", v.ClaimedUSDC, v.RenterSaysUSDC, v.Reason)
			if v.FloorUSDC != "" {
				fmt.Fprintf(out, "  the renter's countersigned checkpoints prove %s USDC: a decision charges at least that\n", v.FloorUSDC)
			}
			if !v.DecidedAt.IsZero() {
				fmt.Fprintf(out, "  decided %s: charged %s USDC\n", v.DecidedAt.Format(time.RFC3339), v.ChargedUSDC)
			} else {
				fmt.Fprintf(out, "Decide with: gpunex coordinator disputes resolve %s --for provider|renter, or --usdc AMOUNT\n", v.Job)
			}
			return nil
		},
	}
	var req api.ResolveRequest
	resolve := &cobra.Command{
		Use:   "resolve JOB (--for provider|renter | --usdc AMOUNT) [--note TEXT]",
		Short: "Decide a dispute: charge the receipt, what the renter said, or an amount between the checkpoints' floor and the receipt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.ResolveDispute(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Job %s decided: charged %s USDC (the receipt claimed %s)\n", v.Job, v.ChargedUSDC, v.ClaimedUSDC)
			return nil
		},
	}
	resolve.Flags().StringVar(&req.For, "for", "", "provider (the receipt's amount) or renter (what the renter said, at least its checkpoints)")
	resolve.Flags().StringVar(&req.USDC, "usdc", "", "charge this amount instead")
	resolve.Flags().StringVar(&req.Note, "note", "", "why, signed into the decision")
	c.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(list, show, resolve)
	return c
}
