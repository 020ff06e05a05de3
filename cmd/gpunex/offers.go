package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// `gpunex offer`: a provider's own offer; `gpunex offers`: the offers of the network.

func offerCommand() *cobra.Command {
	c := &cobra.Command{Use: "offer", Short: "Manage this provider's offer"}
	c.AddCommand(offerSetPriceCommand(), offerShowCommand())
	return c
}

func offerSetPriceCommand() *cobra.Command {
	var model, usdc string
	var asJSON bool
	c := &cobra.Command{
		Use:   "set-price --model MODEL --usdc PRICE",
		Short: "Set the price per GPU-hour of one model; the new offer is announced at once",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runSetPrice(cmd, model, usdc, asJSON) },
	}
	c.Flags().StringVar(&model, "model", "", "GPU model, as declared in config.toml")
	c.Flags().StringVar(&usdc, "usdc", "", "price in USDC per GPU-hour, e.g. 2.10")
	c.Flags().BoolVar(&asJSON, "json", false, "print the new offer as JSON")
	c.MarkFlagRequired("model")
	c.MarkFlagRequired("usdc")
	return c
}

func runSetPrice(cmd *cobra.Command, model, usdc string, asJSON bool) error {
	p, err := protocol.ParseUSDC(usdc)
	if err != nil {
		return err
	}
	cl, err := client(cmd)
	if err != nil {
		return err
	}
	v, err := cl.SetPrice(cmd.Context(), model, usdc)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), v.Offer)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s now %s USDC per GPU-hour (offer seq %d announced)\n",
		protocol.NormalizeModel(model), p, v.Offer.Seq)
	return nil
}

func offerShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the offer this provider announces now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, false, (*api.Client).OwnOffer, func(w io.Writer, v api.OfferRecordView) error { return printJSON(w, v.Offer) })
		},
	}
}

func offersCommand() *cobra.Command {
	c := &cobra.Command{Use: "offers", Short: "Find and inspect offers on the network"}
	c.AddCommand(offersSearchCommand(), offersShowCommand())
	return c
}

// offerSearch is what `gpunex offers search` asks for and how it prints it.
type offerSearch struct {
	model, region, maxPrice, sortBy, tier, coordinator string
	minGPUs                                            int
	asJSON, explain, egress, unbenchmarked             bool
}

func offersSearchCommand() *cobra.Command {
	var o offerSearch
	c := &cobra.Command{
		Use:   "search [--model M] [--region R] [--tier T] [--max-price P] [--min-gpus N] [--egress] [--coordinator ID] [--unbenchmarked] [--json]",
		Short: "List every live, verified, certified, benchmarked offer that matches, best placed first",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runOffersSearch(cmd, o) },
	}
	f := c.Flags()
	f.StringVar(&o.model, "model", "", "GPU model, e.g. H100-80GB")
	f.StringVar(&o.region, "region", "", "region, e.g. eu-west")
	f.StringVar(&o.maxPrice, "max-price", "", "highest USDC per GPU-hour")
	f.IntVar(&o.minGPUs, "min-gpus", 0, "fewest GPUs of the model")
	f.BoolVar(&o.egress, "egress", false, "only offers whose jobs may reach the network (public-only or allow)")
	f.StringVar(&o.tier, "tier", "", "only offers certified at this tier: community or enterprise")
	f.StringVar(&o.coordinator, "coordinator", "", "only offers certified by this coordinator (peer ID), one of trust.coordinators")
	f.BoolVar(&o.unbenchmarked, "unbenchmarked", false, "also offers no fresh benchmark attestation vouches for (none, expired, or fewer GPUs certified than offered), each with the reason")
	jsonArrayFlag(c, &o.asJSON)
	f.StringVar(&o.sortBy, "sort", "", "merit (default: score, performance, price against the market, tier and commitment), placement, price, score or perf")
	f.BoolVar(&o.explain, "explain", false, "print each offer's ranking terms")
	return c
}

// query is the search's API query (GET /v1/offers).
func (o offerSearch) query() (url.Values, error) {
	q := url.Values{}
	if o.model != "" {
		q.Set("model", o.model)
	}
	if o.region != "" {
		q.Set("region", o.region)
	}
	if o.maxPrice != "" {
		if _, err := protocol.ParseUSDC(o.maxPrice); err != nil {
			return nil, fmt.Errorf("--max-price: %w", err)
		}
		q.Set("max_price", o.maxPrice)
	}
	if o.minGPUs > 0 {
		q.Set("min_gpus", strconv.Itoa(o.minGPUs))
	}
	if o.sortBy != "" {
		q.Set("sort", o.sortBy)
	}
	if o.egress {
		q.Set("egress", "true")
	}
	if o.tier != "" {
		q.Set("tier", o.tier)
	}
	if o.coordinator != "" {
		q.Set("coordinator", o.coordinator)
	}
	if o.unbenchmarked {
		q.Set("unbenchmarked", "true")
	}
	return q, nil
}

func runOffersSearch(cmd *cobra.Command, o offerSearch) error {
	q, err := o.query()
	if err != nil {
		return err
	}
	search := func(cl *api.Client, ctx context.Context) ([]api.OfferRow, error) {
		rows, err := cl.Search(ctx, q)
		if rows == nil && err == nil {
			rows = []api.OfferRow{} // --json prints [], not null
		}
		return rows, err
	}
	return ask(cmd, o.asJSON, search, func(w io.Writer, rows []api.OfferRow) error { return printOffers(w, rows, o.explain, o.unbenchmarked) })
}

// printOffers writes the offers found as a table and, with explain, their ranking terms;
// unbenchmarked says the search asked for offers without a fresh benchmark attestation.
func printOffers(out io.Writer, rows []api.OfferRow, explain, unbenchmarked bool) error {
	if len(rows) == 0 {
		fmt.Fprintln(out, "no matching offers")
		if !unbenchmarked {
			fmt.Fprintln(out, "(offers without a fresh benchmark attestation are left out: --unbenchmarked lists them)")
		}
		return nil
	}
	w := newTable(out)
	fmt.Fprintln(w, "MODEL\tGPUS\tVRAM\tUSDC/GPU-H\tREGION\tTIER\tEGRESS\tEXPIRES\tID")
	sim := false
	for _, r := range rows {
		model := r.Model
		if r.Simulated {
			model += "*"
			sim = true
		}
		egress := r.Egress
		if egress == "" {
			egress = "none"
		} else if r.EgressMbps > 0 {
			egress += fmt.Sprintf(" (%d Mbit/s)", r.EgressMbps)
		}
		fmt.Fprintf(w, "%s\t%d\t%d GB\t%s\t%s\t%s\t%s\t%s\t%s\n", model, r.GPUs, r.VRAMGB, r.PriceUSDC, r.Region,
			r.Tier, egress, r.ExpiresAt.Local().Format("15:04:05"), r.ID)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if sim {
		fmt.Fprintln(out, "* simulated GPUs: no NVIDIA hardware behind them")
	}
	for _, r := range rows {
		if r.Unbenchmarked != "" {
			fmt.Fprintf(out, "unbenchmarked %s: %s\n", r.ID, r.Unbenchmarked)
		}
	}
	if explain {
		fmt.Fprintln(out, "\nmerit = (score/100)^2 x perf x (1 + bonus) / price_vs_market  (highest first; docs/reliability.md)")
		w := newTable(out)
		fmt.Fprintln(w, "ID\tSCORE\tPERF\tBONUS\tPRICE/MARKET\tMERIT")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%d\t%.2f\t%.4f\t%.3f\t%.4f\n", r.ID, r.Rank.Score, r.Rank.Perf, r.Rank.Bonus, r.Rank.PriceVsMarket, r.Rank.Merit)
		}
		return w.Flush()
	}
	return nil
}

func offersShowCommand() *cobra.Command {
	var raw bool
	var out string
	c := &cobra.Command{
		Use:   "show ID [--raw] [-o FILE]",
		Short: "Show one offer; --raw writes its signed record exactly as received",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return runOffersShow(cmd, args[0], raw, out) },
	}
	c.Flags().BoolVar(&raw, "raw", false, "write the signed record (binary libp2p envelope)")
	c.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of standard output")
	return c
}

func runOffersShow(cmd *cobra.Command, id string, raw bool, out string) error {
	cl, err := client(cmd)
	if err != nil {
		return err
	}
	v, err := cl.OfferRecord(cmd.Context(), id)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if raw {
		_, err = w.Write(v.Raw)
		return err
	}
	return printJSON(w, v.Offer)
}
