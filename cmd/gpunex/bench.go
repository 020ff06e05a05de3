package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpunex/gpunex/node/api"

	"github.com/spf13/cobra"
)

func benchCommand() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Benchmark this provider's GPUs, storage and network"}
	var asJSON bool
	run := &cobra.Command{
		Use:   "run [--json]",
		Short: "Run the benchmarks now and sign a new attestation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			errOut := cmd.ErrOrStderr()
			tty := isTerminal(os.Stderr)
			v, err := cl.BenchRun(cmd.Context(), func(step, steps int, what string) {
				if tty {
					done := 30 * step / steps
					fmt.Fprintf(errOut, "\r[%s%s] %d/%d %-50.50s", strings.Repeat("#", done), strings.Repeat(".", 30-done), step, steps, what)
				} else {
					fmt.Fprintf(errOut, "%d/%d %s\n", step, steps, what)
				}
			})
			if tty {
				fmt.Fprintln(errOut)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return printBench(cmd.OutOrStdout(), v)
		},
	}
	jsonFlag(run, &asJSON)
	var showJSON bool
	show := &cobra.Command{
		Use:   "show [--json]",
		Short: "Show the latest benchmark attestation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, showJSON, (*api.Client).Bench, printBench)
		},
	}
	jsonFlag(show, &showJSON)
	c.AddCommand(run, show)
	return c
}

func printBench(w io.Writer, v api.BenchView) error {
	a := v.Attestation
	fmt.Fprintf(w, "attestation %d, %s, driver %s, CUDA %s\n", a.Seq, a.IssuedAt.Local().Format("2006-01-02 15:04:05"), a.DriverVersion, a.CUDAVersion)
	tw := newTable(w)
	fmt.Fprintln(tw, "GPU\tMODEL\tFP32 TFLOPS\tFP16 TFLOPS\tTENSOR TFLOPS\tMEM GB/s\tSCORE\tSTATUS")
	for _, g := range a.GPUs {
		status := "listed"
		if g.Below != "" {
			status = "DELISTED: " + g.Below
		} else if g.PerfScore == 0 {
			status = "not measured"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.0f\t%d\t%s\n", g.UUID, g.Model, g.FP32TFLOPS, g.FP16TFLOPS, g.TensorTFLOPS, g.MemBandwidth, g.PerfScore, status)
	}
	tw.Flush()
	fmt.Fprintf(w, "storage: write %.0f MB/s (fsync), read %.0f MB/s, %.0f IOPS (4 KiB random)\n", a.Storage.SeqWriteMBps, a.Storage.SeqReadMBps, a.Storage.RandReadIOPS)
	fmt.Fprintf(w, "network to %s: %.2f ms round trip, up %.0f Mbit/s, down %.0f Mbit/s\n", a.Network.Peer, a.Network.RTTMilli, a.Network.UpMbps, a.Network.DownMbps)
	if r := v.Receipt; r != nil {
		fmt.Fprintf(w, "network as the coordinator measured it (what counts): %.2f ms round trip, up %.0f Mbit/s, down %.0f Mbit/s\n", r.RTTMilli, r.UpMbps, r.DownMbps)
	}
	if a.HostBelow != "" {
		fmt.Fprintf(w, "host: DELISTED: %s\n", a.HostBelow)
	} else {
		fmt.Fprintln(w, "host: listed (link and disk pass the listing minimums)")
	}
	if v.EnterpriseBelow != "" {
		fmt.Fprintf(w, "Enterprise minimums: not met: %s\n", v.EnterpriseBelow)
	} else {
		fmt.Fprintln(w, "Enterprise minimums: met")
	}
	return nil
}
