package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/calendar"
	"github.com/gpunex/gpunex/protocol"

	"github.com/spf13/cobra"
)

// nodeMaintenance returns a client of the node and its planned and announced maintenance.
func nodeMaintenance(cmd *cobra.Command) (*api.Client, api.MaintenanceView, error) {
	cl, err := client(cmd)
	if err != nil {
		return nil, api.MaintenanceView{}, err
	}
	v, err := cl.Maintenance(cmd.Context())
	return cl, v, err
}

func maintenanceCommand() *cobra.Command {
	c := &cobra.Command{Use: "maintenance", Short: "Plan maintenance: no uptime is owed inside its windows"}
	c.AddCommand(maintenanceAddCommand(), maintenanceListCommand(), maintenanceRemoveCommand(), maintenanceImportCommand(), maintenanceExportCommand())
	return c
}

func maintenanceAddCommand() *cobra.Command {
	var from, to string
	var m api.Maintenance
	c := &cobra.Command{
		Use:   "add (--from TIME --to TIME | --rule \"first sunday 02:00 2h Europe/Paris\") [--note TEXT]",
		Short: "Plan a maintenance window, or a recurring one (nth weekday of each month)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runMaintenanceAdd(cmd, m, from, to) },
	}
	c.Flags().StringVar(&from, "from", "", "start (RFC 3339)")
	c.Flags().StringVar(&to, "to", "", "end (RFC 3339)")
	c.Flags().StringVar(&m.Rule, "rule", "", "recurring: \"first|second|third|fourth|last WEEKDAY HH:MM DURATION [ZONE]\"")
	c.Flags().StringVar(&m.Note, "note", "", "what the maintenance is for")
	return c
}

// runMaintenanceAdd plans m: its rule, or the window from-to.
func runMaintenanceAdd(cmd *cobra.Command, m api.Maintenance, from, to string) error {
	if m.Rule == "" {
		if from == "" || to == "" {
			return errors.New("give --from and --to (RFC 3339, e.g. 2026-12-06T02:00:00+01:00), or --rule")
		}
		var err error
		if m.From, err = time.Parse(time.RFC3339, from); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		if m.To, err = time.Parse(time.RFC3339, to); err != nil {
			return fmt.Errorf("--to: %w", err)
		}
	}
	cl, err := client(cmd)
	if err != nil {
		return err
	}
	v, err := cl.AddMaintenance(cmd.Context(), m)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "maintenance %s planned; announced in the offer now\n", v.ID)
	return nil
}

func maintenanceImportCommand() *cobra.Command {
	var dryRun bool
	c := &cobra.Command{
		Use:   "import FILE|URL [--dry-run]",
		Short: "Plan the maintenance of an iCalendar file or URL: each event's occurrences in the coming 62 days (recurrences expanded)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return runMaintenanceImport(cmd, args[0], dryRun) },
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be planned")
	return c
}

// runMaintenanceImport plans each occurrence of the calendar's events not planned yet.
func runMaintenanceImport(cmd *cobra.Command, src string, dryRun bool) error {
	data, err := calendar.Read(cmd.Context(), src)
	if err != nil {
		return err
	}
	now := time.Now()
	wins, err := calendar.Occurrences(data, now, now.Add(protocol.MaintenanceHorizon))
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	cl, v, err := nodeMaintenance(cmd)
	if err != nil {
		return err
	}
	have := map[[2]int64]bool{}
	for _, m := range v.Planned {
		have[[2]int64{m.From.Unix(), m.To.Unix()}] = true
	}
	added, known := 0, 0
	for _, w := range wins {
		if have[[2]int64{w.From.Unix(), w.To.Unix()}] {
			known++
			continue
		}
		if dryRun {
			fmt.Fprintf(cmd.OutOrStdout(), "would plan %s - %s  %s\n", w.From.Local().Format(time.DateTime), w.To.Local().Format(time.DateTime), w.Note)
			added++
			continue
		}
		if _, err := cl.AddMaintenance(cmd.Context(), api.Maintenance{From: w.From, To: w.To, Note: w.Note}); err != nil {
			return fmt.Errorf("%s - %s: %w", w.From.Format(time.RFC3339), w.To.Format(time.RFC3339), err)
		}
		added++
	}
	verb := "planned"
	if dryRun {
		verb = "would be planned"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%d windows %s, %d planned already (from %s)\n", added, verb, known, src)
	return nil
}

func maintenanceExportCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "export",
		Short: "Print the maintenance windows the provider announces as an iCalendar (.ics)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, v, err := nodeMaintenance(cmd)
			if err != nil {
				return err
			}
			var wins []calendar.Window
			for _, w := range v.Announced {
				wins = append(wins, calendar.Window{From: w.From, To: w.To, Note: w.Note})
			}
			return calendar.Write(cmd.OutOrStdout(), "gpunex maintenance", wins, time.Now())
		},
	}
}

func maintenanceListCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List planned maintenance and the windows announced",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, asJSON, (*api.Client).Maintenance, printMaintenance)
		},
	}
	jsonFlag(c, &asJSON)
	return c
}

func printMaintenance(out io.Writer, v api.MaintenanceView) error {
	for _, m := range v.Planned {
		what := m.Rule
		if what == "" {
			what = m.From.Local().Format(time.DateTime) + " - " + m.To.Local().Format(time.DateTime)
		}
		fmt.Fprintf(out, "%s  %s  %s\n", m.ID, what, m.Note)
	}
	fmt.Fprintln(out, "announced windows:")
	for _, w := range v.Announced {
		fmt.Fprintf(out, "  %s - %s  %s\n", w.From.Local().Format(time.DateTime), w.To.Local().Format(time.DateTime), w.Note)
	}
	return nil
}

func maintenanceRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove ID",
		Short: "Remove planned maintenance",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := client(cmd)
			if err != nil {
				return err
			}
			return cl.RemoveMaintenance(cmd.Context(), args[0])
		},
	}
}
