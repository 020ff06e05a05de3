package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/api"
)

func statusCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the running node's status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, asJSON, (*api.Client).Status, printStatus)
		},
	}
	jsonFlag(c, &asJSON)
	return c
}

// printStatus writes the node's status: identity, peers, reachability and, on a provider,
// whether it can run jobs.
func printStatus(w io.Writer, s api.Status) error {
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
}
