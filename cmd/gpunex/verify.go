package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/protocol"
)

func verifyCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a signed record (signature, format, rules, expiry) and print its content",
		Long: "Check a signed record and print its content. Exits 0 when it verifies, 1 with the\n" +
			"reason when it does not. FILE may be - for standard input. Needs no running node.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runVerify(cmd, args[0], asJSON) },
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print kind, signer and record as one JSON object")
	return c
}

func runVerify(cmd *cobra.Command, file string, asJSON bool) error {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
	} else {
		data, err = os.ReadFile(file)
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
}
