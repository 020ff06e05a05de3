package main

import (
	"context"
	"fmt"
	"io"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

func peersCommand() *cobra.Command {
	c := &cobra.Command{Use: "peers", Short: "How this node is connected to other peers"}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show PEER_ID [--json]",
		Short: "Say whether this node is connected to a peer directly or through a relay, and over which addresses",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			peer := func(cl *api.Client, ctx context.Context) (api.PeerView, error) { return cl.Peer(ctx, args[0]) }
			return ask(cmd, asJSON, peer, printPeer)
		},
	}
	jsonFlag(show, &asJSON)
	c.AddCommand(show)
	return c
}

func printPeer(w io.Writer, v api.PeerView) error {
	path := v.Path
	if path == "" {
		path = "not connected"
	}
	fmt.Fprintf(w, "%s: %s\n", v.ID, path)
	for _, c := range v.Conns {
		fmt.Fprintf(w, "  %s\n", c)
	}
	return nil
}
