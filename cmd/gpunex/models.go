package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// modelsCommand is `gpunex coordinator models`: the coordinator's signed model catalogue.
func modelsCommand() *cobra.Command {
	c := &cobra.Command{Use: "models", Short: "The GPU model catalogue this coordinator signs and gossips (docs/protocols/models.md)"}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the models of the catalogue the node uses, with their datasheet figures",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, asJSON, (*api.Client).Models, printModels)
		},
	}
	jsonFlag(list, &asJSON)

	edit := func(op, use, short string) *cobra.Command {
		var e protocol.ModelEntry
		var caseByCase bool
		cmd := &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := client(cmd)
				if err != nil {
					return err
				}
				e.Model = protocol.NormalizeModel(args[0])
				if op == "set" {
					// Only the flags given change the entry.
					cur, err := cl.Models(cmd.Context())
					if err != nil {
						return err
					}
					found := false
					for _, m := range cur.Models {
						if m.Model == e.Model {
							found = true
							merged := m
							mergeModelFlags(cmd, &merged, e, caseByCase)
							e = merged
						}
					}
					if !found {
						return fmt.Errorf("model %s is not in the catalogue: add it first", e.Model)
					}
				} else if caseByCase {
					e.Supported = false
				}
				v, err := cl.EditModels(cmd.Context(), api.ModelEdit{Op: op, Entry: e})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "catalogue %d signed and gossiped: %s %s\n", v.Seq, e.Model, map[string]string{"add": "added", "set": "changed", "remove": "removed"}[op])
				return nil
			},
		}
		if op == "remove" {
			return cmd
		}
		f := cmd.Flags()
		f.StringSliceVar(&e.Aliases, "alias", nil, "a name as NVML reports it, e.g. \"NVIDIA B200\" (repeat for more)")
		f.IntVar(&e.VRAMGB, "vram-gb", 0, "memory in GB")
		f.Float64Var(&e.FP32TFLOPS, "fp32", 0, "datasheet FP32 TFLOPS")
		f.Float64Var(&e.FP16TFLOPS, "fp16", 0, "datasheet FP16 (non-tensor) TFLOPS")
		f.Float64Var(&e.TensorTFLOPS, "tensor", 0, "datasheet FP16 tensor TFLOPS, dense")
		f.Float64Var(&e.MemBandwidth, "bandwidth", 0, "datasheet memory bandwidth, GB/s")
		f.BoolVar(&e.Supported, "supported", false, "certified without a case-by-case review")
		f.BoolVar(&caseByCase, "case-by-case", false, "reviewed case by case (not on the supported list)")
		f.StringVar(&e.Note, "note", "", "where the figures come from")
		return cmd
	}
	c.AddCommand(list,
		edit("add", "add MODEL --vram-gb N --fp32 X --tensor X --bandwidth X [--fp16 X] [--alias NAME]... [--supported] [--note TEXT]",
			"Add a GPU model: it reaches every node, and providers with it are benchmarked against it, without a release"),
		edit("set", "set MODEL [--vram-gb N] [--fp32 X] [--fp16 X] [--tensor X] [--bandwidth X] [--alias NAME]... [--supported|--case-by-case] [--note TEXT]",
			"Change a model's entry (a corrected datasheet, another alias): only the flags given change"),
		edit("remove", "remove MODEL", "Remove a model: its GPUs are delisted at their next benchmark run"))
	return c
}

// mergeModelFlags sets on m the fields of e whose flags were given.
func mergeModelFlags(cmd *cobra.Command, m *protocol.ModelEntry, e protocol.ModelEntry, caseByCase bool) {
	changed := cmd.Flags().Changed
	if changed("alias") {
		m.Aliases = e.Aliases
	}
	if changed("vram-gb") {
		m.VRAMGB = e.VRAMGB
	}
	if changed("fp32") {
		m.FP32TFLOPS = e.FP32TFLOPS
	}
	if changed("fp16") {
		m.FP16TFLOPS = e.FP16TFLOPS
	}
	if changed("tensor") {
		m.TensorTFLOPS = e.TensorTFLOPS
	}
	if changed("bandwidth") {
		m.MemBandwidth = e.MemBandwidth
	}
	if changed("supported") {
		m.Supported = e.Supported
	}
	if caseByCase {
		m.Supported = false
	}
	if changed("note") {
		m.Note = e.Note
	}
}

func printModels(out io.Writer, v api.ModelsView) error {
	if v.Seq == 0 {
		fmt.Fprintln(out, "catalogue 0: the compiled-in first catalogue (no coordinator catalogue received yet)")
	} else {
		fmt.Fprintf(out, "catalogue %d of coordinator %s, signed %s\n", v.Seq, v.Coordinator, v.IssuedAt.Local().Format(time.DateTime))
	}
	w := newTable(out)
	fmt.Fprintln(w, "MODEL\tVRAM GB\tFP32\tFP16\tTENSOR\tBANDWIDTH GB/s\tREVIEW\tNVML NAMES")
	for _, m := range v.Models {
		review := "supported"
		if !m.Supported {
			review = "case by case"
		}
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t%s\n", m.Model, m.VRAMGB, m.FP32TFLOPS, m.FP16TFLOPS, m.TensorTFLOPS, m.MemBandwidth,
			review, strings.Join(m.Aliases, ", "))
	}
	w.Flush()
	return nil
}

// nodeModels returns the model catalogue of the node of the command's home, the first
// catalogue when the node cannot be asked.
func nodeModels(cmd *cobra.Command) *protocol.ModelCatalogue {
	cl, err := client(cmd)
	if err != nil {
		return protocol.FirstModels()
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
	defer cancel()
	v, err := cl.Models(ctx)
	if err != nil || len(v.Models) == 0 {
		return protocol.FirstModels()
	}
	return &protocol.ModelCatalogue{Coordinator: v.Coordinator, Seq: v.Seq, IssuedAt: v.IssuedAt, Models: v.Models}
}
