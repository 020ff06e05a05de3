package main

import (
	"fmt"
	"strings"

	"github.com/gpunex/gpunex/bench"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node"
)

func gpusCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "gpus [--json]",
		Short: "List this machine's GPUs (NVML, or the simulated GPUs the config declares)",
		Long: "List this machine's GPUs: model, UUID, memory, driver and CUDA versions, PCI bus and\n" +
			"health. Reads NVML through the NVIDIA driver; when every GPU in [[provider.gpus]] is\n" +
			"simulated, lists those instead. Needs no running node.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := home(cmd)
			cfg, err := h.Config()
			if err != nil {
				return err
			}
			key, err := h.Identity()
			if err != nil {
				return err
			}
			id, _ := peer.IDFromPrivateKey(key)
			gpus, err := node.DetectGPUs(cfg, id)
			if err != nil {
				return err
			}
			if asJSON {
				if gpus == nil {
					gpus = []bench.GPUInfo{}
				}
				return printJSON(cmd.OutOrStdout(), gpus)
			}
			if len(gpus) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no GPUs found")
				return nil
			}
			w := newTable(cmd.OutOrStdout())
			fmt.Fprintln(w, "#\tMODEL\tVRAM\tDRIVER\tCUDA\tPCI\tTEMP\tHEALTH\tUUID")
			for _, g := range gpus {
				health := "ok"
				switch {
				case g.Health.Error != "":
					health = "ERROR: " + g.Health.Error
				case len(g.Health.Throttle) > 0:
					health = "throttled: " + strings.Join(g.Health.Throttle, ",")
				case g.Health.ECCUncorrected > 0:
					health = fmt.Sprintf("%d uncorrected ECC errors", g.Health.ECCUncorrected)
				}
				model := g.Model
				if g.Simulated {
					model += "*"
				}
				fmt.Fprintf(w, "%d\t%s\t%d GB\t%s\t%s\t%s\t%d C\t%s\t%s\n", g.Index, model, g.VRAMGB, g.DriverVersion, g.CUDAVersion, g.PCIBusID,
					g.Health.TemperatureC, health, g.UUID)
			}
			return w.Flush()
		},
	}
	jsonArrayFlag(c, &asJSON)
	return c
}
