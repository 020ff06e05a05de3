package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
)

// The client commands talk to the running node of --home through its local API
// (node/api); only `gpunex node run` and `gpunex gpus` link the daemon itself.

// home is the node home the command's --home flag names.
func home(cmd *cobra.Command) config.Home {
	h, _ := cmd.Flags().GetString("home")
	return config.Home{Dir: h}
}

// client connects to the API of the node of the command's home.
func client(cmd *cobra.Command) (*api.Client, error) { return api.NewClient(home(cmd)) }

// ask is what most client commands do: connect to the node, ask it with get, and print the
// answer, as JSON with --json, else with text. get has the shape of a method expression of
// the client, such as (*api.Client).Status.
func ask[T any](cmd *cobra.Command, asJSON bool, get func(*api.Client, context.Context) (T, error), text func(io.Writer, T) error) error {
	cl, err := client(cmd)
	if err != nil {
		return err
	}
	v, err := get(cl, cmd.Context())
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), v)
	}
	return text(cmd.OutOrStdout(), v)
}
