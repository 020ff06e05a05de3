package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// rootCommand is `gpunex`: every command group hangs from it, and its --home flag names the
// node home every command works on.
func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpunex",
		Short:         "gpunex: a peer-to-peer GPU-compute marketplace node",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("home", defaultHome(), "node home directory (env GPUNEX_HOME)")
	root.AddCommand(versionCommand(), initCommand(), nodeCommand(), statusCommand(), offerCommand(),
		offersCommand(), verifyCommand(), devnetCommand(), applyCommand(), notificationsCommand(), coordinatorCommand(), jobCommand(), gpusCommand(), benchCommand(), scoreCommand(), doctorCommand(), serviceCommand(), maintenanceCommand(), availabilityCommand(), peersCommand(),
		walletCommand(), payoutCommand(), earningsCommand(), priceCommand(), auditCommand(), dashboardCommand())
	return root
}

func defaultHome() string {
	if h := os.Getenv("GPUNEX_HOME"); h != "" {
		return h
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".gpunex")
	}
	return ".gpunex"
}
