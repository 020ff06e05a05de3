package main

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/node/calendar"
	"github.com/gpunex/gpunex/protocol"

	"github.com/spf13/cobra"
)

// printAvailability writes what a provider's availability is.
func printAvailability(w io.Writer, v api.AvailabilityView) error {
	fmt.Fprintf(w, "availability: %s\n", v.Text)
	state := "closed: the offer is withdrawn and jobs are refused"
	if v.OpenNow {
		state = "open"
	}
	if v.NextChange != nil {
		state += ", until " + v.NextChange.Local().Format(time.DateTime+" MST")
	}
	fmt.Fprintf(w, "now: %s\n", state)
	switch {
	case v.FromConfig:
		fmt.Fprintln(w, "set by: [provider.availability] of the config")
	case v.Source != "":
		fmt.Fprintf(w, "set by: calendar %s, %s\n", v.Source, v.SetAt.Local().Format(time.DateTime))
	default:
		fmt.Fprintf(w, "set by: gpunex availability set, %s\n", v.SetAt.Local().Format(time.DateTime))
	}
	if v.Follow != "" {
		last := "not read again yet"
		if !v.Checked.IsZero() {
			last = "last read " + v.Checked.Local().Format(time.DateTime)
		}
		fmt.Fprintf(w, "followed: read again every %s (%s)\n", v.Follow, last)
	}
	if v.Error != "" {
		fmt.Fprintf(w, "the last read was not applied: %s\n", v.Error)
	}
	return nil
}

func availabilityCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "availability",
		Short: "Show or change the weekly hours the GPUs are offered in; changes apply at once, without a restart",
	}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show [--json]",
		Short: "Show the availability in force and whether the GPUs are offered now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, asJSON, (*api.Client).Availability, printAvailability)
		},
	}
	jsonFlag(show, &asJSON)
	var timezone string
	set := &cobra.Command{
		Use:   `set [--timezone ZONE] "DAYS HH:MM-HH:MM"... | 24/7`,
		Short: `Set the weekly windows, e.g. set --timezone Europe/Paris "mon-fri 18:00-08:00" "sat,sun 00:00-24:00"`,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := protocol.ParseSchedule(timezone, args); err != nil {
				return err
			}
			return putAvailability(cmd, api.Availability{Timezone: timezone, Windows: args})
		},
	}
	set.Flags().StringVar(&timezone, "timezone", "UTC", "IANA time zone of the windows")
	var follow time.Duration
	var dryRun bool
	importCmd := &cobra.Command{
		Use:   "import FILE|URL [--follow 6h] [--dry-run]",
		Short: "Set the availability from an iCalendar of weekly events (.ics); --follow reads a URL again on that schedule",
		Long: `Set the availability from an iCalendar file or URL (RFC 5545) whose events repeat every
week (RRULE FREQ=WEEKLY with BYDAY, or FREQ=DAILY), in one time zone: each event is a window
of availability, in the wall-clock hours of its zone. One-off events, events every other week
and exceptions are refused: plan absences with "gpunex maintenance import".

With --follow, the node itself reads the URL (https://, or http:// on this host only) again
at that interval (5m to 168h) and applies what changed; a read that fails, or a calendar
that no longer reads as weekly, leaves the availability as it was and is shown by
"gpunex availability show".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src := args[0]
			if err := calendar.CheckFollow(src); follow != 0 && err != nil {
				return fmt.Errorf("--follow: %w", err)
			}
			data, err := calendar.Read(cmd.Context(), src)
			if err != nil {
				return err
			}
			sched, err := calendar.Weekly(data, time.Now())
			if err != nil {
				return fmt.Errorf("%s: %w", src, err)
			}
			if dryRun {
				fmt.Fprintf(cmd.OutOrStdout(), "would set the availability to: %s\n", sched)
				return nil
			}
			if !calendar.IsURL(src) {
				if abs, err := filepath.Abs(src); err == nil {
					src = abs
				}
			}
			a := api.Availability{Timezone: sched.Timezone(), Windows: sched.Windows(), Source: src}
			if follow != 0 {
				a.Follow = follow.String()
			}
			return putAvailability(cmd, a)
		},
	}
	importCmd.Flags().DurationVar(&follow, "follow", 0, "read the URL again at this interval and apply what changed")
	importCmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the availability the calendar gives, and change nothing")
	export := &cobra.Command{
		Use:   "export",
		Short: "Print the availability as an iCalendar (.ics) of weekly events",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := nodeAvailability(cmd)
			if err != nil {
				return err
			}
			sched, err := protocol.ParseSchedule(v.Timezone, v.Windows)
			if err != nil {
				return err
			}
			return calendar.WriteWeekly(cmd.OutOrStdout(), "gpunex availability", sched, time.Now())
		},
	}
	reset := &cobra.Command{
		Use:   "reset",
		Short: "Go back to [provider.availability] of the config (and stop following a calendar)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ask(cmd, false, (*api.Client).ResetAvailability, printAvailability)
		},
	}
	c.AddCommand(show, set, importCmd, export, reset)
	return c
}

// putAvailability sets the availability and prints it.
func putAvailability(cmd *cobra.Command, a api.Availability) error {
	cl, err := client(cmd)
	if err != nil {
		return err
	}
	v, err := cl.SetAvailability(cmd.Context(), a)
	if err != nil {
		return err
	}
	printAvailability(cmd.OutOrStdout(), v)
	fmt.Fprintln(cmd.OutOrStdout(), "applied: the offer is announced again with it")
	return nil
}

// nodeAvailability asks the running node for its availability.
func nodeAvailability(cmd *cobra.Command) (api.AvailabilityView, error) {
	cl, err := client(cmd)
	if err != nil {
		return api.AvailabilityView{}, err
	}
	return cl.Availability(cmd.Context())
}
