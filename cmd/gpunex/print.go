package main

import (
	"encoding/json"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// Printing shared by the commands: JSON for --json, aligned tables for people.

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonFlag declares a command's --json flag for one JSON value.
func jsonFlag(c *cobra.Command, asJSON *bool) {
	c.Flags().BoolVar(asJSON, "json", false, "print JSON")
}

// jsonArrayFlag declares a list command's --json flag.
func jsonArrayFlag(c *cobra.Command, asJSON *bool) {
	c.Flags().BoolVar(asJSON, "json", false, "print a JSON array")
}

// newTable aligns tab-separated columns; Flush writes them.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 2, 2, ' ', 0) }

// dash stands for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
