package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

func earningsCommand() *cobra.Command {
	var period, from, to, by string
	var asJSON bool
	c := &cobra.Command{
		Use:   "earnings [--period week|month] [--from DATE --to DATE] [--by gpu|model] [--json]",
		Short: "Show a provider's earnings (after commission), pending payouts and payout history",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{"period": {period}, "from": {from}, "to": {to}, "by": {by}}
			earnings := func(cl *api.Client, ctx context.Context) (api.EarningsView, error) { return cl.Earnings(ctx, q) }
			return ask(cmd, asJSON, earnings, printEarnings)
		},
	}
	c.Flags().StringVar(&period, "period", "month", "week or month: the current one")
	c.Flags().StringVar(&from, "from", "", "start date (2006-01-02), instead of the period's")
	c.Flags().StringVar(&to, "to", "", "end date (2006-01-02)")
	c.Flags().StringVar(&by, "by", "model", "group by gpu or model")
	jsonFlag(c, &asJSON)
	return c
}

// printEarnings writes the period's totals, the earnings by group and by job, and the
// payouts.
func printEarnings(out io.Writer, v api.EarningsView) error {
	fmt.Fprintf(out, "%s to %s: earned %s USDC (charged %s, commission %s)\npending payout %s USDC; paid out so far %s USDC\n",
		v.From.Format("2006-01-02"), v.To.Format("2006-01-02 15:04"), v.TotalUSDC, v.ChargedUSDC, v.CommissionUSDC, v.PendingUSDC, v.PaidUSDC)
	w := newTable(out)
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
		w = newTable(out)
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
			market := func(cl *api.Client, ctx context.Context) ([]api.PriceAdvice, error) {
				return cl.Market(ctx, model, region)
			}
			return ask(cmd, asJSON, market, printPriceAdvice)
		},
	}
	rec.Flags().StringVar(&model, "model", "", "GPU model (all when empty)")
	rec.Flags().StringVar(&region, "region", "", "region (this provider's when empty)")
	jsonFlag(rec, &asJSON)
	c.AddCommand(rec)
	return c
}

func printPriceAdvice(out io.Writer, adv []api.PriceAdvice) error {
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
}
