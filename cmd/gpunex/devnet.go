package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/devnet"
)

func devnetCommand() *cobra.Command {
	var o devnet.Options
	c := &cobra.Command{
		Use:   "devnet --dir DIR --providers N",
		Short: "Run a whole local marketplace: a coordinator, N providers with simulated GPUs, a renter",
		Long: `Run a whole local marketplace: a coordinator, N providers with simulated GPUs and a renter,
each a gpunex node process with its home in DIR. Once the renter sees every certified offer,
the devnet writes DIR/devnet.json; then, to show reliability scores at work, it kills one
provider (--outage; by default provider-1, the best-placed, when two or more providers are
certified) and restarts it later on the same home. Ctrl-C stops every node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDevnet(cmd, o) },
	}
	c.Flags().StringVar(&o.Dir, "dir", "devnet", "directory for the nodes' homes and devnet.json")
	c.Flags().IntVar(&o.Providers, "providers", 4, "number of providers (with 3 or more, the last is rejected and the one before it left pending)")
	c.Flags().StringVar(&o.Outage, "outage", devnet.OutageAuto, "provider to kill once the devnet is ready and restart later, to show its reliability score dropping and recovering: provider-K, auto (provider-1, when two or more providers are certified) or none")
	c.Flags().DurationVar(&o.OutageAfter, "outage-after", devnet.OutageAfter, "time from \"devnet ready\" to the outage")
	c.Flags().DurationVar(&o.OutageFor, "outage-for", devnet.OutageFor, "how long the provider stays offline")
	return c
}

// runDevnet runs the devnet of this binary until SIGINT or SIGTERM.
func runDevnet(cmd *cobra.Command, o devnet.Options) error {
	if o.Providers < 1 || o.Providers > 64 {
		return fmt.Errorf("--providers %d: between 1 and 64", o.Providers)
	}
	if o.OutageAfter < time.Second || o.OutageFor < time.Second {
		return fmt.Errorf("--outage-after %s, --outage-for %s: at least 1s each", o.OutageAfter, o.OutageFor)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	o.Binary, o.Out = exe, cmd.OutOrStdout()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return devnet.Run(ctx, o)
}
