package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/devnet"
	"github.com/gpunex/gpunex/protocol"
)

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpunex",
		Short:         "gpunex: a peer-to-peer GPU-compute marketplace node",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("home", defaultHome(), "node home directory (env GPUNEX_HOME)")
	root.AddCommand(versionCommand(), initCommand(), nodeCommand(), statusCommand(), offerCommand(),
		offersCommand(), verifyCommand(), devnetCommand(), applyCommand(), notificationsCommand(), coordinatorCommand(), jobCommand(), gpusCommand(), benchCommand(), scoreCommand(), doctorCommand(), serviceCommand(), maintenanceCommand(), availabilityCommand(), peersCommand(),
		walletCommand(), earningsCommand(), priceCommand(), auditCommand(), dashboardCommand())
	return root
}

func defaultHome() string {
	if h := os.Getenv("GPUNEX_HOME"); h != "" {
		return h
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".gpunex")
	}
	return ".gpunex"
}

func home(cmd *cobra.Command) config.Home {
	h, _ := cmd.Flags().GetString("home")
	return config.Home{Dir: h}
}

func client(cmd *cobra.Command) (*api.Client, error) { return api.NewClient(home(cmd)) }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func versionCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version, the home format and the protocol versions this build speaks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := protocol.Spoken()
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, map[string]any{"version": api.Version, "home_format": config.HomeFormat, "records": v.Records, "streams": v.Streams, "topics": v.Topics})
			}
			fmt.Fprintf(out, "gpunex %s\nhome format %d\n", api.Version, config.HomeFormat)
			kinds := make([]string, 0, len(v.Records))
			for k := range v.Records {
				kinds = append(kinds, string(k))
			}
			sort.Strings(kinds)
			for _, k := range kinds {
				fmt.Fprintf(out, "record %s v%d\n", k, v.Records[protocol.Kind(k)])
			}
			for _, s := range v.Streams {
				fmt.Fprintf(out, "stream %s\n", s)
			}
			for _, s := range v.Topics {
				fmt.Fprintf(out, "topic %s\n", s)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func initCommand() *cobra.Command {
	var role, region, containerd string
	var force bool
	var listen, bootstrap []string
	c := &cobra.Command{
		Use:   "init --home DIR --role provider|renter|coordinator",
		Short: "Create a node home: config.toml, identity key, API token, data directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, id, err := config.Init(home(cmd).Dir, config.InitOptions{Role: role, Version: api.Version, Force: force, Listen: listen, Bootstrap: bootstrap, Region: region, ContainerdAddress: containerd})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "initialised %s node in %s\npeer ID: %s\nedit %s, then run: gpunex node run --home %s\n",
				role, h.Dir, id, h.Path(config.ConfigFile), h.Dir)
			return nil
		},
	}
	c.Flags().StringVar(&role, "role", "", "provider, renter or coordinator")
	c.Flags().BoolVar(&force, "force", false, "replace an existing identity (the node gets a new peer ID)")
	c.Flags().StringSliceVar(&listen, "listen", nil, "p2p.listen multiaddrs (default TCP and QUIC on port 4001)")
	c.Flags().StringSliceVar(&bootstrap, "bootstrap", nil, "p2p.bootstrap: coordinator multiaddrs ending in /p2p/<peer ID>")
	c.Flags().StringVar(&region, "region", "", "provider.region")
	c.Flags().StringVar(&containerd, "containerd", "", "jobs.containerd_address: the containerd socket a provider runs jobs through")
	c.MarkFlagRequired("role")
	return c
}

func statusCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the running node's status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			s, err := cl.Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), s)
			}
			w := cmd.OutOrStdout()
			reach := s.Reachability
			switch {
			case s.Reachability == "private" && s.Relayed:
				reach += ", relayed: peers reach this node through the relay addresses below, then hole-punch a direct connection where the NATs allow"
			case s.Reachability == "private":
				reach += ": no relay reservation yet; peers cannot reach this node"
			case s.Reachability == "unknown":
				reach += ": no peer has checked it yet"
			}
			fmt.Fprintf(w, "peer ID:      %s\nrole:         %s\nversion:      %s\npeers:        %d\noffers known: %d\nup since:     %s\nreachability: %s\naddresses:\n",
				s.PeerID, s.Role, s.Version, s.Peers, s.OffersKnown, s.StartedAt.Format(time.RFC3339), reach)
			for _, a := range s.Addrs {
				fmt.Fprintf(w, "  %s\n", a)
			}
			if sb := s.Sandbox; sb != nil {
				fmt.Fprintln(w, "jobs:")
				if sb.Error != "" {
					fmt.Fprintf(w, "  cannot run:      %s\n", sb.Error)
				}
				egress := sb.Egress
				if sb.EgressMbps > 0 {
					egress += fmt.Sprintf(" (%d Mbit/s per job)", sb.EgressMbps)
				}
				if sb.EgressOff != "" {
					egress += "; off because " + sb.EgressOff
				}
				fmt.Fprintf(w, "  egress:          %s\n", egress)
				if sb.UserNamespaces {
					fmt.Fprintln(w, "  user namespaces: yes")
				} else {
					fmt.Fprintf(w, "  user namespaces: NO: %s\n", sb.UserNamespacesOff)
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func offerCommand() *cobra.Command {
	c := &cobra.Command{Use: "offer", Short: "Manage this provider's offer"}
	var model, usdc string
	var asJSON bool
	set := &cobra.Command{
		Use:   "set-price --model MODEL --usdc PRICE",
		Short: "Set the price per GPU-hour of one model; the new offer is announced at once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := protocol.ParseUSDC(usdc); err != nil {
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
			p, _ := protocol.ParseUSDC(usdc)
			fmt.Fprintf(cmd.OutOrStdout(), "%s now %s USDC per GPU-hour (offer seq %d announced)\n",
				protocol.NormalizeModel(model), p, v.Offer.Seq)
			return nil
		},
	}
	set.Flags().StringVar(&model, "model", "", "GPU model, as declared in config.toml")
	set.Flags().StringVar(&usdc, "usdc", "", "price in USDC per GPU-hour, e.g. 2.10")
	set.Flags().BoolVar(&asJSON, "json", false, "print the new offer as JSON")
	set.MarkFlagRequired("model")
	set.MarkFlagRequired("usdc")
	show := &cobra.Command{
		Use:   "show",
		Short: "Show the offer this provider announces now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.OwnOffer(cmd.Context())
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), v.Offer)
		},
	}
	c.AddCommand(set, show)
	return c
}

func offersCommand() *cobra.Command {
	c := &cobra.Command{Use: "offers", Short: "Find and inspect offers on the network"}
	var model, region, maxPrice, sortBy, tier, coordinator string
	var minGPUs int
	var asJSON, explain, egress bool
	search := &cobra.Command{
		Use:   "search [--model M] [--region R] [--tier T] [--max-price P] [--min-gpus N] [--egress] [--coordinator ID] [--json]",
		Short: "List every live, verified, certified offer that matches, best placed first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if model != "" {
				q.Set("model", model)
			}
			if region != "" {
				q.Set("region", region)
			}
			if maxPrice != "" {
				if _, err := protocol.ParseUSDC(maxPrice); err != nil {
					return fmt.Errorf("--max-price: %w", err)
				}
				q.Set("max_price", maxPrice)
			}
			if minGPUs > 0 {
				q.Set("min_gpus", strconv.Itoa(minGPUs))
			}
			if sortBy != "" {
				q.Set("sort", sortBy)
			}
			if egress {
				q.Set("egress", "true")
			}
			if tier != "" {
				q.Set("tier", tier)
			}
			if coordinator != "" {
				q.Set("coordinator", coordinator)
			}
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			rows, err := cl.Search(cmd.Context(), q)
			if err != nil {
				return err
			}
			if asJSON {
				if rows == nil {
					rows = []api.OfferRow{}
				}
				return printJSON(cmd.OutOrStdout(), rows)
			}
			if len(rows) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no matching offers")
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
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
				fmt.Fprintln(cmd.OutOrStdout(), "* simulated GPUs: no NVIDIA hardware behind them")
			}
			if explain {
				fmt.Fprintln(cmd.OutOrStdout(), "\nmerit = (score/100)^2 x perf x (1 + bonus) / price_vs_market  (highest first; docs/reliability.md)")
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tSCORE\tPERF\tBONUS\tPRICE/MARKET\tMERIT")
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%d\t%.2f\t%.4f\t%.3f\t%.4f\n", r.ID, r.Rank.Score, r.Rank.Perf, r.Rank.Bonus, r.Rank.PriceVsMarket, r.Rank.Merit)
				}
				return w.Flush()
			}
			return nil
		},
	}
	search.Flags().StringVar(&model, "model", "", "GPU model, e.g. H100-80GB")
	search.Flags().StringVar(&region, "region", "", "region, e.g. eu-west")
	search.Flags().StringVar(&maxPrice, "max-price", "", "highest USDC per GPU-hour")
	search.Flags().IntVar(&minGPUs, "min-gpus", 0, "fewest GPUs of the model")
	search.Flags().BoolVar(&egress, "egress", false, "only offers whose jobs may reach the network (public-only or allow)")
	search.Flags().StringVar(&tier, "tier", "", "only offers certified at this tier: community or enterprise")
	search.Flags().StringVar(&coordinator, "coordinator", "", "only offers certified by this coordinator (peer ID), one of trust.coordinators")
	search.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	search.Flags().StringVar(&sortBy, "sort", "", "merit (default: score, performance, price against the market, tier and commitment), placement, price, score or perf")
	search.Flags().BoolVar(&explain, "explain", false, "print each offer's ranking terms")

	var raw bool
	var out string
	show := &cobra.Command{
		Use:   "show ID [--raw] [-o FILE]",
		Short: "Show one offer; --raw writes its signed record exactly as received",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			v, err := cl.OfferRecord(cmd.Context(), args[0])
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
		},
	}
	show.Flags().BoolVar(&raw, "raw", false, "write the signed record (binary libp2p envelope)")
	show.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of standard output")
	c.AddCommand(search, show)
	return c
}

func verifyCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a signed record (signature, format, rules, expiry) and print its content",
		Long: "Check a signed record and print its content. Exits 0 when it verifies, 1 with the\n" +
			"reason when it does not. FILE may be - for standard input. Needs no running node.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			v, err := protocol.Verify(data, time.Now())
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "INVALID: %v\n", err)
				return exitError{1}
			}
			if v.Note != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", v.Note)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"kind": v.Kind, "signer": v.Signer.String(), "record": v.Record})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "OK: %s record signed by %s\n", v.Kind, v.Signer)
			return printJSON(cmd.OutOrStdout(), v.Record)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print kind, signer and record as one JSON object")
	return c
}

func devnetCommand() *cobra.Command {
	var dir, outage string
	var providers int
	var outageAfter, outageFor time.Duration
	c := &cobra.Command{
		Use:   "devnet --dir DIR --providers N",
		Short: "Run a whole local marketplace: a coordinator, N providers with simulated GPUs, a renter",
		Long: `Run a whole local marketplace: a coordinator, N providers with simulated GPUs and a renter,
each a gpunex node process with its home in DIR. Once the renter sees every certified offer,
the devnet writes DIR/devnet.json; then, to show reliability scores at work, it kills one
provider (--outage; by default provider-1, the best-placed, when two or more providers are
certified) and restarts it later on the same home. Ctrl-C stops every node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if providers < 1 || providers > 64 {
				return fmt.Errorf("--providers %d: between 1 and 64", providers)
			}
			if outageAfter < time.Second || outageFor < time.Second {
				return fmt.Errorf("--outage-after %s, --outage-for %s: at least 1s each", outageAfter, outageFor)
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return devnet.Run(ctx, devnet.Options{Dir: dir, Providers: providers, Binary: exe, Out: cmd.OutOrStdout(),
				Outage: outage, OutageAfter: outageAfter, OutageFor: outageFor})
		},
	}
	c.Flags().StringVar(&dir, "dir", "devnet", "directory for the nodes' homes and devnet.json")
	c.Flags().IntVar(&providers, "providers", 4, "number of providers (with 3 or more, the last is rejected and the one before it left pending)")
	c.Flags().StringVar(&outage, "outage", devnet.OutageAuto, "provider to kill once the devnet is ready and restart later, to show its reliability score dropping and recovering: provider-K, auto (provider-1, when two or more providers are certified) or none")
	c.Flags().DurationVar(&outageAfter, "outage-after", devnet.OutageAfter, "time from \"devnet ready\" to the outage")
	c.Flags().DurationVar(&outageFor, "outage-for", devnet.OutageFor, "how long the provider stays offline")
	return c
}
