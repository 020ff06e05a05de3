package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
)

func initCommand() *cobra.Command {
	var o config.InitOptions
	c := &cobra.Command{
		Use:   "init --home DIR --role provider|renter|coordinator",
		Short: "Create a node home: config.toml, identity key, API token, data directory",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runInit(cmd, o) },
	}
	c.Flags().StringVar(&o.Role, "role", "", "provider, renter or coordinator")
	c.Flags().BoolVar(&o.Force, "force", false, "replace an existing identity (the node gets a new peer ID)")
	c.Flags().StringSliceVar(&o.Listen, "listen", nil, "p2p.listen multiaddrs (default TCP and QUIC on port 4001)")
	c.Flags().StringSliceVar(&o.Bootstrap, "bootstrap", nil, "p2p.bootstrap: coordinator multiaddrs ending in /p2p/<peer ID>")
	c.Flags().StringVar(&o.Region, "region", "", "provider.region")
	c.Flags().StringVar(&o.ContainerdAddress, "containerd", "", "jobs.containerd_address: the containerd socket a provider runs jobs through")
	c.MarkFlagRequired("role")
	return c
}

// runInit creates the home with the options the flags set.
func runInit(cmd *cobra.Command, o config.InitOptions) error {
	o.Version = api.Version
	h, id, err := config.Init(home(cmd).Dir, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "initialised %s node in %s\npeer ID: %s\nedit %s, then run: gpunex node run --home %s\n",
		o.Role, h.Dir, id, h.Path(config.ConfigFile), h.Dir)
	return nil
}
