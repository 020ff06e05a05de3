package main

import (
	"errors"
	"fmt"
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
	var from, to, rule, note string
	add := &cobra.Command{
		Use:   "add (--from TIME --to TIME | --rule \"first sunday 02:00 2h Europe/Paris\") [--note TEXT]",
		Short: "Plan a maintenance window, or a recurring one (nth weekday of each month)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m := api.Maintenance{Rule: rule, Note: note}
			if rule == "" {
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
		},
	}
	add.Flags().StringVar(&from, "from", "", "start (RFC 3339)")
	add.Flags().StringVar(&to, "to", "", "end (RFC 3339)")
	add.Flags().StringVar(&rule, "rule", "", "recurring: \"first|second|third|fourth|last WEEKDAY HH:MM DURATION [ZONE]\"")
	add.Flags().StringVar(&note, "note", "", "what the maintenance is for")
	var dryRun bool
	importCmd := &cobra.Command{
		Use:   "import FILE|URL [--dry-run]",
		Short: "Plan the maintenance of an iCalendar file or URL: each event's occurrences in the coming 62 days (recurrences expanded)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := calendar.Read(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			now := time.Now()
			wins, err := calendar.Occurrences(data, now, now.Add(protocol.MaintenanceHorizon))
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
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
			fmt.Fprintf(cmd.OutOrStdout(), "%d windows %s, %d planned already (from %s)\n", added, verb, known, args[0])
			return nil
		},
	}
	importCmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be planned")
	export := &cobra.Command{
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
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List planned maintenance and the windows announced",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, v, err := nodeMaintenance(cmd)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			for _, m := range v.Planned {
				what := m.Rule
				if what == "" {
					what = m.From.Local().Format(time.DateTime) + " - " + m.To.Local().Format(time.DateTime)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  %s\n", m.ID, what, m.Note)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "announced windows:")
			for _, w := range v.Announced {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s - %s  %s\n", w.From.Local().Format(time.DateTime), w.To.Local().Format(time.DateTime), w.Note)
			}
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	remove := &cobra.Command{
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
	c.AddCommand(add, list, remove, importCmd, export)
	return c
}
