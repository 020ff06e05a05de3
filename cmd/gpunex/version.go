package main

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/protocol"
)

func versionCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version, the home format and the protocol versions this build speaks",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runVersion(cmd, asJSON) },
	}
	jsonFlag(c, &asJSON)
	return c
}

func runVersion(cmd *cobra.Command, asJSON bool) error {
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
}
