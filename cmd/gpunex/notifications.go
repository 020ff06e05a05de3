package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

func notificationsCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "notifications [--json]",
		Short: "List the notices this node received (coordinator decisions, ...)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, asJSON, (*api.Client).Notifications, printNotifications)
		},
	}
	jsonArrayFlag(c, &asJSON)
	return c
}

func printNotifications(out io.Writer, ns []api.NotificationView) error {
	if len(ns) == 0 {
		fmt.Fprintln(out, "no notifications")
	}
	for _, n := range ns {
		fmt.Fprintf(out, "%s  %s\n", n.ReceivedAt.Local().Format(time.DateTime), n.Subject)
		if n.Body != "" {
			fmt.Fprintf(out, "    %s\n", strings.ReplaceAll(n.Body, "\n", "\n    "))
		}
	}
	return nil
}
